"""The training curve of runs that stopped before their first evaluation: every training episode's return, binned by
env steps, per run and averaged over the runs, as a markdown table (and a PNG with each run's episodes).

A short lease of a GPU machine gives a DreamerV3 run on Atari 100k or DMC a few thousand env steps, fewer than its
preset's evaluation interval; its metrics.csv still holds every training episode (`train/episode_return` at the
step it ended). This is the record of such runs. The runs are found as every metrics.csv under the given folders.

    python benchmarks/episode_curve.py RUNS_DIR... [--bin 1000] [--out curve.md] [--png curve.png] [--csv episodes.csv]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import yaml

from rlfoundry.records.report import read_metrics


class Run(NamedTuple):
    """A run directory read once: every training episode (env step at its end, return) and what the table says of
    the run (spec, seed, last step, updates, wall time, device and machine)."""

    name: str
    steps: np.ndarray
    returns: np.ndarray
    info: dict


def load(run: Path) -> Run:
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}
    metrics = read_metrics(run / "metrics.csv")

    def last(key: str) -> float:
        column = metrics.get(key, np.zeros(0))
        column = column[np.isfinite(column)]
        return float(column[-1]) if len(column) else float("nan")

    steps = metrics.get("global_step", np.zeros(0))
    returns = metrics.get("train/episode_return", np.full(len(steps), np.nan))
    keep = np.isfinite(steps) & np.isfinite(returns)
    provenance = config.get("provenance") or {}
    info = {"env": config.get("env", {}).get("id", "?"), "variant": config.get("variant") or "?",
            "seed": config.get("train", {}).get("seed", "?"), "steps": last("global_step"),
            "updates": last("diag/updates"), "wall": last("wall_time"), "hardware": provenance.get("hardware", "?"),
            "device": provenance.get("device", "?")}
    return Run(run.name, steps[keep], returns[keep], info)


def table(runs: list[Run], width: int) -> list[str]:
    """The markdown lines: one row per bin of `width` env steps, the mean return of the episodes that ended in it
    for each run (with their count), and the mean over the runs that have episodes there."""
    top = max((run.steps.max() for run in runs if len(run.steps)), default=0.0)
    edges = np.arange(0, top + width, width)
    lines = ["| env steps | " + " | ".join(f"seed {run.info['seed']}" for run in runs) + " | mean over runs |",
             "|---" * (len(runs) + 2) + "|"]
    for low, high in itertools.pairwise(edges):
        cells, means = [], []
        for run in runs:
            inside = run.returns[(run.steps > low) & (run.steps <= high)]
            if len(inside):
                means.append(inside.mean())
                cells.append(f"{inside.mean():.1f} ({len(inside)})")
            else:
                cells.append("")
        overall = f"{np.mean(means):.1f}" if means else ""
        lines.append(f"| {low:,.0f}–{high:,.0f} | " + " | ".join(cells) + f" | {overall} |")
    lines += ["", "Each cell: the mean training-episode return of the episodes that ended in the bin (their count).",
              "", "| run | env steps | updates | wall time (s) | device | machine |", "|---|---:|---:|---:|---|---|"]
    for i in (run.info for run in runs):
        lines.append(f"| {i['env']}:{i['variant']} seed {i['seed']} | {i['steps']:,.0f} | {i['updates']:,.0f} | "
                     f"{i['wall']:,.0f} | {i['device']} | {i['hardware']} |")
    return lines


def write_episodes(runs: list[Run], path: Path) -> None:
    """Every training episode of every run, one line each: run, seed, env step at its end, return."""
    lines = ["run,seed,global_step,episode_return"]
    for run in runs:
        lines += [f"{run.name},{run.info['seed']},{step:.0f},{value:g}" for step, value in zip(run.steps, run.returns)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot(runs: list[Run], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for run in runs:
        ax.plot(run.steps, run.returns, marker=".", linewidth=0.8, label=f"seed {run.info['seed']}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("training episode return")
    ax.legend()
    fig.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="folders searched for run directories (metrics.csv)")
    parser.add_argument("--bin", type=int, default=1000, help="env steps per row")
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--png", type=Path, help="also plot every run's episodes here")
    parser.add_argument("--csv", type=Path, help="also write every run's episodes here")
    args = parser.parse_args()
    found = sorted({path.parent for folder in args.dirs for path in folder.rglob("metrics.csv")
                    if (path.parent / "config.yaml").is_file() and "checkpoints" not in path.parts})
    if not found:
        print(f"no run directories (metrics.csv beside config.yaml) under {', '.join(map(str, args.dirs))}",
              file=sys.stderr)
        return 2
    if args.bin < 1:
        print("--bin must be a positive number of env steps", file=sys.stderr)
        return 2
    runs = [load(run) for run in found]
    report = "\n".join(table(runs, args.bin))
    print(report)
    if args.out:
        args.out.write_text(report + "\n", encoding="utf-8")
    if args.png:
        plot(runs, args.png)
    if args.csv:
        write_episodes(runs, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
