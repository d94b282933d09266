"""Recorded runs for people: the table columns and cells of `rlfoundry runs`, the overlaid return curves of `runs
compare`, and the one table renderer behind every export (`Table`: csv with raw numbers, a Markdown pipe table, a
booktabs LaTeX tabular), used by `runs export` and by the aggregate tables of `rlfoundry trials`."""

from __future__ import annotations

import csv
import io
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rlfoundry.config.errors import ConfigError
from rlfoundry.records.registry import COLUMNS, RunRecord, dotted
from rlfoundry.records.rundir import file_mode

FORMATS = ("csv", "markdown", "latex")
EXTENSIONS = {"csv": "csv", "markdown": "md", "latex": "tex"}  # a table file's suffix by format
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


def _decimals(scale: float) -> int:
    return 0 if scale >= 1000 else 1 if scale >= 100 else 2 if scale >= 1 else 3


def number_text(value: float, scale: float | None = None, grouped: bool = True) -> str:
    """A number with as many decimals as its size (or `scale`'s) calls for: 1,234 · 487.3 · 12.34 · 0.953; with
    `grouped` False without thousands separators (1234), as a table meant for print or a parser wants it."""
    digits = _decimals(abs(value) if scale is None else scale)
    return f"{value:{',' if grouped else ''}.{digits}f}"


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


# ---------------------------------------------------------------------- tables: csv, Markdown, booktabs LaTeX


@runtime_checkable
class Interval(Protocol):
    """A point estimate with its confidence interval (`studies.stats.Estimate`)."""

    @property
    def value(self) -> float: ...

    @property
    def low(self) -> float: ...

    @property
    def high(self) -> float: ...


# A cell: text; a number; an estimate with its interval; (counted, total) of a count column; None for unknown.
Cell = str | int | float | Interval | tuple[int, int] | None
KINDS = ("text", "number", "interval", "count")


@dataclass(frozen=True)
class Column:
    """A table column. `key` names it in csv, `title` in Markdown and LaTeX. An interval column is three in csv
    (key, key_low, key_high), a count column two (key, key_total) unless `csv` names them; `decimals` fixes the
    decimals of its floats (probabilities: 2), else each number gets as many as its size calls for."""

    key: str
    title: str
    kind: str = "text"  # one of KINDS; every kind but text is right-aligned
    decimals: int | None = None
    csv: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.key}: kind {self.kind!r}, expected one of {', '.join(KINDS)}")

    @property
    def csv_keys(self) -> tuple[str, ...]:
        if self.csv:
            return self.csv
        if self.kind == "interval":
            return (self.key, f"{self.key}_low", f"{self.key}_high")
        return (self.key, f"{self.key}_total") if self.kind == "count" else (self.key,)


@dataclass(frozen=True)
class Table:
    """Rows of cells under columns, rendered by `render` in any of FORMATS."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]

    def render(self, fmt: str) -> str:
        r"""csv (raw numbers at full precision, an interval's ends in columns of their own, empty for unknown), a
        Markdown pipe table, or a LaTeX tabular with booktabs rules (\toprule, \midrule, \bottomrule: it needs
        only `\usepackage{booktabs}`), numbers in plain digits, text escaped. Unknown formats: ConfigError."""
        if fmt == "csv":
            return self._csv()
        if fmt == "markdown":
            return self._markdown()
        if fmt == "latex":
            return self._latex()
        raise ConfigError(f"unknown format {fmt!r}; available: {', '.join(FORMATS)}")

    def _csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([key for column in self.columns for key in column.csv_keys])
        for row in self.rows:
            writer.writerow([raw for column, value in zip(self.columns, row) for raw in _csv_cells(column, value)])
        return buffer.getvalue()

    def _texts(self, fmt: str) -> list[list[str]]:
        return [[_text(column, value, fmt) for column, value in zip(self.columns, row)] for row in self.rows]

    def _markdown(self) -> str:
        titles = [column.title.replace("|", r"\|") for column in self.columns]
        rules = ["---" if column.kind == "text" else "---:" for column in self.columns]
        lines = ["| " + " | ".join(cells) + " |" for cells in (titles, rules, *self._texts("markdown"))]
        return "\n".join(lines) + "\n"

    def _latex(self) -> str:
        align = "".join("l" if column.kind == "text" else "r" for column in self.columns)
        header = [_latex_escape(column.title) for column in self.columns]
        body = [_latex_row(cells) for cells in self._texts("latex")]
        lines = [rf"\begin{{tabular}}{{{align}}}", r"\toprule", _latex_row(header), r"\midrule", *body,
                 r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines) + "\n"


def _latex_row(cells: list[str]) -> str:
    r"""Cells joined into a row; one starting with "[" is braced, or the \\ before it would read it as a length."""
    line = " & ".join(cells)
    return ("{}" if line.startswith("[") else "") + line + r" \\"


def _csv_cells(column: Column, value: Cell) -> list[Any]:
    """A cell as its csv columns: raw values, "" for unknown; an interval column given a plain number (one run:
    no interval) leaves its ends empty."""
    width = len(column.csv_keys)
    if value is None:
        return [""] * width
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Interval):
        return [value.value, value.low, value.high]
    return [value, *[""] * (width - 1)]


def _number(value: float, column: Column, fmt: str, scale: float | None = None) -> str:
    """A number for Markdown or LaTeX: plain digits at the precision its scale needs (or the column's), and in
    LaTeX a true minus sign."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif column.decimals is not None:
        text = f"{value:.{column.decimals}f}"
    else:
        text = number_text(value, scale, grouped=False)
    if text.startswith("-") and float(text) == 0:
        text = text[1:]  # -0.00: a rounded small negative is zero in print
    return "$-$" + text[1:] if fmt == "latex" and text.startswith("-") else text


def _text(column: Column, value: Cell, fmt: str) -> str:
    """A cell as Markdown or LaTeX text: an interval as `value [low, high]`, its three numbers with the decimals
    of the largest; a count as `counted/total`; unknown as a dash."""
    if value is None:
        return "--" if fmt == "latex" else "-"
    if isinstance(value, tuple):
        return f"{value[0]}/{value[1]}"
    if isinstance(value, Interval):
        ends = (value.value, value.low, value.high)
        scale = max(abs(end) for end in ends)
        point, low, high = (_number(end, column, fmt, scale) for end in ends)
        return f"{point} [{low}, {high}]"
    if isinstance(value, (int, float)):
        return _number(value, column, fmt)
    text = str(value)
    return _latex_escape(text) if fmt == "latex" else text.replace("|", r"\|")


def _latex_escape(text: str) -> str:
    """Text safe in a LaTeX document with no package: the ten special characters, and <, > and |, which the
    default OT1 font encoding prints as other glyphs outside math."""
    special = {"\\": r"$\backslash$", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": "$<$",
               ">": "$>$", "|": "$|$"}
    return "".join(special.get(char, char) for char in text)


def render(records: list[RunRecord], fmt: str) -> str:
    """The records as csv (every column, raw values), a markdown table (thousands separators, local times: for
    people) or a booktabs LaTeX tabular (plain digits, two decimals: for print)."""
    if fmt == "csv":
        columns = tuple(Column(name, name) for name in COLUMNS)
        return Table(columns, tuple(tuple(record.as_dict().values()) for record in records)).render(fmt)
    shown = [(name, Column(name, title, "number" if name in NUMERIC else "text", decimals=2))
             for name, title in TABLE_COLUMNS.items()]
    rows = tuple(tuple(cell(name, record.as_dict()[name]) if fmt == "markdown" else record.as_dict()[name]
                       for name, _ in shown) for record in records)
    return Table(tuple(column for _, column in shown), rows).render(fmt)
