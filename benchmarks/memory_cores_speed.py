"""PPO training steps/s with each memory core against the feed-forward PPO of the same variant, side by side.

Every round trains the feed-forward policy and then each core for the same number of steps (the core's order
alternating between rounds, so a drift of the machine favours none) with `rlfoundry bench train`'s settings:
no evaluation, one torch thread. Reports the median steps/s per core and its ratio to feed-forward.
The issue's bar: LSTM PPO keeps at least half the steps/s of feed-forward PPO.

    python benchmarks/memory_cores_speed.py                       # CartPole-v1:ppo-masked, 5 rounds
    python benchmarks/memory_cores_speed.py --cores lstm,gru --rounds 5 --steps 30000
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common import publish

from rlfoundry.bench.arch import CORE_NAMES, parse_cores
from rlfoundry.bench.train import bench_train
from rlfoundry.run.hardware import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="CartPole-v1:ppo-masked")
    parser.add_argument("--cores", default="lstm,gru,trxl,gtrxl,mamba,mamba2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    args = parser.parse_args()
    cores = [core for core in parse_cores(args.cores) if core != "mlp"]
    sps: dict[str, list[float]] = {"mlp": [], **{core: [] for core in cores}}
    print(machine(), flush=True)
    for round_index in range(args.rounds):
        order = cores if round_index % 2 == 0 else cores[::-1]
        for core in ["mlp", *order]:
            result = bench_train(args.spec, [f"network.core={CORE_NAMES[core]}"], args.steps, seed=1 + round_index)
            sps[core].append(result["sps"])
            print(f"round {round_index + 1} {core:6s}: {result['sps']:,.0f} steps/s", flush=True)
    base = statistics.median(sps["mlp"])
    lines = [f"{args.spec}: training steps/s, median of {args.rounds} rounds of {args.steps:,} steps", machine(), "",
             "| core | steps/s | vs feed-forward |", "| --- | ---: | ---: |"]
    for core, values in sps.items():
        lines.append(f"| {core} | {statistics.median(values):,.0f} | {statistics.median(values) / base:.2f}× |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
