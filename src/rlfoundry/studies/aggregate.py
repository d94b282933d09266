"""Aggregate tables a paper can print (`rlfoundry trials --format`, `rlfoundry runs export --aggregate`).

Per group of runs (a trials spec; the registry's runs of one env, algo and variant): how many runs count out of
how many, and the IQM, mean and median of their final evaluation returns, each with its 95% stratified bootstrap
interval (`stats`, after Agarwal et al. 2021); the optimality gap where the returns can be normalised by a solved
threshold; and, between groups, P(X > Y). `records.tables.Table` renders them as csv, Markdown or booktabs LaTeX.

Scales. Groups of one env each are scored on raw returns, and the optimality gap on their returns over the env's
solved threshold. Groups that may span envs (`runs export --by` without env) are all scored on normalised returns
(return / solved threshold, 1 = solved: raw returns of different envs do not add up), a matrix [runs, envs] per
group, and the median of the env means (rliable's median) joins the table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlfoundry.config.errors import ConfigError
from rlfoundry.records.registry import RunRecord
from rlfoundry.records.tables import Cell, Column, Table, config_values, setting
from rlfoundry.studies import stats

COUNTED = ("finished", "stopped")  # a run with one of these statuses and a final evaluation counts
NO_RUNS = "no run finished with an evaluation"
ESTIMATES = {"iqm": "IQM", "mean": "mean", "median": "median", "median_of_means": "median of means",
             "optimality_gap": "optimality gap"}
RUNS = Column("runs", "runs", "count", csv=("runs", "total"))
# `runs export --aggregate --by`: registry columns by their names and aliases, and their titles
REGISTRY_KEYS = {"env": "env_id", "env_id": "env_id", "algo": "algo", "variant": "variant", "group": "trial_group",
                 "trial_group": "trial_group"}
TITLES = {"env_id": "env", "algo": "algo", "variant": "variant", "trial_group": "group"}
DEFAULT_BY = ("env_id", "algo", "variant")


@dataclass(frozen=True)
class Score:
    """One counted run's final evaluation return, on its task (env id), and over the task's solved threshold."""

    task: str
    value: float
    normalised: float | None  # None without a positive threshold


@dataclass(frozen=True)
class Group:
    """One row of an aggregate table: the cells that name it, how many runs it has, and the scores that count."""

    label: tuple[str, ...]
    total: int
    scores: tuple[Score, ...]


@dataclass(frozen=True)
class Summary:
    """A group's estimates by name (ESTIMATES' keys; none when nothing counts) and why any are missing."""

    group: Group
    estimates: dict[str, stats.Estimate] = field(default_factory=dict)
    resampled: bool = False  # more than one run per task: the intervals are bootstrap intervals, not the points
    note: str | None = None


def counts(status: str | None, value: float | None) -> bool:
    """Whether a run counts: it finished, or was stopped after an evaluation, and has a finite final return."""
    return status in COUNTED and value is not None and math.isfinite(value)


def normalise(value: float, threshold: float | None) -> float | None:
    """The return over a positive solved threshold; None for no threshold, or one at or below 0 (Pendulum's -250
    would reverse the order of returns)."""
    return value / threshold if threshold is not None and threshold > 0 else None


# ---------------------------------------------------------------- estimates


def summarise(groups: Iterable[Group], normalised: bool = False, reps: int = stats.REPS,
              seed: int = 0) -> list[Summary]:
    """Each group's estimates: on raw returns (one task a group) with the optimality gap on normalised ones where
    they exist, or, with `normalised`, everything on normalised returns over the group's envs."""
    return [_normalised(group, reps, seed) if normalised else _raw(group, reps, seed) for group in groups]


def _raw(group: Group, reps: int, seed: int) -> Summary:
    if not group.scores:
        return Summary(group, note=NO_RUNS)
    returns = np.array([score.value for score in group.scores]).reshape(-1, 1)
    estimates = stats.interval_estimates(returns, reps=reps, seed=seed)
    resampled = len(group.scores) > 1
    ratios = [score.normalised for score in group.scores]
    if any(ratio is None for ratio in ratios):
        return Summary(group, estimates, resampled, "no optimality gap: its env has no positive solved threshold")
    estimates["optimality_gap"] = stats.interval_estimate(np.array(ratios, dtype=float).reshape(-1, 1),
                                                          stats.optimality_gap, reps=reps, seed=seed)
    return Summary(group, estimates, resampled)


def _normalised(group: Group, reps: int, seed: int) -> Summary:
    if not group.scores:
        return Summary(group, note=NO_RUNS)
    matrix, problem = task_matrix(group.scores)
    if matrix is None:
        return Summary(group, note=problem)
    return Summary(group, stats.interval_estimates(matrix, reps=reps, seed=seed, normalised=True), matrix.shape[0] > 1)


def task_matrix(scores: Sequence[Score]) -> tuple[np.ndarray | None, str | None]:
    """Normalised scores as [runs, tasks] (tasks in name order), or None and why not: a task without a positive
    threshold, or tasks with different numbers of runs (the stratified bootstrap resamples a rectangle)."""
    by_task: dict[str, list[float]] = {}
    for score in scores:
        if score.normalised is None:
            return None, f"{score.task or 'an env'} has no positive solved threshold to normalise by"
        by_task.setdefault(score.task, []).append(score.normalised)
    sizes = {task: len(values) for task, values in sorted(by_task.items())}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{task} {n}" for task, n in sizes.items())
        return None, (f"its envs have different numbers of runs that count ({listed}); the bootstrap needs as many "
                      "on each: narrow the runs (--seed, --group) or group by env too")
    return np.array([values for _, values in sorted(by_task.items())], dtype=float).T, None


# ---------------------------------------------------------------- tables


def aggregate_table(summaries: Sequence[Summary], labels: Sequence[Column], normalised: bool = False) -> Table:
    """The label columns, runs counted/total, IQM, mean and median [95% CI]; with `normalised` the median of the
    task means; the optimality gap where any group has one. One run (per task) shows its point, no interval."""
    names = ["iqm", "mean", "median", *(["median_of_means"] if normalised else [])]
    if any("optimality_gap" in summary.estimates for summary in summaries):
        names.append("optimality_gap")
    columns = (*labels, RUNS, *(Column(name, f"{ESTIMATES[name]} [95% CI]", "interval") for name in names))
    rows = tuple((*summary.group.label, (len(summary.group.scores), summary.group.total),
                  *(_estimate_cell(summary, name) for name in names)) for summary in summaries)
    return Table(columns, rows)


def _estimate_cell(summary: Summary, name: str) -> Cell:
    estimate = summary.estimates.get(name)
    if estimate is None:
        return None
    return estimate if summary.resampled else estimate.value


def improvement_table(improvement: dict[tuple[str, str], stats.Estimate], names: Sequence[str]) -> Table:
    """P(X > Y) [95% CI] for each pair of `names` in their order that `improvement` holds (P(Y > X) is one minus
    it)."""
    columns = (Column("x", "X"), Column("y", "Y"), Column("probability", "P(X > Y) [95% CI]", "interval", 2))
    rows = tuple((x, y, improvement[x, y]) for i, x in enumerate(names) for y in names[i + 1:] if (x, y) in improvement)
    return Table(columns, rows)


def group_improvement(groups: Sequence[Group], reps: int = stats.REPS, seed: int = 0) -> tuple[Table, list[str]]:
    """P(X > Y) [95% CI] for each pair of groups that ran the same envs, and notes on the groups left out. Returns
    are compared per env, so no normalisation is needed (P(X > Y) reads only the order of runs within an env); a
    group needs as many counted runs on each of its envs (the stratified bootstrap resamples a rectangle)."""
    matrices: dict[str, tuple[tuple[str, ...], np.ndarray]] = {}
    left_out = []
    for group in groups:
        name = " / ".join(group.label)
        by_task: dict[str, list[float]] = {}
        for score in group.scores:
            by_task.setdefault(score.task, []).append(score.value)
        if not by_task:
            left_out.append(f"{name}: {NO_RUNS}")
        elif len({len(values) for values in by_task.values()}) > 1:
            left_out.append(f"{name}: its envs have different numbers of runs that count")
        else:
            tasks = tuple(sorted(by_task))
            matrices[name] = tasks, np.array([by_task[task] for task in tasks], dtype=float).T
    names = list(matrices)
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1:] if matrices[x][0] == matrices[y][0]]
    improvement = {(x, y): stats.probability_of_improvement(matrices[x][1], matrices[y][1], reps=reps, seed=seed)
                   for x, y in pairs}
    return improvement_table(improvement, names), left_out


def notes(summaries: Sequence[Summary]) -> list[str]:
    """What each group is missing and why, as `label: reason` lines."""
    return [f"{' / '.join(summary.group.label)}: {summary.note}" for summary in summaries if summary.note]


# ---------------------------------------------------------------- the registry's runs


def group_keys(text: str | None) -> tuple[str, ...]:
    """The keys of `--by`, comma-separated: registry columns (env, algo, variant, group) and dotted config keys
    (algo.lr); default env, algo, variant. ConfigError for an empty list or an unknown key."""
    if text is None:
        return DEFAULT_BY
    keys = [key.strip() for key in text.split(",") if key.strip()]
    if not keys:
        raise ConfigError(f"--by {text!r}: give keys, e.g. env,algo,variant or algo,algo.lr")
    unknown = [key for key in keys if "." not in key and key not in REGISTRY_KEYS]
    if unknown:
        raise ConfigError(f"--by {unknown[0]}: unknown key; use env, algo, variant, group or a dotted config key "
                          "(algo.lr)")
    resolved = [REGISTRY_KEYS.get(key, key) for key in keys]
    return tuple(dict.fromkeys(resolved))


def label_columns(keys: Sequence[str]) -> list[Column]:
    return [Column(key, TITLES.get(key, key)) for key in keys]


def record_groups(records: Sequence[RunRecord], keys: Sequence[str]) -> list[Group]:
    """The records grouped by `keys` (registry columns, or config keys read from each run's config.yaml with its
    solved threshold), in the records' order; a run's score is its final evaluation return (eval_return_mean)."""
    config_keys = [key for key in keys if key not in TITLES]
    members: dict[tuple[str, ...], list[tuple[RunRecord, float | None]]] = {}
    for record in records:
        threshold, *values = config_values(record.run_dir, ["solved.return", *config_keys])
        found = dict(zip(config_keys, values))
        label = tuple(setting(found[key] if key in found else getattr(record, key)) for key in keys)
        number = threshold if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) else None
        members.setdefault(label, []).append((record, number))
    return [Group(label, len(runs), tuple(score for score in (_score(*run) for run in runs) if score is not None))
            for label, runs in members.items()]


def _score(record: RunRecord, threshold: float | None) -> Score | None:
    """A record's score, None when it does not count."""
    value = record.eval_return_mean
    if value is None or not counts(record.status, value):
        return None
    return Score(record.env_id or "", value, normalise(value, threshold))
