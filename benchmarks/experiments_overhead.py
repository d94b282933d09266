"""What a trial costs beyond its training: `trials` and `sweep` on each backend (local processes / embedded Optuna,
and Ray on a local instance), with runs so short that the fixed costs show.

Each backend runs the same N short CartPole PPO runs (`--steps` env steps, one evaluation at the end) with
`--workers` at once. Per run, the trainer's own `wall_time_s` (summary.json: from the start of training to its end)
is the work; everything else is overhead: process start and imports, building the env and agent, the end of the run
(final evaluation, report, curves), and the backend's own scheduling (Ray's task and actor start, Tune's loop).

  overhead per trial = (command wall time x workers - sum of the runs' wall_time_s) / trials

The command's start (Ray's local instance, the study, the report) is in the wall time and so spread over the trials;
it is also shown on its own as "start", the time from launching the command to the first run's config.yaml.

Run:  python benchmarks/experiments_overhead.py [--trials 8] [--steps 2048] [--workers N] [--out results.md]
Needs the Ray extra for the Ray rows:  pip install -e .[ray]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import workers_parser

from rlfoundry.run.hardware import machine

SHORT = ["eval.every_steps=0", "eval.episodes=2", "logging.tensorboard=false", "train.device=cpu",
         "checkpoint.every_steps=0"]


def sweep_file(folder: Path, trials: int, steps: int) -> Path:
    path = folder / "overhead.yaml"
    path.write_text("\n".join([
        "base: CartPole-v1:ppo", f"overrides: {json.dumps([f'train.total_timesteps={steps}', *SHORT])}",
        "method: random", "pruner: none", f"budget: {{trials: {trials}}}", "parameters:",
        "  algo.lr: {float: [1.0e-4, 1.0e-3], log: true}", ""]))
    return path


def first_config(out: Path, stop: threading.Event, found: list[float], started: float) -> None:
    """Watch for the first run's config.yaml (the first run has started training)."""
    while not stop.is_set():
        if any(out.glob("**/s*/config.yaml")):
            found.append(time.perf_counter() - started)
            return
        time.sleep(0.05)


def measure(command: list[str], out: Path, workers: int) -> dict:
    stop, found = threading.Event(), []
    started = time.perf_counter()
    watcher = threading.Thread(target=first_config, args=(out, stop, found, started), daemon=True)
    watcher.start()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    wall = time.perf_counter() - started
    stop.set()
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    runs = [json.loads(path.read_text()) for path in out.glob("**/s*/summary.json")]
    work = sum(run["wall_time_s"] for run in runs)
    return {"runs": len(runs), "wall": wall, "work": work, "start": found[0] if found else float("nan"),
            "per_trial": (wall * workers - work) / len(runs)}


def main() -> int:
    args = workers_parser(__doc__, "trials", 8, 2048, "env steps per run").parse_args()
    cli = [sys.executable, "-m", "rlfoundry.cli"]
    rows = []
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="rlf_overhead_") as tmp:
        folder = Path(tmp)
        sweep = sweep_file(folder, args.trials, args.steps)
        cases = {
            "trials, local processes": ["trials", "CartPole-v1:ppo", "--seeds", str(args.trials),
                                        f"train.total_timesteps={args.steps}", *SHORT],
            "trials, Ray (local instance)": ["trials", "CartPole-v1:ppo", "--seeds", str(args.trials),
                                             f"train.total_timesteps={args.steps}", *SHORT, "--backend", "ray"],
            "sweep, Optuna (embedded)": ["sweep", str(sweep)],
            "sweep, Ray Tune (local instance)": ["sweep", str(sweep), "--backend", "ray"],
        }
        for name, command in cases.items():
            out = folder / name.split(",")[0] / name.split(", ")[1].split(" ")[0]
            result = measure([*cli, *command, "--workers", str(args.workers), "--out", str(out)], out, args.workers)
            rows.append((name, result))
            print(f"{name}: {result['runs']} runs in {result['wall']:.1f} s, training {result['work']:.1f} s, "
                  f"start {result['start']:.1f} s, overhead per trial {result['per_trial']:.1f} s", flush=True)
    table = [f"{machine()}; {args.trials} runs of {args.steps:,} steps, {args.workers} workers", "",
             "| backend | wall time (s) | runs' training (s) | start (s) | overhead per trial (s) |",
             "| --- | --- | --- | --- | --- |"]
    table += [f"| {name} | {r['wall']:.1f} | {r['work']:.1f} | {r['start']:.1f} | {r['per_trial']:.1f} |"
              for name, r in rows]
    print("\n".join(table))
    if args.out:
        args.out.write_text("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
