"""Pieces the benchmarks share."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from rlfoundry.run.hardware import machine

DEFAULTS = "defaults"  # --threads: each framework's own default (rlfoundry `auto`, SB3 torch's own count)
TORCH_DEFAULT_THREADS = torch.get_num_threads()  # read before any run sets it: what SB3 gets when left alone


def threads_arg(text: str) -> str | int:
    """--threads: a positive count for both frameworks, or `defaults`."""
    if text == DEFAULTS:
        return text
    count = int(text)
    if count < 1:
        raise argparse.ArgumentTypeError("must be a positive integer or 'defaults'")
    return count


def rlfoundry_threads(threads: str | int) -> str:
    """The `train.torch_threads` override for --threads."""
    return f"train.torch_threads={'auto' if threads == DEFAULTS else threads}"


def sb3_threads(threads: str | int) -> None:
    """Set torch's threads for an SB3 run: --threads, or torch's own default (an earlier rlfoundry run in this
    process may have changed it)."""
    torch.set_num_threads(TORCH_DEFAULT_THREADS if threads == DEFAULTS else threads)


def threads_label(threads: str | int) -> str:
    return ("each framework's default torch threads (rlfoundry auto, SB3 "
            f"{TORCH_DEFAULT_THREADS})" if threads == DEFAULTS else f"{threads} torch thread(s)")


def sb3_missing(names: list[str]) -> bool:
    """True (after saying how to install it) when SB3 is wanted but not installed."""
    if "sb3" not in names:
        return False
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print("Stable-Baselines3 is not installed; install the benchmark extra:  pip install -e .[bench]",
              file=sys.stderr)
        return True
    return False


def frameworks(only: str) -> list[str]:
    return ["rlfoundry", "sb3"] if only == "both" else [only]


def in_turn(names: list[str], seed: int) -> list[str]:
    """The frameworks in the order to run them for `seed`: alternating, so a slow drift of the machine
    does not favour one."""
    return names if seed % 2 else names[::-1]


def throughput(names: list[str], runners: dict, args, title: str) -> str:
    """Run every framework for seeds 1..args.seeds (alternating the order), print each run, and return the
    markdown table of median steps/s and the ratio to SB3 (also written to args.out when given)."""
    results: dict[str, list[dict]] = {name: [] for name in names}
    width = max(map(len, names))
    print(machine(), flush=True)
    for seed in range(1, args.seeds + 1):
        for name in in_turn(names, seed):
            run = runners[name](seed, args.steps, args.threads)
            results[name].append(run)
            print(f"seed {seed} {name:{width}s}: {run['steps']:,} steps in {run['wall']:.1f} s "
                  f"({run['steps'] / run['wall']:,.0f} steps/s)", flush=True)
    sps = {name: statistics.median(r["steps"] / r["wall"] for r in runs) for name, runs in results.items()}
    lines = [f"{title}, {args.seeds} seed(s), {threads_label(args.threads)}, {args.steps:,} steps per run", machine(), "",
             "| framework | steps/s (median) | vs SB3 |", "|---|---:|---:|"]
    for name in names:
        ratio = f"{sps[name] / sps['sb3']:.2f}x" if "sb3" in sps else "-"
        lines.append(f"| {name} | {sps[name]:,.0f} | {ratio} |")
    return publish(lines, args.out)


def publish(lines: list[str], out=None) -> str:
    """The report made of `lines`: printed, and written to `out` (a Path) when given."""
    report = "\n".join(lines)
    print("\n" + report)
    if out:
        out.write_text(report + "\n")
    return report


def parser(doc: str, seeds: int, steps: int, steps_help: str = "env steps per run") -> argparse.ArgumentParser:
    """The options every side-by-side benchmark takes."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=seeds, help="seeds 1..N")
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    add_threads(parser)
    parser.add_argument("--only", choices=("both", "rlfoundry", "sb3"), default="both")
    parser.add_argument("--out", type=Path, help="also write the results table (markdown) here")
    return parser


def workers_parser(doc: str, count: str, default: int, steps: int, steps_help: str) -> argparse.ArgumentParser:
    """The options of the benchmarks that run many runs at once: how many (`--<count>`), how long, in how many
    worker processes."""
    from rlfoundry.config.cores import usable_cores

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument(f"--{count}", type=int, default=default)
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    parser.add_argument("--workers", type=int, default=usable_cores())
    parser.add_argument("--out", type=Path, help="also write the results table (markdown) here")
    return parser


def add_threads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=threads_arg, default=DEFAULTS,
                        help="torch threads for both frameworks, or 'defaults' (each its own: rlfoundry's auto, "
                             "torch's default for SB3)")


def side_by_side(args, runners: dict, title: str, extra: list[str] | None = None) -> int:
    """Run the frameworks `args.only` names (plus `extra` runner names) in turn; exit status 2 without SB3."""
    names = frameworks(args.only)
    if "rlfoundry" in names:
        names[1:1] = extra or []
    if sb3_missing(names):
        return 2
    throughput(names, runners, args, title)
    return 0


def per_call_ms(step, calls: int, repeats: int) -> float:
    """Median over `repeats` timings of `calls` calls of `step()` (after 10 warm-up calls), in ms per call."""
    for _ in range(10):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        times.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(times)
