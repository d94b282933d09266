"""Many seeds at once: `rlfoundry trials CartPole-v1:ppo --seeds 8` against one rlfoundry run alone and against
Stable-Baselines3 training the same 8 seeds one after another, with the same hyperparameters (rl-zoo3's CartPole-v1
PPO settings, as benchmarks/ppo_cartpole_vs_sb3.py).

Four figures, measured in one process run:
  1. one run alone: `rlfoundry train` of seed 1 in this process, steps/s of its training loop;
  1b. the same run as the command `rlfoundry train` (what trials starts for each run), timed as trials is: from the
     process start to its exit (imports, final evaluation and report included);
  2. trials: every seed a run in `--workers` processes (default: the usable cores), wall time of the whole command
     from the first process start to the written report (process starts, imports, a final evaluation of each run
     and the statistics included); steps/s = all seeds' steps / that wall time;
  3. SB3: the seeds trained one after another in this process (construction included, no evaluation), each with
     its default torch threads.
The issue's goals: trials >= 1.8x the steps/s of one run alone on 2 cores, and a wall time at most a third of SB3's.

Run:  python benchmarks/trials_cartpole_vs_sb3.py [--seeds 8] [--steps 50000] [--workers N] [--out results.md]
Needs Stable-Baselines3 for the comparison:  pip install -e .[bench]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import DEFAULTS, sb3_missing, workers_parser
from ppo_cartpole_vs_sb3 import run_rlfoundry, run_sb3

from rlfoundry.run.hardware import machine
from rlfoundry.studies.trials import run_trials

SPEC = "CartPole-v1:ppo"


def main() -> int:
    args = workers_parser(__doc__, "seeds", 8, 50_000, "env steps per seed").parse_args()
    if sb3_missing(["sb3"]):
        return 2
    print(machine(), flush=True)
    seeds = list(range(1, args.seeds + 1))
    overrides = [f"train.total_timesteps={args.steps}", "eval.every_steps=0", "logging.tensorboard=false",
                 "train.device=cpu"]
    with tempfile.TemporaryDirectory(prefix="rlf_trials_bench_") as tmp:
        alone = run_rlfoundry(1, args.steps, DEFAULTS, False, Path(tmp))
        alone_sps = alone["steps"] / alone["wall"]
        print(f"one run alone: {alone['steps']:,} steps in {alone['wall']:.1f} s ({alone_sps:,.0f} steps/s)", flush=True)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rlfoundry.cli", "train", SPEC, *overrides, "train.seed=1",
                        "logging.progress=false", "--run-dir", str(Path(tmp) / "command")], check=True,
                       stdout=subprocess.DEVNULL)
        command_wall = time.perf_counter() - start
        command_sps = args.steps / command_wall
        print(f"one run alone as a command: {command_wall:.1f} s ({command_sps:,.0f} steps/s)", flush=True)

        start = time.perf_counter()
        results = run_trials([SPEC], seeds, overrides, Path(tmp) / "trials", args.workers)
        trials_wall = time.perf_counter() - start
        trials_steps = sum(result.steps or 0 for result in results)
        failed = [result for result in results if result.status != "finished"]
        print(f"trials, {args.workers} workers: {trials_steps:,} steps in {trials_wall:.1f} s "
              f"({trials_steps / trials_wall:,.0f} steps/s){f'; {len(failed)} failed' if failed else ''}", flush=True)

        sb3_wall = 0.0
        for seed in seeds:
            start = time.perf_counter()
            run_sb3(seed, args.steps, DEFAULTS, False, Path(tmp))
            sb3_wall += time.perf_counter() - start
            print(f"SB3 seed {seed}: {time.perf_counter() - start:.1f} s", flush=True)

    lines = [f"PPO CartPole-v1 (zoo settings), {args.seeds} seeds x {args.steps:,} steps", machine(), "",
             "| what | wall time (s) | steps/s | ratio |", "|---|---:|---:|---:|",
             f"| one rlfoundry run alone (seed 1) | {alone['wall']:.1f} | {alone_sps:,.0f} | 1.00x |",
             f"| the same run as a command, process start to exit | {command_wall:.1f} | {command_sps:,.0f} | "
             f"{command_sps / alone_sps:.2f}x |",
             f"| rlfoundry trials, {args.workers} workers | {trials_wall:.1f} | {trials_steps / trials_wall:,.0f} | "
             f"{trials_steps / trials_wall / alone_sps:.2f}x the run alone, "
             f"{trials_steps / trials_wall / command_sps:.2f}x the command |",
             f"| SB3, the seeds one after another | {sb3_wall:.1f} | {args.seeds * args.steps / sb3_wall:,.0f} | "
             f"trials' wall time {trials_wall / sb3_wall:.2f}x SB3's |"]
    report = "\n".join(lines)
    print("\n" + report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
