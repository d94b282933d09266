"""DreamerV3's update speed on this machine, per model size and observation kind, against its FLOP bound.

One update is `Dreamer.update` at the reference's batch (16 windows of 64 steps plus a context step) with
imagination from all 1,024 posterior states over 15 steps: the world-model loss, the imagined rollout, the actor and
critic losses, the replay value loss, one LaProp step and the latent write-back. Observations: `vector` (a 17-dim Box,
as DMC walker's proprioception, 6-dim actions) and `pixels` (uint8 3 × 64 × 64, as DMC from pixels). The replay is
filled with random steps first (the update's cost does not depend on what it holds).

The bound: the matmul and convolution FLOPs of one update (torch's profiler, forward and backward) against the
GFLOP/s of a large fp32 matmul on the same threads. Env steps/s at a train ratio follow: updates/s × 1024 / ratio.

    python benchmarks/dreamer_speed.py                          # size1m, vector and pixels, the usable cores
    python benchmarks/dreamer_speed.py --sizes size1m,size12m --kinds vector --threads 1 --profile
    python benchmarks/dreamer_speed.py --device cuda --sizes size1m,size12m   # the bound: a 2048² fp32 (no TF32)
                                                                               # matmul on the GPU
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from rlfoundry.algos import Runtime
from rlfoundry.algos.dreamer import Dreamer
from rlfoundry.config.cores import usable_cores
from rlfoundry.envs import EnvInfo
from rlfoundry.experiment.load import load_config
from rlfoundry.run.hardware import machine

KINDS = {
    "vector": (gym.spaces.Box(-np.inf, np.inf, (17,), np.float32), gym.spaces.Box(-1.0, 1.0, (6,), np.float32)),
    "pixels": (gym.spaces.Box(0, 255, (3, 64, 64), np.uint8), gym.spaces.Box(-1.0, 1.0, (6,), np.float32)),
}


def build(size: str, kind: str, device: torch.device, graphs: bool = False) -> Dreamer:
    cfg = load_config("MountainCarContinuous-v0:dreamer", [f"algo.size={size}", "train.total_timesteps=100000",
                                                           f"train.cuda_graphs={str(graphs).lower()}"])
    obs_space, action_space = KINDS[kind]
    spec = EnvInfo(id=f"{kind}-stand-in", num_envs=1, observation_space=obs_space, action_space=action_space,
                   vectorization="sync")
    agent = Dreamer(cfg, spec, Runtime.of(cfg.train, device))
    rng = np.random.default_rng(0)
    sample = lambda space: (rng.integers(0, 256, (1, *space.shape), np.uint8) if space.dtype == np.uint8
                            else rng.standard_normal((1, *space.shape)).astype(np.float32))
    agent.replay.start(sample(obs_space))
    for t in range(2_000):
        actions = rng.uniform(-1, 1, (1, 6)).astype(np.float32)
        agent.replay.add(actions, None, sample(obs_space), rng.standard_normal(1).astype(np.float32),
                         np.zeros(1, bool), np.array([t % 500 == 499]))
    return agent


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_gflops(device: torch.device, seconds: float = 2.0) -> float:
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    a @ b
    synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
        if count % 50 == 0:
            synchronize(device)
    synchronize(device)
    return 2 * 2048**3 * count / (time.perf_counter() - start) / 1e9


def measure(agent: Dreamer, seconds: float) -> float:
    for _ in range(5):  # warm-up (with CUDA graphs: 3 eager updates, then the capture)
        agent.update()
    synchronize(agent.device)
    count, start = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - start < seconds:
        agent.update()
        count += 1
    synchronize(agent.device)
    return count / (time.perf_counter() - start)


def update_flops(agent: Dreamer) -> float:
    """The matmul and convolution FLOPs of one update, forward and backward, as torch's profiler counts them
    (FlopCounterMode's module tracker fails on the update's no-grad imagination)."""
    with torch.profiler.profile(with_flops=True) as prof:
        agent.update()
    return float(sum(event.flops for event in prof.key_averages() if event.flops))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="size1m")
    parser.add_argument("--kinds", default="vector,pixels")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--ratio", type=float, default=1024.0, help="train ratio for the env steps/s column")
    parser.add_argument("--profile", action="store_true", help="print torch's profile of 3 updates per row")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (train.device_replay=auto: on CUDA the replay's "
                        "observations are mirrored on the GPU)")
    parser.add_argument("--cuda-graphs", action="store_true", help="also each row with the update in a CUDA graph")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(machine(), torch.cuda.get_device_name(device) if device.type == "cuda" else "")
    peak = matmul_gflops(device)
    print(f"{args.threads} thread(s), {device}; a 2048² fp32 matmul runs at {peak:.0f} GFLOP/s")
    print("| size | observations | GFLOP/update | updates/s | bound (updates/s) | of bound | env steps/s at ratio "
          f"{args.ratio:g} |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes.split(","):
        for kind in args.kinds.split(","):
            for graphs in (False, True) if args.cuda_graphs else (False,):
                agent = build(size, kind, device, graphs)
                flops = update_flops(agent)
                rate = measure(agent, args.seconds)
                bound = peak * 1e9 / flops
                label = f"{kind}, CUDA graphs" if graphs else kind
                print(f"| {size} | {label} | {flops / 1e9:.1f} | {rate:.2f} | {bound:.2f} | {rate / bound:.2f} | "
                      f"{rate * 1024 / args.ratio:.2f} |", flush=True)
            if args.profile:
                with torch.profiler.profile() as prof:
                    for _ in range(3):
                        agent.update()
                sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
                print(prof.key_averages().table(sort_by=sort, row_limit=15))


if __name__ == "__main__":
    main()
