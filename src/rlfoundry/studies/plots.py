"""The plots of a trials report (`studies/results.py`): evaluation curves, the performance profile and the
probability of improvement, each with its 95% bootstrap band, as matplotlib figures on the Agg canvas, saved as
PNG, PDF or SVG bytes by `save` (each figure is computed once, whatever the number of formats)."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from rlfoundry.studies import stats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from rlfoundry.studies.results import Comparison, RunResult

GRID_POINTS = 50
PROFILE_POINTS = 101
DPI = 100
FORMATS = ("png", "pdf", "svg")
# No creation date in the vector formats: the same figure gives the same bytes.
METADATA: dict[str, dict[str, Any]] = {"png": {}, "pdf": {"CreationDate": None}, "svg": {"Date": None}}


def _figure(panels: int, width: float = 6.0, height: float = 4.5):
    """A figure of `panels` axes, at most three to a row, on the Agg canvas: no display, and a caller's own
    pyplot backend is left alone (as records/report.py does)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = min(panels, 3)
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(width * cols, height * rows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[:panels]


def save(fig: Figure, fmt: str) -> bytes:
    """The figure as a file of `fmt` (one of FORMATS): PNG at DPI; PDF and SVG as vector graphics."""
    if fmt not in FORMATS:
        raise ValueError(f"plot format {fmt!r}: expected one of {', '.join(FORMATS)}")
    from matplotlib import rc_context

    buffer = io.BytesIO()
    with rc_context({"svg.hashsalt": "rlfoundry"}):  # SVG ids from the content, not a random salt
        fig.savefig(buffer, format=fmt, dpi=DPI, metadata=METADATA[fmt])
    return buffer.getvalue()


def _spec_curve(runs: list[RunResult], reps: int, seed: int) -> tuple[np.ndarray, ...] | None:
    """(grid, iqm, low, high) of the counted runs that have evaluation rows, or None without any."""
    runs = [run for run in runs if run.left_out is None and len(run.curve[0]) and run.horizon is not None]
    if not runs:
        return None
    grid = stats.common_grid([run.horizon for run in runs if run.horizon is not None], GRID_POINTS)
    curves = np.stack([stats.on_grid(*run.curve, grid) for run in runs])[:, None, :]
    return (grid, *stats.curve_estimates(curves, reps=reps, seed=seed))


def curves_figure(by_spec: dict[str, list[RunResult]], reps: int, seed: int) -> Figure | None:
    """Per env a panel; per spec its IQM evaluation return over env steps with the 95% band."""
    envs: dict[str, list[tuple[str, tuple[np.ndarray, ...], float | None]]] = {}
    for spec, runs in by_spec.items():
        curve = _spec_curve(runs, reps, seed)
        if curve is not None:
            env = next(run.env_id for run in runs if run.left_out is None) or "?"
            envs.setdefault(env, []).append((spec, curve, runs[0].solved))
    if not envs:
        return None
    fig, axes = _figure(len(envs))
    for ax, (env, curves) in zip(axes, envs.items()):
        for spec, (grid, value, low, high), _ in curves:
            # steps: each point is the latest evaluation at or before it, held until the next (`stats.on_grid`)
            (line,) = ax.plot(grid, value, label=spec, drawstyle="steps-post")
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0, step="post")
        threshold = curves[0][2]
        if threshold is not None:
            ax.axhline(threshold, linestyle="--", color="grey", linewidth=1, label=f"solved ({threshold:g})")
        ax.set_title(f"{env}: IQM evaluation return, 95% CI")
        ax.set_xlabel("env steps")
        ax.set_ylabel("evaluation return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return fig


def profile_figure(comparison: Comparison, reps: int, seed: int) -> Figure:
    """The fraction of runs above each score, per spec, with the 95% band."""
    pooled = np.concatenate([scores.ravel() for scores in comparison.scores.values()])
    margin = 0.05 * (np.ptp(pooled) or 1.0)  # every profile starts at 1 and ends at 0
    thresholds = np.linspace(pooled.min() - margin, pooled.max() + margin, PROFILE_POINTS)
    fig, (ax,) = _figure(1, width=7.0)
    for spec, scores in comparison.scores.items():
        fractions, low, high = stats.performance_profile(scores, thresholds, reps=reps, seed=seed)
        (line,) = ax.plot(thresholds, fractions, label=spec)
        ax.fill_between(thresholds, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    if comparison.normalised:
        ax.axvline(1.0, linestyle="--", color="grey", linewidth=1, label="solved")
    ax.set_title("Performance profile, 95% CI")
    ax.set_xlabel("final return / solved threshold (τ)" if comparison.normalised else "final return (τ)")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def improvement_figure(comparison: Comparison) -> Figure:
    """P(X > Y) with its 95% interval for each pair of specs, one row per pair."""
    specs = list(comparison.scores)
    pairs = [(x, y) for i, x in enumerate(specs) for y in specs[i + 1:]]
    fig, (ax,) = _figure(1, width=8.0, height=1.4 + 0.5 * len(pairs))
    for row, (x, y) in enumerate(pairs):
        p = comparison.improvement[x, y]
        ax.errorbar(p.value, row, xerr=[[p.value - p.low], [p.high - p.value]], fmt="o", capsize=4, color="C0")
    ax.set_yticks(range(len(pairs)), [f"P({x} > {y})" for x, y in pairs])
    ax.invert_yaxis()
    ax.axvline(0.5, linestyle="--", color="grey", linewidth=1)
    ax.set_xlim(0.0, 1.0)
    ax.set_title("Probability of improvement, 95% CI")
    ax.set_xlabel("P(X > Y): a run of X ends above a run of Y")
    ax.grid(alpha=0.3, axis="x")
    return fig
