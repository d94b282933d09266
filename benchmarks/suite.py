"""The benchmark table: every row of benchmarks/suite.yaml, every seed an ordinary run, through one `rlfoundry
trials` set; then a table of each row's final evaluation return (IQM and mean over the seeds with 95% stratified
bootstrap intervals, from the trials statistics) beside its published anchor, and the wall time it took.

Run:  python benchmarks/suite.py [--seeds N] [--workers P] [--out DIR] [--table docs/BENCHMARKS.md] [--only REGEX]
The same command again continues the set (finished runs are kept); `--report-only` rewrites the table from what
has finished.

No session has the hours the whole suite takes, so what it measures adds up across sessions: every finished run's
summary.json and config.yaml are kept in benchmarks/results/<suite>/ (committed; a few kB a run), put back into DIR
before a set starts (`trials` keeps them as finished and runs only the rest) and read for the table; and a row none
of whose runs are there keeps its line from the table already written. Each row names the dates and machines its
runs were measured on (their provenance).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from rlfoundry.config.cores import usable_cores
from rlfoundry.experiment.load import load_config
from rlfoundry.records.rundir import run_status, versions
from rlfoundry.run.hardware import detect, machine
from rlfoundry.studies import stats
from rlfoundry.studies.processes import sigterm_interrupts
from rlfoundry.studies.results import read_run
from rlfoundry.studies.trials import plan, run_trials

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"  # <suite name>/<spec>/s<seed>/: the finished runs' KEPT files
KEPT = ("summary.json", "config.yaml")  # all the table reads of a run


def read_suite(path: Path) -> dict:
    suite = yaml.safe_load(path.read_text())
    if not isinstance(suite, dict) or not suite.get("rows"):
        raise SystemExit(f"{path}: expected `seeds:` and a list of `rows:`")
    return suite


_last: list[tuple[int, int]] = []


def show(progress) -> None:
    """A line whenever a run ends."""
    state = (progress.done, progress.failed)
    if _last != [state]:
        _last[:] = [state]
        print(f"{time.strftime('%H:%M:%S')}  {progress.done} done, {progress.running} running, "
              f"{progress.failed} failed; {progress.steps:,} of {progress.total:,} steps", flush=True)


def row(entry: dict, results, overrides: list[str], measured: str) -> str:
    anchor = entry.get("anchor") or {}
    budget = load_config(entry["spec"], overrides).train.total_timesteps
    finished = [r for r in results if r.status == "finished" and r.final_return is not None]
    scores = np.array([[r.final_return] for r in finished])
    steps = ", ".join(f"{r.steps:,}" for r in finished if r.steps is not None) or "—"
    wall = sum(r.wall_time_s or 0.0 for r in results)
    iqm = mean = "—"
    started = any(r.status != "missing" for r in results)
    verdict = "not finished yet" if started else "not run yet"
    if finished:
        est = stats.interval_estimates(scores)
        iqm = f"{est['iqm'].value:.4g} [{est['iqm'].low:.4g}, {est['iqm'].high:.4g}]"
        mean = f"{est['mean'].value:.4g} [{est['mean'].low:.4g}, {est['mean'].high:.4g}]"
        target = anchor.get("return")
        stopped_solved = all(r.steps is not None and r.steps < budget and r.solved is not None
                             and r.final_return >= r.solved for r in finished)
        if target is None:
            verdict = "—"
        elif est["iqm"].high >= target:  # the anchor is inside or below the interval
            verdict = "matches"
        elif stopped_solved:
            verdict = f"below; every run stopped once solved (≥ {finished[0].solved:g}) before the budget"
        else:
            verdict = "**below**"
    anchor_text = "—" if anchor.get("return") is None else f"{anchor['return']:g}"
    return (f"| `{entry['spec']}` | {budget:,} | {steps} | {len(finished)}/{len(results)} | {iqm} | {mean} | "
            f"{anchor_text} | {verdict} | {f'{wall / 60:.1f} min' if started else '—'} | {measured} | "
            f"{anchor.get('source', '')} |")


INTRO = """# Benchmarks

Every row of `benchmarks/{suite}` trained with its preset's settings and budget, {seeds} seeds each, as one
`rlfoundry trials` set (`python benchmarks/suite.py{options}`; the same command again continues it, `--report-only`
rewrites this page).{extra} The score of a run is its final evaluation return (the trainer's deterministic evaluation); over a row's
seeds, the interquartile mean (IQM) and the mean, each with a 95% stratified bootstrap interval (Agarwal et al.
2021; `studies/stats.py`; with 3 seeds the IQM is the mean). Unless the suite's `overrides` say otherwise
(`eval.stop_at_threshold=false`), runs stop once their evaluation reaches the preset's `solved` threshold, as the
presets do by default, so a solved row's runs can end before its budget, below an anchor that lies above the
threshold. The anchor is the published figure the
row should match, with its source (`benchmarks/{suite}` says which version and settings); "matches" means the
anchor lies inside or below the IQM's interval, "below" that the whole interval is under it. Wall time is the sum of
the seeds' training times; the set ran as many runs at a time as its `--workers` (default: the usable cores). "Measured" gives the dates and
machines (listed under the table) of each row's runs, from their provenance: rows measured in different sessions
are side by side only as far as their machines are alike. The finished runs' summaries and configs are kept in
`benchmarks/results/{stem}/`.

"""


def _shown(path: Path) -> str:
    """`path` as the command line from the repository's root gives it."""
    try:
        return str(path.resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


HEADER = ("| spec | budget | each run's steps | finished runs | IQM [95% CI] | mean [95% CI] | anchor | vs anchor | "
          "wall time (all seeds) | measured | anchor's source |")
MACHINE = re.compile(r"^- \[(\d+)\] (.+)$")
OLD_MEASURED = re.compile(r"^Measured (\d{4}-\d\d-\d\d) on (?:machine: )?(.+?)\.?$")  # a table before the column


def earlier_table(table: Path) -> tuple[dict[str, list[str]], list[str]]:
    """The rows of the table already at `table` by spec, as lists of cells with the `measured` cell naming its
    machine, and its machines in legend order; nothing when there is no table."""
    if not table.exists():
        return {}, []
    lines = table.read_text().splitlines()
    machines = [m.group(2) for m in map(MACHINE.match, lines) if m]
    old = next((m for m in map(OLD_MEASURED.match, lines) if m), None)
    if not machines and old:
        machines = [old.group(2)]
    rows = {}
    for line in lines:
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) == 10 and old:  # before the `measured` column: the date and machine of the whole table
                cells.insert(9, f"{old.group(1)} [1]")
            rows[cells[0].strip("`")] = cells
    return rows, machines


def _copy_kept(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        shutil.copy2(source / name, target / name)


def restore(kept: Path, out: Path) -> None:
    """Put the kept finished runs that `out` lacks into it."""
    for summary in sorted(kept.glob("*/s*/summary.json")):
        target = out / summary.parent.relative_to(kept)
        if not (target / "summary.json").exists():
            _copy_kept(summary.parent, target)


def keep(out: Path, kept: Path, run_dirs) -> None:
    """Copy the KEPT files of every finished run among `run_dirs` (in `out`) to `kept`."""
    for run_dir in run_dirs:
        if run_status(run_dir) == "finished":
            _copy_kept(run_dir, kept / run_dir.relative_to(out))


def machine_name(hardware: str | None, torch_version: str | None) -> str:
    """A machine as the table lists it, from a run's provenance (its hardware and torch's package version)."""
    return f"{hardware}; torch {torch_version}"


def measured_on(results, machines: list[str], here: str) -> str:
    """The dates and machines of the finished runs (their provenance), as `DATE [machine number]`, adding machines
    not listed yet; today on this machine while none has finished, and "—" where none has started."""
    seen = []
    for result in results:
        if result.status == "finished":
            provenance = (yaml.safe_load((result.run_dir / "config.yaml").read_text()) or {}).get("provenance") or {}
            name = machine_name(provenance.get("hardware"), (provenance.get("versions") or {}).get("torch"))
            seen.append((str(provenance.get("created", ""))[:10], name))
    if not seen and all(result.status == "missing" for result in results):
        return "—"
    seen = sorted(set(seen)) or [(time.strftime("%Y-%m-%d"), here)]
    for _, name in seen:
        if name not in machines:
            machines.append(name)
    return ", ".join(f"{date} [{machines.index(name) + 1}]" for date, name in seen)


def write_table(suite: dict, path: Path, out: Path, table: Path, seeds: list[int]) -> None:
    overrides = list(suite.get("overrides") or [])
    options = "" if path == HERE / "suite.yaml" else \
        f" --suite {_shown(path)} --out {_shown(out)} --table {_shown(table)}"
    extra = f" Every run with `{' '.join(overrides)}`." if overrides else ""
    earlier, machines = earlier_table(table)
    here = machine_name(detect().describe(), versions()["torch"])
    intro = INTRO.format(suite=path.name, stem=path.stem, seeds=len(seeds), options=options, extra=extra)
    lines = [intro.rstrip("\n"), "", HEADER, "| " + " | ".join(["---"] * (HEADER.count(" | ") + 1)) + " |"]
    for entry in suite["rows"]:
        trials = plan([entry["spec"]], seeds, overrides, out)
        results = [read_run(t.run_dir, t.spec, t.seed) for t in trials]
        if all(r.status == "missing" for r in results) and entry["spec"] in earlier:
            lines.append("| " + " | ".join(earlier[entry["spec"]]) + " |")
            continue
        lines.append(row(entry, results, overrides, measured_on(results, machines, here)))
    lines += ["", "Machines:", *(f"- [{index}] {name}" for index, name in enumerate(machines, 1))]
    table.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=HERE / "suite.yaml")
    parser.add_argument("--seeds", type=int, help="seeds per row (default: the suite's)")
    parser.add_argument("--workers", type=int, default=usable_cores())
    parser.add_argument("--out", type=Path, default=HERE / "runs" / "suite")
    parser.add_argument("--table", type=Path, default=HERE.parent / "docs" / "BENCHMARKS.md",
                        help="where the page with the table goes")
    parser.add_argument("--only", help="run only the rows whose spec matches this regular expression (the table keeps "
                        "the other rows' earlier lines)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    suite = read_suite(args.suite)
    chosen = [entry["spec"] for entry in suite["rows"] if not args.only or re.search(args.only, entry["spec"])]
    seeds = list(range(1, (args.seeds or suite.get("seeds", 3)) + 1))
    overrides = list(suite.get("overrides") or [])
    kept = RESULTS / args.suite.stem
    restore(kept, args.out)
    if not args.report_only:
        print(machine(), flush=True)
        try:
            with sigterm_interrupts():
                run_trials(chosen, seeds, overrides, args.out, args.workers, show)
        except KeyboardInterrupt:
            print("\nstopped; the runs saved checkpoints: run the same command to continue", flush=True)
            return 130
        print()
    keep(args.out, kept, [trial.run_dir for trial in plan(chosen, seeds, overrides, args.out)])
    write_table(suite, args.suite.resolve(), args.out, args.table, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
