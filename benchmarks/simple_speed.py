"""SimPLe's costs on this machine, per world-model size, and the time a full SimPLe run would take.

For each size of the next-frame predictor (`rlfoundry.world_models.next_frame`):

- world-model training samples/s: batch 4, one Adafactor step per batch, as `train_world_model` steps (input noise,
  forward with the target and the warm-up's end mixing, `world_model_loss`, backward, clip, step, argmax frame);
- reward-head batches/s: `train_reward_head`'s step, batch 32 (body without gradients, MBARC's head learns);
- simulated steps/s of `SimulatedEnv` with 16 envs (each env's step counts), and the FLOP bound on it: the
  matmul/conv FLOPs of one simulated step (`FlopCounterMode` on `simulate` at batch 1) against the GFLOP/s of a
  large fp32 matmul on the same threads, and the measured fraction of that bound (the issue's goal: at least 1/2).

Size-independent: the real ALE env's steps/s (ALE/Pong-v5 with SimPLe's settings, `SimpleConfig.defaults_for`; 1 and
16 envs) and PPO's own cost per update in the model (acting + 4 epochs of 5 minibatches of 160, MB's settings, the
Nature CNN; measured on a stand-in simulator that returns random frames, so only the policy costs).

The projection of a full run (docs/world-models/simple-mbarc.md §1-§4, MB's schedule, any size):
255,000 world-model steps at batch 4 (15,000 per epoch, ×3 in epoch 0), 22,500 reward-head batches of 32 (`mbarc`:
1,500 per epoch), 19,000 PPO updates on 16 envs × 50 simulated steps (15.2 M simulated steps) and 102,400 real steps
with one env (acting not counted). Sizes: `published` (MB's, hidden 96), `quarter` (hidden 24, the modified reward
head at 24 channels as §7 assumes, the rest MB's), `tiny` (the simple-tiny presets' model: `NextFrameConfig.tiny`
with 3 compress steps) at MB's 3×105×80 frames, and `tiny-grey` the same at the preset's grey 1×52×40.

    python benchmarks/simple_speed.py                        # every size, the usable cores, ~5 min on 2 cores
    python benchmarks/simple_speed.py --sizes tiny,quarter --threads 1 --seconds 10 --profile
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from common import publish
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from rlfoundry.algos import Runtime
from rlfoundry.algos.simple import MB_PPO, SimpleConfig
from rlfoundry.buffers.rollout import RolloutCollector
from rlfoundry.config.cores import usable_cores
from rlfoundry.run.hardware import machine
from rlfoundry.world_models.next_frame import (
    LatentMixing,
    NextFrameConfig,
    NextFramePredictor,
    SimulatedStep,
    colour_argmax,
    latent_mixing,
)
from rlfoundry.world_models.simulated_env import SimulatedEnv
from rlfoundry.world_models.training import MAX_GRAD_NORM, Adafactor, input_noise, world_model_loss

ENV_ID = "ALE/Pong-v5"
NUM_ACTIONS = 6  # Pong's minimal action set
STACKING, SIM_ENVS, ROLLOUT, WM_BATCH, REWARD_BATCH = 4, 16, 50, 4, 32  # MB (§1-§4)
# MB's schedule (module docstring): world-model steps, reward-head batches, PPO updates, real steps
WM_STEPS, REWARD_BATCHES, PPO_UPDATES, REAL_STEPS = 15_000 * (3 + 14), 1_500 * 15, 1_000 * 19, 102_400
RGB, GREY = (3, 105, 80), (1, 52, 40)


@dataclass(frozen=True)
class Size:
    cfg: NextFrameConfig
    frame: tuple[int, int, int]


SIZES = {
    "published": Size(NextFrameConfig(), RGB),
    "quarter": Size(NextFrameConfig(hidden_size=24, reward_head_channels=24), RGB),
    "tiny": Size(NextFrameConfig.tiny(compress_steps=3), RGB),
    "tiny-grey": Size(NextFrameConfig.tiny(compress_steps=3), GREY),
}


def per_call(fn, seconds: float) -> float:
    """Seconds per call of `fn`: one warm-up call, then calls until `seconds` have passed (at least one)."""
    fn()
    calls, start = 0, time.perf_counter()
    while calls == 0 or time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls


def matmul_gflops(threads: int, seconds: float) -> float:
    """The achievable fp32 GFLOP/s: the best of repeated 2048² matmuls on `threads` threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    best, deadline = float("inf"), time.perf_counter() + seconds
    while best == float("inf") or time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * 2048**3 / best / 1e9


def random_frames(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)


def train_step(model: NextFramePredictor, precision) -> Callable[[], None]:
    """`train_world_model`'s inner step on a fixed random batch (the strategy `mbarc`: no reward loss here)."""
    g = torch.Generator().manual_seed(0)
    c, h, w = model.frame_shape
    frames, target = random_frames(g, WM_BATCH, STACKING * c, h, w), random_frames(g, WM_BATCH, c, h, w)
    actions = torch.randint(0, NUM_ACTIONS, (WM_BATCH,), generator=g)
    values, rewards = torch.zeros(WM_BATCH), torch.ones(WM_BATCH, dtype=torch.long)
    head = {id(p) for p in model.reward_head.parameters()}
    params = [p for p in model.parameters() if id(p) not in head]
    optimizer = Adafactor(params)
    mixing = latent_mixing(10**9, model.cfg)  # after the warm-up: hard bits, half of them the prior's

    def step():
        with precision():
            out = model(input_noise(frames, 0.05, g), actions, target, mixing, generator=g)
            loss, _ = world_model_loss(out, target, values, rewards, 1.0 / ROLLOUT, None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()
        with torch.no_grad():
            colour_argmax(out.frame_logits)  # the frame fed back as the next input

    model.train()
    return step


def reward_step(model: NextFramePredictor, precision) -> Callable[[], None]:
    """`train_reward_head`'s step on a fixed random batch of 32."""
    g = torch.Generator().manual_seed(1)
    c, h, w = model.frame_shape
    frames, target = random_frames(g, REWARD_BATCH, STACKING * c, h, w), random_frames(g, REWARD_BATCH, c, h, w)
    actions = torch.randint(0, NUM_ACTIONS, (REWARD_BATCH,), generator=g)
    classes = torch.randint(0, 3, (REWARD_BATCH,), generator=g)
    params = list(model.reward_head.parameters())
    optimizer = Adafactor(params)

    def step():
        model.eval()
        with precision():
            with torch.no_grad():
                out = model(frames, actions, target, LatentMixing.hard_posterior(), frame_logits=False)
            logits = model.reward_head(*out.reward_inputs, train=True).float()
            loss = nn.functional.cross_entropy(logits, classes)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        optimizer.step()

    return step


def random_restarts(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8)


def simulated_env(model, frame: tuple[int, int, int]) -> SimulatedEnv:
    shape = (STACKING * frame[0], *frame[1:])
    env = SimulatedEnv(model, lambda rng, n: random_restarts(rng, n, shape), SIM_ENVS, episode_length=ROLLOUT)
    env.reset(seed=0)
    return env


def sim_step(model: NextFramePredictor, precision) -> Callable[[], None]:
    model.eval()
    env = simulated_env(model, model.frame_shape)
    g = torch.Generator().manual_seed(2)

    def step():
        with precision():
            env.step(torch.randint(0, NUM_ACTIONS, (SIM_ENVS,), generator=g))

    return step


def simulate_flops(model: NextFramePredictor) -> int:
    """Matmul and convolution FLOPs of one simulated step (batch 1)."""
    g = torch.Generator().manual_seed(3)
    c, h, w = model.frame_shape
    frames, actions = random_frames(g, 1, STACKING * c, h, w), torch.zeros(1, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model.simulate(frames, actions, generator=g)
    return counter.get_total_flops()


def train_flops(model: NextFramePredictor) -> int:
    """Matmul and convolution FLOPs of one training sample: forward with the target (posterior included) and
    backward. With hard posterior bits only: FlopCounterMode's module tracker fails on the prior's sampling under
    no_grad inside a graph (torch 2.13); those 16 LSTM steps are a negligible share."""
    g = torch.Generator().manual_seed(4)
    c, h, w = model.frame_shape
    frames, target = random_frames(g, 1, STACKING * c, h, w), random_frames(g, 1, c, h, w)
    model.train()
    with FlopCounterMode(display=False) as counter:
        out = model(frames, torch.zeros(1, dtype=torch.long), target, LatentMixing.hard_posterior(), generator=g)
        world_model_loss(out, target, torch.zeros(1), torch.ones(1, dtype=torch.long), 1.0 / ROLLOUT,
                         None)[0].backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def real_env_sps(num_envs: int, seconds: float) -> float:
    """Steps/s (each env's step counts) of the real Pong env with SimPLe's settings, random actions."""
    from rlfoundry.config.sections import EnvConfig
    from rlfoundry.envs import build

    atari = SimpleConfig.defaults_for(None, None, ENV_ID)["env"]["atari"]
    envs, spec = build(EnvConfig.model_validate({"id": ENV_ID, "num_envs": num_envs, "atari": atari}), num_envs)
    rng = np.random.default_rng(0)
    envs.reset(seed=0)
    try:
        seconds_per_step = per_call(lambda: envs.step(rng.integers(0, spec.action_space.n, num_envs)), seconds)
    finally:
        envs.close()
    return num_envs / seconds_per_step


class RandomFrames(nn.Module):
    """A stand-in for the world model where only the policy's cost is measured: random frames, reward 0."""

    def __init__(self, frame: tuple[int, int, int]):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))  # SimulatedEnv reads the device from the parameters
        self.frame_shape, self.stacking, self.num_actions = frame, STACKING, NUM_ACTIONS

    def simulate(self, frames, actions, *, temperature, generator, bits=None) -> SimulatedStep:
        n = frames.shape[0]
        return SimulatedStep(random_frames(generator, n, *self.frame_shape), torch.ones(n, dtype=torch.long),
                             torch.zeros(n), torch.ones(n, 1))


def ppo_update_seconds(frame: tuple[int, int, int], threads: int, precision: str, seconds: float) -> float:
    """Seconds of PPO's own work (acting + learning, not the simulator) per update of SimPLe's PPO in the model."""
    from rlfoundry.algos.ppo import PPO
    from rlfoundry.envs import EnvInfo
    from rlfoundry.experiment.schema import ExperimentConfig

    env = simulated_env(RandomFrames(frame), frame)
    cfg = ExperimentConfig.model_validate({
        "env": {"id": ENV_ID, "num_envs": SIM_ENVS},
        "algo": {"name": "ppo", **MB_PPO},
        "network": {"encoder": "nature_cnn", "hidden_sizes": [512], "shared": True, "ortho_init": True},
        "train": {"precision": precision, "compile": False, "torch_threads": threads},
    })
    spec = EnvInfo(f"simulated {ENV_ID}", SIM_ENVS, env.single_observation_space, env.single_action_space,
                   "simulated")
    agent = PPO(cfg, spec, Runtime.of(cfg.train))
    agent.collector = RolloutCollector(env, spec, ROLLOUT, torch.device("cpu"), seed=0)
    costs = []

    def update():
        agent.collector.restart()
        metrics = agent.iterate(env, 0.0).metrics
        costs.append(metrics["time/act"] + metrics["time/learn"])

    per_call(update, seconds)
    return float(np.mean(costs[1:]))


def profile_simulate(model: NextFramePredictor, precision, rows: int = 12) -> str:
    from torch.profiler import profile

    step = sim_step(model, precision)
    step()
    with profile() as prof:
        step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--threads", type=int, default=usable_cores(), help="torch threads (default: usable cores)")
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="per measurement, after one warm-up call (a slow call is timed once)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="the world model and the policy under bf16 autocast, or not (the FLOP bound is fp32's)")
    parser.add_argument("--profile", action="store_true", help="also print the top ops of one simulated step")
    parser.add_argument("--out", type=Path, help="also write the tables (markdown) here")
    args = parser.parse_args()
    sizes = args.sizes.split(",")
    unknown = [name for name in sizes if name not in SIZES]
    if unknown:
        parser.error(f"unknown size(s) {unknown}; choose from {', '.join(SIZES)}")
    torch.set_num_threads(args.threads)

    def precision():
        return torch.autocast("cpu", dtype=torch.bfloat16) if args.precision == "bf16" else contextlib.nullcontext()

    print(machine(), flush=True)
    gflops = matmul_gflops(args.threads, min(args.seconds, 3.0))
    print(f"fp32 matmul 2048²: {gflops:,.0f} GFLOP/s on {args.threads} thread(s)", flush=True)
    real = {n: real_env_sps(n, args.seconds) for n in (1, SIM_ENVS)}
    print(f"real {ENV_ID}: {real[1]:,.0f} steps/s with 1 env, {real[SIM_ENVS]:,.0f} with {SIM_ENVS}", flush=True)
    torch.set_num_threads(args.threads)  # the ALE env may have changed it
    ppo = {frame: ppo_update_seconds(frame, args.threads, args.precision, args.seconds)
           for frame in dict.fromkeys(SIZES[name].frame for name in sizes)}
    for frame, cost in ppo.items():
        print(f"PPO in the model, {'×'.join(map(str, frame))} frames: {cost:.2f} s per update (policy only)",
              flush=True)

    results = {}
    for name in sizes:
        size = SIZES[name]
        torch.manual_seed(0)
        model = NextFramePredictor(size.cfg, NUM_ACTIONS, size.frame, STACKING)
        posterior = sum(p.numel() for p in model.posterior.parameters())
        row = {"params": sum(p.numel() for p in model.parameters()) - posterior,
               "sim_flops": simulate_flops(model), "train_flops": train_flops(model)}
        row["train"] = WM_BATCH / per_call(train_step(model, precision), args.seconds)
        row["reward"] = 1 / per_call(reward_step(model, precision), args.seconds)
        row["sim"] = SIM_ENVS / per_call(sim_step(model, precision), args.seconds)
        results[name] = row
        print(f"{name}: {row['train']:.2f} training samples/s, {row['reward']:.3f} reward batches/s, "
              f"{row['sim']:.2f} simulated steps/s", flush=True)
        if args.profile:
            print(f"\ntop ops of one simulated step ({SIM_ENVS} envs), {name}:\n"
                  f"{profile_simulate(model, precision)}", flush=True)

    lines = [f"SimPLe costs, {args.threads} torch thread(s), {args.precision}, world-model frames C×H×W; "
             f"fp32 matmul {gflops:,.0f} GFLOP/s", machine(), "",
             "| size | frames | params (sim path) | sim GFLOP/step | WM train samples/s | train % of bound "
             "| reward batches/s | sim steps/s (16 envs) | sim bound steps/s | measured / bound |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in results.items():
        frame = SIZES[name].frame
        sim_bound = gflops * 1e9 / row["sim_flops"]
        train_bound = gflops * 1e9 / row["train_flops"]
        lines.append(f"| {name} | {'×'.join(map(str, frame))} | {row['params'] / 1e6:.2f} M "
                     f"| {row['sim_flops'] / 1e9:.3f} | {row['train']:.2f} | {row['train'] / train_bound:.0%} "
                     f"| {row['reward']:.3f} | {row['sim']:.1f} | {sim_bound:.1f} | {row['sim'] / sim_bound:.2f} |")
    lines += ["", f"Real {ENV_ID} (SimPLe's settings, random actions): {real[1]:,.0f} steps/s with 1 env, "
              f"{real[SIM_ENVS]:,.0f} with {SIM_ENVS}. PPO's own cost per update in the model: "
              + ", ".join(f"{cost:.2f} s ({'×'.join(map(str, frame))})" for frame, cost in ppo.items()) + ".", "",
              f"Projected full run ({WM_STEPS:,} WM steps of {WM_BATCH}, {REWARD_BATCHES:,} reward batches of "
              f"{REWARD_BATCH}, {PPO_UPDATES:,} PPO updates = {PPO_UPDATES * SIM_ENVS * ROLLOUT / 1e6:.1f} M "
              f"simulated steps, {REAL_STEPS:,} real steps), hours:", "",
              "| size | world model | reward head | PPO: simulator | PPO: policy | real env | total (days) |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for name, row in results.items():
        parts = [WM_STEPS * WM_BATCH / row["train"], REWARD_BATCHES / row["reward"],
                 PPO_UPDATES * SIM_ENVS * ROLLOUT / row["sim"], PPO_UPDATES * ppo[SIZES[name].frame],
                 REAL_STEPS / real[1]]
        lines.append(f"| {name} | " + " | ".join(hours(p) for p in parts) + f" | {sum(parts) / 86400:,.1f} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
