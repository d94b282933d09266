"""Training speed on a GPU: rlfoundry beside Stable-Baselines3 in one process, and rlfoundry with and without CUDA
graphs (`train.cuda_graphs`), one markdown table.

Rows (by default the ones not yet measured on a GPU run first; a row that would start after --budget seconds is
listed as not run):
  SAC, TD3 and DQN: graphed, eager and SB3 (HalfCheetah-v5 with the zoo's settings; Breakout with SB3's Atari DQN
    settings, and graphed with the replay kept on the host), learning from step 1,000 on both sides so that most of
    each run is gradient steps;
  PPO Breakout at 8 envs (graphed, graphed on one torch thread, and eager) and 64 envs (the preset, sticky actions off as SB3's
    NoFrameskip-v4), PPO HalfCheetah-v5 (the preset: the zoo's tuned entry; graphed and eager), each beside SB3 with
    the same settings;
  DreamerV3 size1m and size12m updates/s on pixels, eager and graphed (benchmarks/dreamer_speed.py);
  SimPLe's simulated env steps/s at MB's published world-model size and the tiny presets' (eager).
steps/s = env steps / wall time of `train` (construction excluded; warm-up and graph capture included); no
evaluation. Each figure is one run: on a quiet GPU the spread between runs is a few percent.

    python benchmarks/gpu_speed.py [--budget 420] [--scale 1] [--rows sac,td3] [--out gpu-speed.md]
    python benchmarks/gpu_speed.py --device cpu --scale 0.05 --budget 60     # a dry run of every row on the CPU

Needs Stable-Baselines3 (`pip install -e .[bench]`); without a package index, install rlfoundry's dependencies from
wheels (docs/developer/gpu.md). Every row at once takes about 8 minutes on an H200.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

LEARNING_STARTS = 1_000  # off-policy rows: env steps before learning (times --scale, up to 1,000)


def rlfoundry_run(spec: str, overrides: list[str], off_policy: bool = False) -> Callable[[int, str], dict]:
    def run(steps: int, device: str) -> dict:
        from rlfoundry.bench.train import bench_train

        starts = [f"algo.learning_starts={LEARNING_STARTS}"] if off_policy else []
        result = bench_train(spec, [f"train.device={device}", *starts, *overrides], steps)
        return {"steps": result["steps"], "wall": result["seconds"]}
    return run


def sb3_run(build: Callable[[str], object]) -> Callable[[int, str], dict]:
    def run(steps: int, device: str) -> dict:
        model = build(device)
        start = time.perf_counter()
        model.learn(total_timesteps=steps)  # type: ignore[attr-defined]
        return {"steps": model.num_timesteps, "wall": time.perf_counter() - start}  # type: ignore[attr-defined]
    return run


def sb3_sac(device: str):
    from stable_baselines3 import SAC

    return SAC("MlpPolicy", "HalfCheetah-v5", learning_starts=LEARNING_STARTS, device=device, seed=1, verbose=0)


def sb3_td3(device: str):
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make("HalfCheetah-v5")
    dim = env.action_space.shape[0]
    return TD3("MlpPolicy", env, learning_starts=LEARNING_STARTS, device=device, seed=1, verbose=0,
               action_noise=NormalActionNoise(np.zeros(dim), 0.1 * np.ones(dim)))


def atari(n_envs: int):
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=n_envs, seed=1), n_stack=4)


def sb3_dqn(device: str):
    from stable_baselines3 import DQN

    return DQN("CnnPolicy", atari(1), buffer_size=100_000, learning_rate=1e-4, batch_size=32,
               learning_starts=LEARNING_STARTS, target_update_interval=1000, train_freq=4, gradient_steps=1,
               exploration_fraction=0.1, exploration_final_eps=0.01, device=device, seed=1, verbose=0)


def sb3_ppo_atari(n_envs: int) -> Callable[[str], object]:
    def build(device: str):
        from stable_baselines3 import PPO

        return PPO("CnnPolicy", atari(n_envs), n_steps=128, n_epochs=4, batch_size=256,
                   learning_rate=lambda p: 2.5e-4 * p, clip_range=lambda p: 0.1 * p, ent_coef=0.01, vf_coef=0.5,
                   max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95, device=device, seed=1, verbose=0)
    return build


def sb3_ppo_cheetah(device: str):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env("HalfCheetah-v5", n_envs=1, seed=1), gamma=0.98)
    return PPO("MlpPolicy", env, n_steps=512, batch_size=64, n_epochs=20, learning_rate=2.0633e-05, gamma=0.98,
               gae_lambda=0.92, clip_range=0.1, ent_coef=0.000401762, vf_coef=0.58096, max_grad_norm=0.8,
               device=device, seed=1, verbose=0,
               policy_kwargs={"log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.ReLU,
                              "net_arch": {"pi": [256, 256], "vf": [256, 256]}})


BREAKOUT = ["env.atari.repeat_action_probability=0.0"]
# name -> (workload, [(framework, runner)], env steps at scale 1)
ROWS: dict[str, tuple[str, list[tuple[str, Callable[[int, str], dict]]], int]] = {
    "sac": ("SAC HalfCheetah-v5, zoo settings", [
        ("rlfoundry, CUDA graphs", rlfoundry_run("HalfCheetah-v5:sac", ["train.cuda_graphs=true"], True)),
        ("rlfoundry, eager", rlfoundry_run("HalfCheetah-v5:sac", ["train.cuda_graphs=false"], True)),
        ("SB3", sb3_run(sb3_sac))], 4_000),
    "td3": ("TD3 HalfCheetah-v5, SB3 defaults", [
        ("rlfoundry, CUDA graphs", rlfoundry_run("HalfCheetah-v5:td3", ["train.cuda_graphs=true"], True)),
        ("rlfoundry, eager", rlfoundry_run("HalfCheetah-v5:td3", ["train.cuda_graphs=false"], True)),
        ("SB3", sb3_run(sb3_td3))], 4_000),
    "dqn": ("DQN Breakout, SB3's Atari settings", [
        ("rlfoundry, CUDA graphs", rlfoundry_run("ALE/Breakout-v5:dqn", [*BREAKOUT, "train.cuda_graphs=true"], True)),
        ("rlfoundry, CUDA graphs, replay on the host", rlfoundry_run(
            "ALE/Breakout-v5:dqn", [*BREAKOUT, "train.cuda_graphs=true", "train.device_replay=false"], True)),
        ("rlfoundry, eager", rlfoundry_run("ALE/Breakout-v5:dqn", [*BREAKOUT, "train.cuda_graphs=false"], True)),
        ("SB3", sb3_run(sb3_dqn))], 12_000),
    "ppo-breakout-8": ("PPO Breakout, 8 envs, fp32", [
        ("rlfoundry, CUDA graphs", rlfoundry_run("ALE/Breakout-v5:ppo", [*BREAKOUT, "train.precision=fp32",
                                                                       "train.cuda_graphs=true"])),
        ("rlfoundry, CUDA graphs, 1 torch thread", rlfoundry_run(  # do idle intra-op threads slow ALE's threads?
            "ALE/Breakout-v5:ppo", [*BREAKOUT, "train.precision=fp32", "train.cuda_graphs=true",
                                    "train.torch_threads=1"])),
        ("rlfoundry, eager", rlfoundry_run("ALE/Breakout-v5:ppo", [*BREAKOUT, "train.precision=fp32",
                                                                 "train.cuda_graphs=false"])),
        ("SB3", sb3_run(sb3_ppo_atari(8)))], 16_384),
    "ppo-breakout-64": ("PPO Breakout, 64 envs, fp32", [
        ("rlfoundry", rlfoundry_run("ALE/Breakout-v5:ppo", [*BREAKOUT, "train.precision=fp32", "env.num_envs=64"])),
        ("SB3", sb3_run(sb3_ppo_atari(64)))], 32_768),
    "ppo-halfcheetah": ("PPO HalfCheetah-v5, zoo settings", [
        ("rlfoundry, CUDA graphs", rlfoundry_run("HalfCheetah-v5:ppo", ["train.cuda_graphs=true"])),
        ("rlfoundry, eager", rlfoundry_run("HalfCheetah-v5:ppo", ["train.cuda_graphs=false"])),
        ("SB3", sb3_run(sb3_ppo_cheetah))], 4_096),
}


# what has not been measured on a GPU yet first (PPO's and DreamerV3's graphs, SimPLe), then the rows measured before
DEFAULT_ORDER = ["ppo-breakout-8", "dreamer", "ppo-halfcheetah", "simple", "sac", "td3", "dqn", "ppo-breakout-64"]


def describe(device: str) -> str:
    from rlfoundry.run.hardware import machine

    gpu = torch.cuda.get_device_name() if device == "cuda" else "none"
    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}", f"CUDA {torch.version.cuda}"]
    for name in ("stable_baselines3", "gymnasium", "ale_py", "mujoco"):
        try:
            versions.append(f"{name} {__import__(name).__version__}")
        except ImportError:
            versions.append(f"{name} missing")
    return f"GPU: {gpu}; {machine()}; {', '.join(versions)}"


def dreamer_rows(device: str, seconds: float) -> list[str]:
    """DreamerV3's updates/s from benchmarks/dreamer_speed.py, its table lines as printed."""
    script = Path(__file__).with_name("dreamer_speed.py")
    out = subprocess.run([sys.executable, str(script), "--device", device, "--sizes", "size1m,size12m", "--kinds",
                          "pixels", "--seconds", str(seconds), "--threads", "4"] + (["--cuda-graphs"] if device == "cuda" else []), capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.startswith("|")] or [out.stderr[-2000:]]


def _timed_steps(env, actions: torch.Tensor, n: int) -> float:
    """Seconds of `n` steps of `env`, the device's queue drained."""
    start = time.perf_counter()
    for _ in range(n):
        env.step(actions)
    if actions.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def simple_rows(device: str, seconds: float) -> list[str]:
    """SimPLe's simulated steps/s (`SimulatedEnv.step` on 16 envs, each env's step counting; random actions) at MB's
    published world-model size and the tiny presets' size, as benchmarks/simple_speed.py builds them."""
    from simple_speed import NUM_ACTIONS, SIM_ENVS, SIZES, STACKING, simulated_env

    from rlfoundry.world_models.next_frame import NextFramePredictor

    lines = ["| world model | frames | simulated steps/s |", "|---|---|---:|"]
    for name in ("published", "tiny"):
        size = SIZES[name]
        torch.manual_seed(0)
        model = NextFramePredictor(size.cfg, NUM_ACTIONS, size.frame, STACKING).to(device).eval()
        env = simulated_env(model, size.frame)
        actions = torch.randint(0, NUM_ACTIONS, (SIM_ENVS,), device=device)
        _timed_steps(env, actions, 3)  # warm-up (cuDNN's choice of kernels)
        n, wall = 1, _timed_steps(env, actions, 1)
        while wall < seconds:  # double the count until one timing lasts `seconds`
            n *= 2
            wall = _timed_steps(env, actions, n)
        lines.append(f"| {name} | {'×'.join(map(str, size.frame))} | {SIM_ENVS * n / wall:,.0f} |")
        print(f"SimPLe simulated steps, {name}: {SIM_ENVS * n / wall:,.0f}/s", flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--budget", type=float, default=420.0, help="seconds: later rows are not started")
    parser.add_argument("--scale", type=float, default=1.0, help="times each row's env steps")
    parser.add_argument("--rows", default=",".join(DEFAULT_ORDER), help="comma-separated, of "
                        + ", ".join([*ROWS, "dreamer", "simple"]))
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = parser.parse_args()
    global LEARNING_STARTS
    LEARNING_STARTS = max(16, int(LEARNING_STARTS * min(1.0, args.scale)))
    start = time.perf_counter()
    header = describe(args.device)
    print(header, flush=True)
    lines = [header, "", "| workload | framework | env steps | steps/s | vs SB3 |", "|---|---|---:|---:|---:|"]
    extra: list[str] = []  # DreamerV3's and SimPLe's tables, after the main one
    for name in args.rows.split(","):
        left = args.budget - (time.perf_counter() - start)
        if name == "dreamer":
            extra += ["", "DreamerV3 (benchmarks/dreamer_speed.py, pixels):", ""]
            extra += dreamer_rows(args.device, 5.0 * max(args.scale, 0.2)) if left > 30 else ["not run (budget)"]
            continue
        if name == "simple":
            extra += ["", "SimPLe simulated steps (SimulatedEnv, 16 envs, eager):", ""]
            try:
                extra += simple_rows(args.device, 3.0 * max(args.scale, 0.2)) if left > 20 else ["not run (budget)"]
            except Exception as exc:  # as a row's failure above: the rest of the table stays
                extra.append(f"failed: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        title, runners, steps = ROWS[name]
        steps = max(256, int(steps * args.scale))
        figures: dict[str, float] = {}
        for framework, run in runners:
            if time.perf_counter() - start > args.budget:
                lines.append(f"| {title} | {framework} | | not run (budget) | |")
                continue
            try:
                result = run(steps, args.device)
            except Exception as exc:  # one row's failure (a missing package) must not lose the others
                lines.append(f"| {title} | {framework} | | failed: {type(exc).__name__}: {str(exc)[:80]} | |")
                continue
            figures[framework] = result["steps"] / result["wall"]
            print(f"{title} | {framework}: {result['steps']:,} steps in {result['wall']:.1f} s "
                  f"({figures[framework]:,.0f} steps/s)", flush=True)
        for framework, sps in figures.items():
            ratio = f"{sps / figures['SB3']:.2f}x" if "SB3" in figures else "-"
            lines.append(f"| {title} | {framework} | {steps:,} | {sps:,.0f} | {ratio} |")
    lines += [*extra, "", f"total {time.perf_counter() - start:.0f} s"]
    report = "\n".join(lines)
    print("\n" + report, flush=True)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
