"""Env steps/s of a Brax vector env (`brax/<name>-v0`, all sub-envs in one jitted step) against Gymnasium's MuJoCo
vector env of the same robot (C MuJoCo, one sub-env after another in Python), at several numbers of envs.

Random actions (drawn before timing, uniform in [-1, 1]), each cell stepped for about --seconds after a warm-up;
Brax's compile time (the first reset compiles the one step function, see `rlfoundry.envs.brax`) is reported on its
own and left out of its steps/s. Both envs use NEXT_STEP autoreset and a 1000-step time limit. Brax runs on JAX's
default device (a GPU with `jax[cuda12]`, else the CPU) and its XLA CPU code may use every core; MuJoCo's sync vector
env steps on one core, its async one runs a worker process per sub-env (--async-envs).

    python benchmarks/brax_vs_mujoco.py [--env halfcheetah] [--backends generalized,spring]
                                        [--envs 1,64,1024] [--seconds 3] [--async-envs 64]

--env: a Brax env with a Gymnasium MuJoCo twin (halfcheetah: HalfCheetah-v5, ant: Ant-v5, hopper: Hopper-v5, ...).
--backends: Brax physics pipelines (generalized is every env's default and the closest to MuJoCo; positional and
spring are cheaper approximations, spring the fastest on a CPU; mjx is MuJoCo's own JAX port, built for
accelerators).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import jax
import numpy as np
from gymnasium.vector import AutoresetMode

from rlfoundry.envs import brax as brax_envs
from rlfoundry.run.hardware import machine

MUJOCO_TWINS = {"halfcheetah": "HalfCheetah-v5", "ant": "Ant-v5", "hopper": "Hopper-v5", "walker2d": "Walker2d-v5",
                "humanoid": "Humanoid-v5", "humanoidstandup": "HumanoidStandup-v5", "swimmer": "Swimmer-v5",
                "reacher": "Reacher-v5", "pusher": "Pusher-v5", "inverted_pendulum": "InvertedPendulum-v5",
                "inverted_double_pendulum": "InvertedDoublePendulum-v5"}
ACTION_BATCHES = 8  # distinct random action batches, cycled


class CompileClock:
    """Seconds XLA spent compiling, from JAX's monitoring events."""

    def __init__(self):
        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, seconds: float, **_) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.seconds += seconds


def steps_per_second(envs, seconds: float, rng: np.random.Generator, min_steps: int = 3) -> tuple[float, int]:
    """(env steps/s, vector steps timed) over about `seconds` of stepping with random actions."""
    shape = envs.action_space.shape
    actions = [rng.uniform(-1.0, 1.0, shape).astype(np.float32) for _ in range(ACTION_BATCHES)]
    for a in actions[:2]:  # warm-up
        envs.step(a)
    steps, start = 0, time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < seconds:
        envs.step(actions[steps % ACTION_BATCHES])
        steps += 1
    return envs.num_envs * steps / (time.perf_counter() - start), steps


def brax_cell(name: str, backend: str, num_envs: int, seconds: float, clock: CompileClock) -> dict:
    envs = gym.make_vec(brax_envs.env_id(name), num_envs=num_envs, vectorization_mode="vector_entry_point",
                        backend=backend)
    before, start = clock.seconds, time.perf_counter()
    envs.reset(seed=0)  # compiles the step
    first = time.perf_counter() - start
    sps, steps = steps_per_second(envs, seconds, np.random.default_rng(0))
    envs.close()
    return {"sps": sps, "steps": steps, "first_reset": first, "xla_compile": clock.seconds - before}


def mujoco_cell(env_id: str, num_envs: int, mode: str, seconds: float) -> dict:
    vector_kwargs = {"autoreset_mode": AutoresetMode.NEXT_STEP}
    if mode == "async":  # workers from a fresh server process: forking this one, where JAX runs threads, can deadlock
        vector_kwargs["context"] = "forkserver"
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs)
    envs.reset(seed=0)
    sps, steps = steps_per_second(envs, seconds, np.random.default_rng(0))
    envs.close()
    return {"sps": sps, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="halfcheetah", choices=sorted(MUJOCO_TWINS))
    parser.add_argument("--backends", default="generalized,spring", help="comma-separated: generalized, "
                                                                         "positional, spring, mjx")
    parser.add_argument("--envs", default="1,64,1024", help="comma-separated numbers of envs")
    parser.add_argument("--seconds", type=float, default=3.0, help="stepping time per cell (after the warm-up)")
    parser.add_argument("--async-envs", default="", help="numbers of envs at which to also time MuJoCo's async "
                                                         "vector env (a process per env), e.g. 8,64")
    args = parser.parse_args()
    backends = args.backends.split(",")
    for backend in backends:
        if backend not in brax_envs.BACKENDS:
            parser.error(f"--backends: {backend!r} is not one of {', '.join(brax_envs.BACKENDS)}")
    sizes = [int(n) for n in args.envs.split(",")]
    async_sizes = {int(n) for n in args.async_envs.split(",") if n}
    twin = MUJOCO_TWINS[args.env]
    clock = CompileClock()
    print(machine())
    print(f"JAX {jax.__version__} on {jax.devices()[0].platform} ({jax.devices()[0].device_kind}); "
          f"brax/{args.env}-v0 vs {twin}; random actions, about {args.seconds:g} s per cell\n", flush=True)
    rows = []
    for n in sizes:
        row = {"n": n, "mujoco": mujoco_cell(twin, n, "sync", args.seconds)}
        print(f"{n} envs: MuJoCo sync {row['mujoco']['sps']:,.0f} steps/s ({row['mujoco']['steps']} vector steps)",
              flush=True)
        if n in async_sizes:
            row["async"] = mujoco_cell(twin, n, "async", args.seconds)
            print(f"{n} envs: MuJoCo async {row['async']['sps']:,.0f} steps/s", flush=True)
        for backend in backends:
            cell = brax_cell(args.env, backend, n, args.seconds, clock)
            row[backend] = cell
            print(f"{n} envs: Brax {backend} {cell['sps']:,.0f} steps/s ({cell['steps']} vector steps); first reset "
                  f"{cell['first_reset']:.1f} s, of which XLA compiling {cell['xla_compile']:.1f} s", flush=True)
        rows.append(row)
    header = ["envs", f"MuJoCo {twin} sync"] + (["MuJoCo async"] if async_sizes else [])
    for backend in backends:
        header += [f"Brax {backend}", "Brax / MuJoCo sync", "compile s"]
    print("\nenv steps/s (higher is better); compile: the first reset's wall time\n")
    print("| " + " | ".join(header) + " |")
    print("|" + " ---: |" * len(header))
    for row in rows:
        cells = [f"{row['n']:,}", f"{row['mujoco']['sps']:,.0f}"]
        if async_sizes:
            cells.append(f"{row['async']['sps']:,.0f}" if "async" in row else "–")
        for backend in backends:
            cell = row[backend]
            ratio = cell["sps"] / row["mujoco"]["sps"]
            cells += [f"{cell['sps']:,.0f}", f"{ratio:.2f}×", f"{cell['first_reset']:.1f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
