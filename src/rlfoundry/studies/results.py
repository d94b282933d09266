"""The report of a set of runs (`rlfoundry trials`): every (spec, seed) trained as an ordinary run in its own
directory, then read back from those directories alone and summarised with `stats`.

    read_run(run_dir, spec, seed) -> RunResult     summary.json, config.yaml, metrics.csv, run.log; never raises
    write_report(out_dir, results)                 trials.csv, trials.md, curves.png (+ profile.png and
                                                   improvement.png with two specs or more); on request the plots
                                                   as PDF and SVG too, and the tables for papers (`aggregate`):
                                                   aggregate.{csv,md,tex}, improvement.{csv,md,tex}

A run counts in the statistics when it finished, or was stopped after at least one evaluation; its score is its
final evaluation return. Failed, running (killed) and missing runs are listed with the reason, never averaged in.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlfoundry.records.report import read_metrics
from rlfoundry.records.rundir import write_atomic
from rlfoundry.records.tables import EXTENSIONS, Column, number_text
from rlfoundry.studies import aggregate, plots, stats

# "refused": the run's command refused its spec as bad input (exit 2), so it made no run directory; "missing": no
# readable summary.json for another reason (a run never started, a deleted directory)
STATUSES = ("finished", "failed", "refused", "stopped", "running", "missing")
CSV_COLUMNS = ("spec", "seed", "env_id", "status", "final_return", "normalised_return", "solved_return", "steps",
               "wall_time_s", "sps", "run_dir", "error")
CITATION = ('Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (NeurIPS), '
            "as in its library rliable")
FIGURES = ("curves", "profile", "improvement")
TABLES = ("aggregate", "improvement")  # the tables for papers: per spec, and P(X > Y) per pair of specs
SPEC_LABELS = (Column("spec", "spec"), Column("env_id", "env"))
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")  # run.log's "%(asctime)s %(levelname)s "


@dataclass
class RunResult:
    """One (spec, seed) run as its directory records it."""

    spec: str
    seed: int
    run_dir: Path
    status: str  # one of STATUSES; "missing": no readable summary.json
    env_id: str | None = None
    final_return: float | None = None  # the last evaluation's mean return (summary.json eval_return_mean)
    solved: float | None = None  # the preset's solved threshold (config.yaml solved.return)
    steps: int | None = None
    horizon: int | None = None  # the last env step the curve speaks for: see `_horizon`
    wall_time_s: float | None = None
    sps: float | None = None
    curve: tuple[np.ndarray, np.ndarray] = field(default_factory=lambda: (np.zeros(0), np.zeros(0)))
    error: str | None = None

    @property
    def left_out(self) -> str | None:
        """Why the run does not count in the statistics; None when it counts."""
        if self.status not in ("finished", "stopped"):
            return self.status
        if self.final_return is None or not math.isfinite(self.final_return):
            return f"{self.status} without an evaluation"
        return None

    @property
    def normalised(self) -> float | None:
        """The final return over the solved threshold (1.0 = solved), comparable across envs. Only a positive
        threshold keeps the order of returns (Pendulum's -250 would reverse it), so others give None."""
        if self.left_out is not None or self.final_return is None or self.solved is None or self.solved <= 0:
            return None
        return self.final_return / self.solved


# ---------------------------------------------------------------- reading


def read_run(run_dir: Path | str, spec: str, seed: int) -> RunResult:
    """The run in `run_dir`. A directory that is missing or holds no readable summary.json gives status
    "missing" and the reason in `error`; an unreadable config.yaml or metrics.csv only loses what it would add."""
    run_dir = Path(run_dir)
    result = RunResult(spec=spec, seed=seed, run_dir=run_dir, status="missing")
    summary, problem = _summary(run_dir)
    if problem is not None:
        result.error = problem
        return result
    status = summary.get("status")
    if status in STATUSES:
        result.status = status
    else:
        result.error = f"summary.json: unknown status {status!r}"
    if status == "failed":
        result.error = _failure(run_dir / "run.log") or f"see {run_dir / 'run.log'}"
    config = _config(run_dir / "config.yaml")
    solved = config.get("solved")
    result.env_id = summary.get("env_id") or (config.get("env") or {}).get("id")
    result.final_return = _number(summary.get("eval_return_mean"))
    result.solved = _number(solved.get("return")) if isinstance(solved, dict) else None
    result.steps = _integer(summary.get("total_steps"))
    budget = _integer((config.get("train") or {}).get("total_timesteps"))
    result.horizon = _horizon(result.status, result.steps, budget)
    result.wall_time_s = _number(summary.get("wall_time_s"))
    result.sps = _number(summary.get("sps"))
    result.curve = _curve(run_dir / "metrics.csv")
    return result


def _summary(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    if not run_dir.is_dir():
        return {}, f"{run_dir}: no such directory"
    path = run_dir / "summary.json"
    if not path.is_file():
        return {}, f"{path}: not found (the run did not start)"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {}, f"{path}: unreadable ({type(exc).__name__}: {exc})"
    if not isinstance(data, dict):
        return {}, f"{path}: expected a mapping, found {type(data).__name__}"
    return data, None


def _config(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _curve(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(global_step, eval/return_mean) on the rows where an evaluation happened, in step order."""
    try:
        metrics = read_metrics(path)
    except (OSError, UnicodeDecodeError, csv.Error):
        return np.zeros(0), np.zeros(0)
    steps = metrics.get("global_step", np.zeros(0))
    values = metrics.get("eval/return_mean", np.full(len(steps), np.nan))
    keep = np.isfinite(steps) & np.isfinite(values)
    order = np.argsort(steps[keep], kind="stable")
    return steps[keep][order], values[keep][order]


def _failure(log: Path) -> str | None:
    """The exception line of the traceback the trainer logs after "run failed:" in run.log."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    starts = [i for i, line in enumerate(lines) if LOG_LINE.match(line) and line.endswith(" run failed:")]
    if not starts:
        return None
    block = []
    for line in lines[starts[-1] + 1:]:
        if LOG_LINE.match(line):
            break
        block.append(line)
    text = [line.strip() for line in block if line.strip()]
    return text[-1] if text else None


def _horizon(status: str, steps: int | None, total_timesteps: int | None) -> int | None:
    """A finished run speaks for its whole budget: one that stopped early at the solved threshold keeps its last
    evaluation, as its final score does. Any other run speaks only up to the steps it made."""
    if status == "finished" and steps is not None and total_timesteps is not None:
        return max(steps, total_timesteps)
    return steps


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and math.isfinite(number) else None


# ---------------------------------------------------------------- the report


@dataclass
class Comparison:
    """The specs compared with each other, on which scale, and those left out of it with the reason."""

    scores: dict[str, np.ndarray]  # spec -> [runs, 1]
    normalised: bool
    left_out: dict[str, str]
    improvement: dict[tuple[str, str], stats.Estimate]  # (x, y) -> P(x > y), for every ordered pair


def write_report(out_dir: Path | str, results: Sequence[RunResult], title: str = "rlfoundry trials",
                 reps: int = stats.REPS, seed: int = 0, tables: Sequence[str] = (),
                 figures: Sequence[str] = ("png",)) -> dict[str, Path]:
    """Write trials.csv, trials.md, the plots in each of the `figures` formats (plots.FORMATS: png, pdf, svg) and
    the tables for papers in each of the `tables` formats (csv, markdown, latex) into `out_dir`, each file
    atomically. Returns their paths by name: "csv", "md", a plot's name for its PNG ("curves"), the file name for
    the others ("curves.pdf", "aggregate.tex", "improvement.csv"). A plot without data is not written, and a plot
    or table this report does not write is removed where an earlier report left one: it would contradict this
    one."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_spec = _by_spec(results)
    comparison = _comparison(by_spec, reps, seed)
    summaries = dict(zip(by_spec, aggregate.summarise(_groups(by_spec), reps=reps, seed=seed)))
    paths = {"csv": out_dir / "trials.csv", "md": out_dir / "trials.md"}
    write_atomic(paths["csv"], _csv(results))
    plot_files = _write_each(out_dir, _plot_makers(by_spec, comparison, reps, seed), figures,
                             {fmt: fmt for fmt in plots.FORMATS})
    table_files = _write_each(out_dir, _table_makers(summaries, comparison), tables, EXTENSIONS)
    paths.update({name.removesuffix(".png"): path for name, path in {**plot_files, **table_files}.items()})
    write_atomic(paths["md"], _markdown(title, by_spec, comparison, summaries, list(plot_files), list(table_files),
                                        reps))
    return paths


Maker = Callable[[str], str | bytes]  # a file's content in a format


def _write_each(out_dir: Path, makers: dict[str, Maker | None], formats: Sequence[str],
                suffixes: dict[str, str]) -> dict[str, Path]:
    """NAME.SUFFIX for each maker and each of `formats`; every other NAME.SUFFIX of `suffixes` (a format not asked
    for, or a maker that is None: nothing to show) is removed, so no earlier report's file outlives its numbers."""
    written = {}
    for name, make in makers.items():
        for fmt, suffix in suffixes.items():
            path = out_dir / f"{name}.{suffix}"
            if make is None or fmt not in formats:
                path.unlink(missing_ok=True)
            else:
                write_atomic(path, make(fmt))
                written[path.name] = path
    return written


def _plot_makers(by_spec: dict[str, list[RunResult]], comparison: Comparison, reps: int,
                 seed: int) -> dict[str, Maker | None]:
    """Each plot of FIGURES as a saver in any format, or None without data (profile and improvement need two
    specs to compare); each figure is computed once."""
    compared = len(comparison.scores) >= 2
    made = {"curves": plots.curves_figure(by_spec, reps, seed),
            "profile": plots.profile_figure(comparison, reps, seed) if compared else None,
            "improvement": plots.improvement_figure(comparison) if compared else None}
    return {name: None if figure is None else functools.partial(plots.save, figure) for name, figure in made.items()}


def _table_makers(summaries: dict[str, aggregate.Summary], comparison: Comparison) -> dict[str, Maker | None]:
    """The tables for papers as renderers: per spec, and P(X > Y) when two specs or more are compared."""
    per_spec = aggregate.aggregate_table(list(summaries.values()), SPEC_LABELS)
    pairs = (aggregate.improvement_table(comparison.improvement, list(comparison.scores))
             if len(comparison.scores) >= 2 else None)
    return {"aggregate": per_spec.render, "improvement": None if pairs is None else pairs.render}


def _by_spec(results: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    groups: dict[str, list[RunResult]] = {}
    for result in results:
        groups.setdefault(result.spec, []).append(result)
    return groups


def _groups(by_spec: dict[str, list[RunResult]]) -> list[aggregate.Group]:
    """Each spec as a group of the tables for papers: named by the spec and its env, scored by its counted runs."""
    return [aggregate.Group((spec, next((run.env_id for run in runs if run.env_id), "-")), len(runs),
                            tuple(score for score in map(_score, runs) if score is not None))
            for spec, runs in by_spec.items()]


def _score(run: RunResult) -> aggregate.Score | None:
    if run.left_out is not None or run.final_return is None:
        return None
    return aggregate.Score(run.env_id or "", run.final_return, run.normalised)


def _scores(runs: list[RunResult], normalised: bool = False) -> np.ndarray:
    """The counted runs' final returns as a [runs, 1] matrix (one spec is one task)."""
    values = [run.normalised if normalised else run.final_return for run in runs if run.left_out is None]
    return np.array(values, dtype=float).reshape(-1, 1)


def _comparison(by_spec: dict[str, list[RunResult]], reps: int, seed: int) -> Comparison:
    """Raw returns when every spec runs on one env; over several envs, returns over each env's solved threshold,
    leaving out the specs whose env has no positive threshold. P(x > y) for each ordered pair of the rest."""
    counted = {spec: [run for run in runs if run.left_out is None] for spec, runs in by_spec.items()}
    counted = {spec: runs for spec, runs in counted.items() if runs}
    normalised = len({run.env_id for runs in counted.values() for run in runs}) > 1
    scores, left_out = {}, {}
    for spec, runs in counted.items():
        if normalised and any(run.normalised is None for run in runs):
            left_out[spec] = "its env has no positive solved threshold to normalise by"
        else:
            scores[spec] = _scores(runs, normalised)
    improvement = {(x, y): stats.probability_of_improvement(scores[x], scores[y], reps=reps, seed=seed)
                   for x in scores for y in scores if x != y}
    return Comparison(scores, normalised, left_out, improvement)


# ---------------------------------------------------------------- trials.csv


def _csv(results: Sequence[RunResult]) -> str:
    """One row per run, every run whatever its status; empty cells for what a run did not record."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for run in results:
        row = (run.spec, run.seed, run.env_id, run.status, run.final_return, run.normalised, run.solved, run.steps,
               run.wall_time_s, run.sps, run.run_dir, run.error)
        writer.writerow(["" if value is None else value for value in row])
    return buffer.getvalue()


# ---------------------------------------------------------------- trials.md


def _estimate(estimate: stats.Estimate, runs: int) -> str:
    """As "487.3 [472.1, 500.0]", the three numbers with the same decimals; one run has no interval."""
    if runs < 2:
        return f"{number_text(estimate.value)} (1 run)"
    scale = max(abs(estimate.value), abs(estimate.low), abs(estimate.high))
    return f"{number_text(estimate.value, scale)} [{number_text(estimate.low, scale)}, {number_text(estimate.high, scale)}]"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _mean_of(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def _spec_row(spec: str, runs: list[RunResult], summary: aggregate.Summary) -> str:
    n = len(summary.group.scores)
    cells = ["-"] * 3
    if summary.estimates:
        cells = [_estimate(summary.estimates[name], n) for name in ("mean", "median", "iqm")]
        if not stats.iqm_trims(n):
            cells[2] = "= mean (nothing trimmed below 4 runs)"
    walls = [run.wall_time_s for run in runs if run.wall_time_s is not None]
    sps = _mean_of([run.sps for run in runs])
    failed = sum(run.status in ("failed", "refused") for run in runs)
    return "| " + " | ".join([
        f"`{spec}`", str(len(runs)), str(n), str(failed), *cells,
        _duration(sum(walls)) if walls else "-", _duration(sum(walls) / len(walls)) if walls else "-",
        f"{sps:,.0f}" if sps is not None else "-",
    ]) + " |"


def _spec_table(by_spec: dict[str, list[RunResult]], summaries: dict[str, aggregate.Summary]) -> list[str]:
    return [
        "| spec | runs | counted | failed | mean [95% CI] | median [95% CI] | IQM [95% CI] | wall time | per run "
        "| steps/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(_spec_row(spec, runs, summaries[spec]) for spec, runs in by_spec.items()),
    ]


def _probability(p: stats.Estimate) -> str:
    return f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}]"


def _improvement_table(comparison: Comparison) -> list[str]:
    specs = list(comparison.scores)
    lines = ["| P(row > column) | " + " | ".join(f"`{spec}`" for spec in specs) + " |",
             "| --- |" + " ---: |" * len(specs)]
    for x in specs:
        cells = ["-" if x == y else _probability(comparison.improvement[x, y]) for y in specs]
        lines.append(f"| `{x}` | " + " | ".join(cells) + " |")
    return lines


def _left_out_lines(by_spec: dict[str, list[RunResult]]) -> list[str]:
    lines = []
    for spec, runs in by_spec.items():
        for run in runs:
            if run.left_out is not None:
                error = f": {run.error}" if run.error else ""
                where = f" (`{run.run_dir}`)" if run.run_dir.is_dir() else ""  # a refused run made none
                lines.append(f"- `{spec}` seed {run.seed}: {run.left_out}{error}{where}")
    return lines


def _counts_line(by_spec: dict[str, list[RunResult]]) -> str:
    runs = [run for group in by_spec.values() for run in group]
    reasons: dict[str, int] = {}
    for run in runs:
        if run.left_out is not None:
            reasons[run.left_out] = reasons.get(run.left_out, 0) + 1
    counted = len(runs) - sum(reasons.values())
    line = f"{len(runs)} runs of {len(by_spec)} spec{'s' * (len(by_spec) != 1)}; {counted} count in the statistics"
    if reasons:
        line += "; left out: " + ", ".join(f"{n} {reason}" for reason, n in reasons.items()) + " (listed below)"
    return line + "."


def _method_lines(reps: int) -> list[str]:
    return [
        "Each run's score is its final evaluation return (the mean return of its last evaluation, "
        "`eval_return_mean` in its summary.json). Over the seeds of a spec: the mean, the median and the "
        "interquartile mean (IQM: the mean of the middle 50% of runs, robust to an outlier seed once there are 4 "
        "runs or more to trim), each with a 95% "
        f"stratified bootstrap percentile confidence interval ({reps:,} resamples). A run that failed, was killed "
        "or never evaluated is left out, not counted as zero; wall time and steps/s are over all runs. Statistics "
        "after " + CITATION + ".",
    ]


FEW_RUNS = 5  # below this many runs a side, a bootstrap of P(X > Y) can collapse to a point


def _few_runs_lines(comparison: Comparison) -> list[str]:
    """The caveat the sentence above needs when a spec has few runs: resampling 3 runs that all beat 3 others gives
    1.00 every time, an interval [1.00, 1.00] that reads as certainty."""
    few = min(len(scores) for scores in comparison.scores.values())
    if few >= FEW_RUNS:
        return []
    return ["", f"With {few} run{'s' * (few != 1)} in the smallest spec, these intervals are too narrow to lean on: "
                f"every resample of a few runs can rank them alike, so an interval may shrink to its point (3 runs "
                f"that all beat 3 others give 1.00 [1.00, 1.00]). Read such a result as no overlap among these seeds, "
                "not as a settled difference; more seeds make the interval mean what it says."]


def _comparison_lines(comparison: Comparison, specs: int) -> list[str]:
    if specs < 2:
        return []
    lines = ["", "## Probability of improvement", ""]
    if comparison.normalised:
        lines += ["The specs run on several envs, so each run's final return is divided by its env's solved "
                  "threshold (config.yaml `solved.return`; 1.0 = solved) before specs are compared.", ""]
    if len(comparison.scores) >= 2:
        lines += [
            "P(X > Y) is the probability that a run of spec X ends above a run of spec Y (ties count one half: the "
            "Mann-Whitney U statistic over the number of pairs), with a 95% bootstrap interval; 0.5 is a tie, and "
            "an interval that excludes 0.5 is a difference the seeds support.",
            *_few_runs_lines(comparison), "", *_improvement_table(comparison),
        ]
    else:
        lines.append("Fewer than two specs have runs that can be compared.")
    for spec, reason in comparison.left_out.items():
        lines += ["", f"`{spec}` is left out of the comparison: {reason}."]
    return lines


def _plot_lines(files: list[str]) -> list[str]:
    """Each plot of the plot files shown (its PNG, else its SVG) or linked (a PDF), and its other formats linked."""
    lines = []
    for name in FIGURES:
        written = [file for file in files if file.rpartition(".")[0] == name]
        if not written:
            continue
        shown = next((file for file in written if file.endswith((".png", ".svg"))), None)
        others = ", ".join(f"[{file}]({file})" for file in written if file != shown)
        if shown is None:
            lines.append(f"{name}: {others}")
        else:
            lines.append(f"![{name}]({shown})" + (f" (also {others})" if others else ""))
    return ["", "## Plots", "", *lines] if lines else []


TABLE_TEXT = {"aggregate": "per spec: runs counted/total; IQM, mean and median of the final evaluation return, each "
                           "with its 95% CI; the optimality gap where the env has a positive solved threshold",
              "improvement": "P(X > Y) [95% CI] for each pair of specs"}


def _table_lines(files: list[str], summaries: dict[str, aggregate.Summary]) -> list[str]:
    """The table files written, what each table holds, and why a spec has no optimality gap."""
    listed = {name: [file for file in files if file.rpartition(".")[0] == name] for name in TABLES}
    if not any(listed.values()):
        return []
    lines = ["", "## Tables for papers", ""]
    lines += [f"- {', '.join(f'[{file}]({file})' for file in written)}: {TABLE_TEXT[name]}"
              for name, written in listed.items() if written]
    lines += ["", "The LaTeX tables are booktabs tabulars (`\\usepackage{booktabs}`); the csv files hold the raw "
              "numbers, an interval as its value, `_low` and `_high` columns. The optimality gap (Agarwal et al. "
              "2021) is the mean of max(1 - return / solved threshold, 0) over the runs: how far they fall short "
              "of solving the env, as a share of the threshold (0: every run solved)."]
    missing = aggregate.notes(list(summaries.values()))
    return lines + (["", *(f"- {line}" for line in missing)] if missing else [])


def _markdown(title: str, by_spec: dict[str, list[RunResult]], comparison: Comparison,
              summaries: dict[str, aggregate.Summary], plot_files: list[str], table_files: list[str],
              reps: int) -> str:
    """trials.md: the counts, the method in a paragraph, the per-spec table, the comparison, what was left out,
    the tables for papers and the plots."""
    lines = [f"# {title}", "", _counts_line(by_spec), "", *_method_lines(reps), "", "## Final evaluation return",
             "", *_spec_table(by_spec, summaries), *_comparison_lines(comparison, len(by_spec))]
    left_out = _left_out_lines(by_spec)
    if left_out:
        lines += ["", "## Left out of the statistics", "", *left_out]
    lines += _table_lines(table_files, summaries) + _plot_lines(plot_files)
    return "\n".join(lines) + "\n"
