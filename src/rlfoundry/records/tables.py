"""Recorded runs for people: the table columns and cells of `rlfoundry runs`, the csv / markdown / LaTeX exports,
and the overlaid return curves of `runs compare`."""

from __future__ import annotations

import csv
import io
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from rlfoundry.config.errors import ConfigError
from rlfoundry.records.registry import COLUMNS, RunRecord, dotted
from rlfoundry.records.rundir import file_mode

FORMATS = ("csv", "markdown", "latex")
# The columns of tables meant for people (list, markdown, latex); csv export has every column.
TABLE_COLUMNS = {
    "id": "id", "env_id": "env", "algo": "algo", "variant": "variant", "seed": "seed", "trial_group": "group",
    "status": "status",
    "total_steps": "steps", "sps": "steps/s", "train_return_mean": "train return", "eval_return_mean": "eval return",
    "eval_return_std": "eval std", "best_eval_return": "best eval", "solved_at_step": "solved at",
}
COMPARE_FIELDS = ("env_id", "algo", "variant", "seed", "status", "total_steps", "wall_time_s", "sps",
                  "train_return_mean", "eval_return_mean", "eval_return_std", "best_eval_return", "solved_at_step",
                  "config_hash", "git_commit", "started_at")
CURVES = ("eval/return_mean", "train/return_mean")
NUMERIC = {"id", "seed", "total_steps", "wall_time_s", "sps", "train_return_mean", "eval_return_mean",
           "eval_return_std", "best_eval_return", "solved_at_step"}


def config_values(run_dir: str | Path, keys: list[str]) -> list[Any]:
    """The values of dotted config keys (algo.lr) in a run's config.yaml; None where a key or the file is missing."""
    import yaml

    try:
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        config = None
    return [dotted(config, key) for key in keys]


def setting(value: Any) -> str:
    """A config value as written (1e-3 stays 1e-3, a schedule its mapping): "-" where it is missing."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(", ", ": "))
    return str(value)


def cell(name: str, value: Any) -> str:
    """One cell of a table for people: "-" for unknown, thousands separators, local times to the minute."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if name in ("total_steps", "solved_at_step"):
        return f"{value:,}"
    if name in ("started_at", "ended_at", "recorded_at"):
        try:
            return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M")
        except ValueError:
            return str(value)
    return str(value)


def _read_curves(run_dir: Path) -> dict[str, tuple[list[float], list[float]]]:
    """(global_step, value) series of CURVES from a run's metrics.csv; empty cells are skipped."""
    curves: dict[str, tuple[list[float], list[float]]] = {key: ([], []) for key in CURVES}
    with (run_dir / "metrics.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            try:
                step = float(row["global_step"])
            except (KeyError, TypeError, ValueError):
                continue
            for key in CURVES:
                try:
                    value = float(row.get(key) or "")
                except ValueError:
                    continue
                curves[key][0].append(step)
                curves[key][1].append(value)
    return curves


def plot_curves(records: list[RunRecord], path: Path) -> tuple[int, list[str]]:
    """Overlay each run's curves in one figure per metric, side by side; returns how many runs had data, and a
    warning for each run whose metrics could not be read."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6 * len(CURVES), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(CURVES), squeeze=False)[0]
    plotted, problems = 0, []
    for record in records:
        try:
            curves = _read_curves(Path(record.run_dir))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            problems.append(f"run {record.id}: metrics.csv unreadable ({exc}); left out of the plot")
            continue
        label = f"#{record.id} {record.env_id} {record.variant} s{record.seed}"
        for ax, key in zip(axes, CURVES):
            steps, values = curves[key]
            if steps:
                ax.plot(steps, values, label=label, marker="o" if len(steps) < 20 else None)
        plotted += any(curves[key][0] for key in CURVES)
    for ax, key in zip(axes, CURVES):
        ax.set_title(key)
        ax.set_xlabel("global_step")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize="small")
    # Saved beside the target and renamed into place, so an interrupted save leaves no half file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.fchmod(fd, file_mode())
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return plotted, problems


def _latex_escape(text: str) -> str:
    special = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
    return "".join(special.get(char, char) for char in text)


def render(records: list[RunRecord], fmt: str) -> str:
    """The records as csv (every column, raw values), a markdown table or a LaTeX tabular."""
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(COLUMNS)
        for record in records:
            writer.writerow(["" if value is None else value for value in record.as_dict().values()])
        return buffer.getvalue()
    names = list(TABLE_COLUMNS)
    cells = [[cell(name, record.as_dict()[name]) for name in names] for record in records]
    titles = list(TABLE_COLUMNS.values())
    if fmt == "markdown":
        lines = ["| " + " | ".join(titles) + " |",
                 "| " + " | ".join("---:" if name in NUMERIC else "---" for name in names) + " |"]
        lines += ["| " + " | ".join(text.replace("|", r"\|") for text in row) + " |" for row in cells]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        align = "".join("r" if name in NUMERIC else "l" for name in names)
        lines = [rf"\begin{{tabular}}{{{align}}}", r"\hline",
                 " & ".join(_latex_escape(title) for title in titles) + r" \\", r"\hline"]
        lines += [" & ".join(_latex_escape(text) for text in row) + r" \\" for row in cells]
        lines += [r"\hline", r"\end{tabular}"]
        return "\n".join(lines) + "\n"
    raise ConfigError(f"unknown format {fmt!r}; available: {', '.join(FORMATS)}")
