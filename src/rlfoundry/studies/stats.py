"""Statistics over a set of runs, after Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice"
(NeurIPS; its library is rliable, which the tests use as the reference).

Scores are a matrix [runs, tasks], rliable's convention: one spec on one env over N seeds is [N, 1]. The point
estimates (mean, median, interquartile mean, median of task means, and on normalised scores the optimality gap)
come with stratified bootstrap confidence intervals: each task's
runs are resampled with replacement on their own, so the uncertainty is the one over seeds, task by task. That is
`scipy.stats.bootstrap` with one sample per task and `paired=False`; the intervals are percentile intervals,
rliable's default. With a few runs the percentile bootstrap covers a little less than its nominal level (the
tests measure it), which is the known price of its simplicity and the same price rliable's users pay.

Every estimator below reads the last two axes as (runs, tasks) and any leading axes as a batch, so the
bootstrap's resamples are evaluated in one vectorised call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

REPS = 2000  # bootstrap resamples; rliable's default for profiles, enough for 2-digit interval ends
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its confidence interval [low, high]."""

    value: float
    low: float
    high: float


# ---------------------------------------------------------------- point estimates over [..., runs, tasks]


def mean(scores: np.ndarray) -> np.ndarray:
    """The mean over tasks of each task's mean over runs (rliable's `aggregate_mean`)."""
    return np.mean(np.mean(scores, axis=-2), axis=-1)


def median(scores: np.ndarray) -> np.ndarray:
    """The median of all run scores, pooled over tasks.

    Not rliable's `aggregate_median`, the median over tasks of the per-task means: on one task that is the mean
    of the runs, which is not what "the median over seeds" means to a reader. Pooled, it is robust to an outlier
    seed, as a median should be."""
    return np.median(_pooled(scores), axis=-1)


def iqm(scores: np.ndarray) -> np.ndarray:
    """The interquartile mean: the mean of the middle 50% of all run scores, pooled over tasks (rliable's
    `aggregate_iqm`, scipy's `trim_mean` cutting 25% at each end). Less noisy than the median, less swayed by an
    outlier seed than the mean."""
    return scipy.stats.trim_mean(_pooled(scores), 0.25, axis=-1)


def iqm_trims(scores: int) -> bool:
    """Whether the IQM of this many pooled scores trims anything: below 4 it cuts none and is the mean."""
    return int(0.25 * scores) >= 1


def median_of_means(scores: np.ndarray) -> np.ndarray:
    """The median over tasks of each task's mean over runs (rliable's `aggregate_median`). Across several tasks it
    is what Agarwal et al. call the median; on one task it is the mean (hence `median` above for seeds)."""
    return np.median(np.mean(scores, axis=-2), axis=-1)


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """How far runs fall short of `gamma`, on average: the mean of max(gamma - score, 0) over every run and task
    (rliable's `aggregate_optimality_gap`, which clips scores at gamma). Lower is better, 0 when every run reaches
    gamma. Only meaningful on normalised scores, where gamma = 1 is the target (here: the solved threshold)."""
    return gamma - np.mean(np.minimum(scores, gamma), axis=(-2, -1))


# Estimators that mean something on any scale, and those that need scores normalised to a target of 1.
ESTIMATORS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"mean": mean, "median": median, "iqm": iqm,
                                                              "median_of_means": median_of_means}
NORMALISED_ESTIMATORS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"optimality_gap": optimality_gap}


def _pooled(scores: np.ndarray) -> np.ndarray:
    """[..., runs, tasks] -> [..., runs * tasks]."""
    return scores.reshape(*scores.shape[:-2], -1)


# ---------------------------------------------------------------- the stratified bootstrap


def _checked(scores: np.ndarray | Sequence, name: str = "scores") -> np.ndarray:
    """Scores as a float [runs, tasks] matrix; a NaN (a failed run's) would silently move every estimate, so
    non-finite scores are an error, not something to skip here."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or 0 in scores.shape:
        raise ValueError(f"{name}: expected a [runs, tasks] matrix with at least one of each, got shape "
                         f"{scores.shape}")
    bad = int(np.size(scores) - np.isfinite(scores).sum())
    if bad:
        raise ValueError(f"{name}: {bad} of {scores.size} scores are not finite (NaN or inf); pass the scores of "
                         f"the runs that finished only")
    return scores


def _stacked(samples: Sequence[np.ndarray], axis: int) -> np.ndarray:
    """scipy's resamples, one array per task with the runs on `axis`, back as one [..., runs, tasks] array."""
    return np.stack([np.moveaxis(sample, axis, -1) for sample in samples], axis=-1)


def _resampled(statistic: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """A statistic of [..., runs, tasks] as scipy's bootstrap calls it: one array per task, runs on `axis`."""
    return lambda *samples, axis: statistic(_stacked(samples, axis))


def _by_task(scores: np.ndarray) -> list[np.ndarray]:
    """A [runs, tasks, ...] array as one sample per task, so each task's runs are resampled on their own."""
    return [scores[:, task] for task in range(scores.shape[1])]


def _interval(samples: list[np.ndarray], statistic: Callable[..., np.ndarray], reps: int, confidence: float,
              seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of `statistic(*samples)`, each sample resampled along axis 0 independently."""
    result = scipy.stats.bootstrap(samples, statistic, n_resamples=reps, vectorized=True, paired=False, axis=0,
                                   confidence_level=confidence, method="percentile",
                                   rng=np.random.default_rng(seed))
    return result.confidence_interval.low, result.confidence_interval.high


def interval_estimate(scores: np.ndarray, estimator: Callable[[np.ndarray], np.ndarray], reps: int = REPS,
                      confidence: float = CONFIDENCE, seed: int = 0) -> Estimate:
    """One estimator of scores [runs, tasks] with its stratified bootstrap percentile interval. With a single run
    per task there is nothing to resample: the interval is the point itself, which says "unknown", not
    "certain"."""
    scores = _checked(scores)
    value = float(estimator(scores))
    if scores.shape[0] < 2:
        return Estimate(value, value, value)
    low, high = _interval(_by_task(scores), _resampled(estimator), reps, confidence, seed)
    return Estimate(value, float(low), float(high))


def interval_estimates(scores: np.ndarray, reps: int = REPS, confidence: float = CONFIDENCE, seed: int = 0,
                       normalised: bool = False) -> dict[str, Estimate]:
    """Every estimator of ESTIMATORS (mean, median, IQM, median of task means) of scores [runs, tasks], each
    with its stratified bootstrap percentile interval; with `normalised` (scores over a target, 1 = reached) the
    optimality gap too. Deterministic for a given seed: every estimator sees the same resamples."""
    scores = _checked(scores)
    chosen = {**ESTIMATORS, **(NORMALISED_ESTIMATORS if normalised else {})}
    return {name: interval_estimate(scores, estimator, reps, confidence, seed) for name, estimator in chosen.items()}


# ---------------------------------------------------------------- comparisons


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) of [..., runs_x, tasks] against [..., runs_y, tasks]: per task the Mann-Whitney U statistic over
    n_x * n_y (the share of pairs where x wins, ties counting one half), averaged over tasks."""
    u = scipy.stats.mannwhitneyu(x, y, axis=-2, alternative="greater", method="asymptotic").statistic
    return np.mean(u / (x.shape[-2] * y.shape[-2]), axis=-1)


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = REPS, confidence: float = CONFIDENCE,
                               seed: int = 0) -> Estimate:
    """P(X > Y): the probability that a run of X scores above a run of Y on the same task, averaged over tasks
    (rliable's `probability_of_improvement`), with a stratified bootstrap interval that resamples X's and Y's
    runs independently per task. X and Y may have different numbers of runs, not of tasks."""
    x, y = _checked(x, "x"), _checked(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x has {x.shape[1]} tasks and y {y.shape[1]}: compare scores on the same tasks")
    value = float(_improvement(x, y))
    if max(x.shape[0], y.shape[0]) < 2:  # one run a side: nothing to resample, the interval is the point
        return Estimate(value, value, value)
    tasks = x.shape[1]
    if min(x.shape[0], y.shape[0]) < 2:  # a single run resamples to itself (scipy refuses it): hold it fixed
        single_x = x.shape[0] < 2
        fixed, varied = (x, y) if single_x else (y, x)

        def against_fixed(*s, axis):
            resampled = _stacked(s, axis)
            held = np.broadcast_to(fixed, (*resampled.shape[:-2], *fixed.shape))
            return _improvement(held, resampled) if single_x else _improvement(resampled, held)

        low, high = _interval(_by_task(varied), against_fixed, reps, confidence, seed)
    else:
        low, high = _interval(_by_task(x) + _by_task(y),
                              lambda *s, axis: _improvement(_stacked(s[:tasks], axis), _stacked(s[tasks:], axis)),
                              reps, confidence, seed)
    return Estimate(value, float(low), float(high))


def _profile(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """[..., runs, tasks] -> [thresholds, ...]: the share of runs scoring above each threshold, per task, averaged
    over tasks. Thresholds lead: scipy's bootstrap wants a vector statistic's resamples on the last axis."""
    above = scores > thresholds.reshape(-1, *([1] * scores.ndim))
    return np.mean(np.mean(above, axis=-2), axis=-1)


def performance_profile(scores: np.ndarray, thresholds: np.ndarray | Sequence[float], reps: int = REPS,
                        confidence: float = CONFIDENCE, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run-score distribution (rliable's default performance profile): for each threshold tau, the fraction
    of runs with a score above tau, per task then averaged over tasks; with pointwise bootstrap bands.

    Returns (fractions, low, high), each shaped like `thresholds`. A single run per task gives bands equal to
    the profile."""
    scores = _checked(scores)
    thresholds = np.asarray(thresholds, dtype=float).reshape(-1)
    fractions = _profile(scores, thresholds)
    if scores.shape[0] < 2:
        return fractions, fractions.copy(), fractions.copy()
    low, high = _interval(_by_task(scores), _resampled(lambda s: _profile(s, thresholds)),
                          reps, confidence, seed)
    return fractions, low, high


# ---------------------------------------------------------------- curves


def on_grid(steps: np.ndarray | Sequence[float], values: np.ndarray | Sequence[float],
            grid: np.ndarray | Sequence[float]) -> np.ndarray:
    """A run's evaluation curve read at the grid's steps: the latest evaluation at or before each grid step,
    NaN before its first one. Runs evaluate at steps that need not line up (each stops at its own batch
    boundary), so they are compared as what each had shown by then, never interpolated between evaluations."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if steps.shape != values.shape or steps.ndim != 1:
        raise ValueError(f"steps {steps.shape} and values {values.shape}: expected two 1-d arrays of one length")
    if np.any(np.diff(steps) < 0):
        raise ValueError("steps: expected in ascending order")
    grid = np.asarray(grid, dtype=float)
    if len(steps) == 0:
        return np.full(grid.shape, np.nan)
    latest = np.searchsorted(steps, grid, side="right") - 1
    return np.where(latest >= 0, values[np.maximum(latest, 0)], np.nan)


def common_grid(ends: Sequence[float], points: int = 50) -> np.ndarray:
    """`points` steps from 0 to the smallest of the runs' last steps (`ends`), so every run speaks for the whole
    grid; a longer run is cut rather than the others being extended."""
    if len(ends) == 0:
        raise ValueError("common_grid: no runs")
    return np.linspace(0.0, float(min(ends)), points)


def curve_estimates(curves: np.ndarray, reps: int = REPS, confidence: float = CONFIDENCE,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQM and its stratified bootstrap interval at each point of curves [runs, tasks, points] (each run read
    with `on_grid`), all points in one vectorised bootstrap.

    Returns (iqm, low, high), each [points]. A point where any run has no evaluation yet (NaN) is NaN: an IQM of
    the runs that happened to evaluate early would be biased towards them."""
    curves = np.asarray(curves, dtype=float)
    if curves.ndim != 3 or 0 in curves.shape:
        raise ValueError(f"curves: expected [runs, tasks, points] with at least one of each, got {curves.shape}")
    complete = np.isfinite(curves).all(axis=(0, 1))
    value, low, high = (np.full(curves.shape[2], np.nan) for _ in range(3))
    if not complete.any():
        return value, low, high
    kept = curves[:, :, complete]
    value[complete] = iqm(np.moveaxis(kept, -1, 0))
    if curves.shape[0] < 2:
        low[complete] = high[complete] = value[complete]
    else:
        low[complete], high[complete] = _interval(_by_task(kept), _resampled(iqm), reps, confidence,
                                                  seed)
    return value, low, high
