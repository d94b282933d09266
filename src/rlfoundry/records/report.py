"""A run's report: `report.md` and `curves.png`, written from its run directory alone.

    read summary.json (required), config.yaml and metrics.csv (either may be missing)
    → curves.png: returns, losses, steps/s, time shares against global_step
    → report.md: status, summary table, key settings, provenance, the image

The trainer calls `write_report` at the end of every run and `rlfoundry report RUN_DIR` calls it
again, so it reads only files (never the trainer's state) and copes with runs that stopped early:
an empty or header-only metrics.csv, empty columns, NaN cells, no evaluation rows.
"""

from __future__ import annotations

import csv
import json
import math
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlfoundry.config.errors import ConfigError
from rlfoundry.records.rundir import write_atomic

FIGSIZE = (12.0, 8.0)  # inches; at DPI this gives a 1200 × 800 PNG
DPI = 100
TIME_COLUMNS = ("time/env", "time/act", "time/learn")


# ---------------------------------------------------------------- reading


def read_metrics(path: Path) -> dict[str, np.ndarray]:
    """metrics.csv as float columns of equal length; empty or unparsable cells are NaN.

    The CSV sink rewrites the whole file when its header widens, but a file cut short during that
    rewrite, or written by an appending writer, can hold a second header line or rows wider than
    the header: a repeated header replaces the column names from there on, cells past the header
    are dropped, short rows are padded.
    """
    if not path.is_file():
        return {}
    header: list[str] = []
    rows: list[dict[str, str]] = []
    with path.open(newline="") as handle:
        for cells in csv.reader(handle):
            if not cells:
                continue
            if not header or cells[0] == "global_step":
                header = cells
                continue
            if header:
                rows.append(dict(zip(header, cells)))
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    for key in header:
        if key not in columns:
            columns.append(key)
    return {key: np.array([_to_float(row.get(key)) for row in rows], dtype=float) for key in columns}


def _to_float(cell: str | None) -> float:
    if cell is None or cell == "":
        return math.nan
    try:
        return float(cell)
    except ValueError:
        return math.nan


def _read_mapping(path: Path, kind: str, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise ConfigError(f"{path}: not found; is {path.parent} a run directory?")
        return {}
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if kind == "json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc
    if data is None and not required:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping, found {type(data).__name__}")
    return data


# ---------------------------------------------------------------- writing


def write_report(run_dir: Path) -> tuple[Path, Path]:
    """Write `report.md` and `curves.png` into RUN_DIR and return their paths (report, curves).

    Raises ConfigError when RUN_DIR or its summary.json is missing or unreadable.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a run directory (it does not exist or is not a directory)")
    summary = _read_mapping(run_dir / "summary.json", "json", required=True)
    config = _read_mapping(run_dir / "config.yaml", "yaml", required=False)
    metrics = read_metrics(run_dir / "metrics.csv")

    curves = run_dir / "curves.png"
    report = run_dir / "report.md"
    write_atomic(curves, render_curves(metrics, summary, config))
    write_atomic(report, render_markdown(summary, config, metrics, curves.name))
    return report, curves


# ---------------------------------------------------------------- curves.png


def _finite(steps: np.ndarray, values: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    if values is None:
        return steps[:0], steps[:0]
    keep = np.isfinite(steps) & np.isfinite(values)
    return steps[keep], values[keep]


def _threshold(config: dict[str, Any]) -> float | None:
    solved = config.get("solved")
    value = solved.get("return") if isinstance(solved, dict) else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def render_curves(metrics: dict[str, np.ndarray], summary: dict[str, Any], config: dict[str, Any]) -> bytes:
    """The 2×2 figure as PNG bytes (FIGSIZE at DPI)."""
    # The object-oriented API with the Agg canvas, not pyplot: no display is needed and a caller's
    # own pyplot backend (a notebook's, say) is left alone; see matplotlib's "Embed in a web server".
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    # Fixed margins that fit the four panels' titles, ticks and labels: matplotlib's constrained layout would measure
    # every text first, which took 0.16 of the 0.41 s this figure costs (a cost every run pays at its end).
    fig.subplots_adjust(left=0.065, right=0.985, top=0.915, bottom=0.07, hspace=0.22, wspace=0.16)
    FigureCanvasAgg(fig)
    title = f"{summary.get('env_id') or '?'} · {summary.get('variant') or '?'} · seed {summary.get('seed', '?')}"
    fig.suptitle(title)
    steps = metrics.get("global_step", np.zeros(0))
    style = {"marker": "o", "markersize": 3} if len(steps) <= 20 else {}
    (ax_ret, ax_loss), (ax_sps, ax_time) = fig.subplots(2, 2, sharex=True)

    ax_ret.set_title("return")
    drawn = False
    for key, label, kwargs in (
        ("train/episode_return", "train (iteration mean)", {"alpha": 0.35, "linewidth": 0.8}),
        ("train/return_mean", "train (rolling mean)", {"linewidth": 1.6}),
    ):
        x, y = _finite(steps, metrics.get(key))
        if len(x):
            ax_ret.plot(x, y, label=label, **{**style, **kwargs})
            drawn = True
    x, mean = _finite(steps, metrics.get("eval/return_mean"))
    if len(x):
        std_all = metrics.get("eval/return_std", np.full(len(steps), np.nan))
        std = np.nan_to_num(std_all[np.isfinite(steps) & np.isfinite(metrics["eval/return_mean"])])
        ax_ret.plot(x, mean, marker="o", markersize=3, label="eval (mean ± std)")
        ax_ret.fill_between(x, mean - std, mean + std, alpha=0.2)
        drawn = True
    threshold = _threshold(config)
    if threshold is not None:
        ax_ret.axhline(threshold, linestyle="--", color="grey", linewidth=1, label=f"solved ({threshold:g})")
    _finish(ax_ret, drawn)

    ax_loss.set_title("losses")
    drawn = False
    scales = []
    for key in sorted(k for k in metrics if k.startswith("loss/")):
        x, y = _finite(steps, metrics[key])
        if len(x):
            ax_loss.plot(x, y, label=key.removeprefix("loss/"), **style)
            scales.append(float(np.median(np.abs(y))))
            drawn = True
    positive = [s for s in scales if s > 0]
    if len(positive) > 1 and max(positive) / min(positive) > 100:
        # Value losses are often 1000× the policy loss; symlog keeps both readable and allows negatives.
        ax_loss.set_yscale("symlog", linthresh=min(positive))
        ax_loss.set_title("losses (symlog)")
    _finish(ax_loss, drawn)

    ax_sps.set_title("steps / s")
    drawn = False
    for key, label in (("sps", "iteration"), ("sps_run", "run average")):
        x, y = _finite(steps, metrics.get(key))
        if len(x):
            ax_sps.plot(x, y, label=label, **style)
            drawn = True
    _finish(ax_sps, drawn)
    ax_sps.set_xlabel("global_step")

    ax_time.set_title("time share per iteration")
    present = [key for key in TIME_COLUMNS if key in metrics]
    drawn = False
    if present and len(steps):
        times = np.nan_to_num(np.stack([metrics[key] for key in present]), nan=0.0).clip(min=0.0)
        total = times.sum(axis=0)
        keep = np.isfinite(steps) & (total > 0)
        if keep.any():
            shares = times[:, keep] / total[keep]
            ax_time.stackplot(steps[keep], shares, labels=[key.removeprefix("time/") for key in present])
            ax_time.set_ylim(0, 1)
            drawn = True
    _finish(ax_time, drawn)
    ax_time.set_xlabel("global_step")

    buffer = BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _finish(ax, drawn: bool) -> None:
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize="small", loc="best")
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey",
                bbox={"facecolor": "white", "edgecolor": "none"})


# ---------------------------------------------------------------- report.md


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}" if value else "{}"
    return str(value)


def _cell(value: Any) -> str:
    return _fmt(value).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[tuple[str, Any]], head: tuple[str, str] = ("key", "value")) -> list[str]:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    lines += [f"| `{key}` | {_cell(value)} |" for key, value in rows]
    return lines


def _status_line(summary: dict[str, Any]) -> str:
    parts = [f"**Status:** {summary.get('status') or 'unknown'}"]
    steps, wall, sps = summary.get("total_steps"), summary.get("wall_time_s"), summary.get("sps")
    if steps is not None:
        timing = f"{_fmt(steps)} steps"
        if isinstance(wall, (int, float)):
            timing += f" in {wall:.1f} s"
        if isinstance(sps, (int, float)) and math.isfinite(sps):
            timing += f" ({sps:,.0f} steps/s)"
        parts.append(timing)
    return " · ".join(parts)


def _solved_line(summary: dict[str, Any], config: dict[str, Any]) -> str:
    threshold = _threshold(config)
    solved_at = summary.get("solved_at_step")
    source = (config.get("solved") or {}).get("source") if isinstance(config.get("solved"), dict) else None
    cited = f" ({source})" if source else ""
    if solved_at is not None:
        return f"**Solved** at step {_fmt(solved_at)}: evaluation return ≥ {_fmt(threshold)}{cited}."
    if threshold is None:
        return "No solved threshold for this env."
    best = summary.get("best_eval_return")
    best_text = f"; best evaluation return {_fmt(best)}" if best is not None else ""
    return f"**Not solved**: threshold {_fmt(threshold)}{cited}{best_text}."


def _section(config: dict[str, Any], key: str) -> dict[str, Any]:
    """The config's `key` section, or {} where it is missing or not a mapping."""
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def render_markdown(summary: dict[str, Any], config: dict[str, Any], metrics: dict[str, np.ndarray],
                    image: str) -> str:
    env = _section(config, "env")
    env_id = summary.get("env_id") or env.get("id") or "?"
    variant = summary.get("variant") or config.get("variant") or "?"
    lines = [f"# {env_id} · {variant} · seed {_fmt(summary.get('seed'))}", "",
             _status_line(summary), "", _solved_line(summary, config), ""]
    rows = len(metrics.get("global_step", ()))
    evals = int(np.isfinite(metrics["eval/return_mean"]).sum()) if "eval/return_mean" in metrics else 0
    lines += [f"![curves]({image})", "", f"{_fmt(rows)} logged iterations, {_fmt(evals)} evaluations.", ""]

    lines += ["## Summary", ""]
    lines += _table([(key, value) for key, value in summary.items() if key != "versions"])
    lines.append("")

    if config:
        lines += ["## Configuration", ""]
        train = _section(config, "train")
        settings = [("env.id", env.get("id")), ("env.num_envs", env.get("num_envs"))]
        settings += [(f"train.{key}", train.get(key)) for key in ("total_timesteps", "seed", "device") if key in train]
        for section in ("algo", "network"):
            values = config.get(section)
            if isinstance(values, dict):
                settings += [(f"{section}.{key}", value) for key, value in values.items()]
        lines += _table(settings, ("setting", "value"))
        lines.append("")

    provenance = _section(config, "provenance")
    versions = summary.get("versions") or provenance.get("versions") or {}
    lines += ["## Provenance", ""]
    commit = provenance.get("git_commit")
    if commit and provenance.get("git_dirty"):
        commit = f"{commit} (uncommitted changes)"
    facts = [("created", provenance.get("created")), ("git commit", commit), ("device", provenance.get("device")),
             ("torch threads", provenance.get("torch_threads")), ("vectorization", provenance.get("vectorization"))]
    facts += [(name, version) for name, version in versions.items()] if isinstance(versions, dict) else []
    lines += _table(facts, ("item", "value"))
    lines.append("")
    return "\n".join(lines)
