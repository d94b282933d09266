"""`rlfoundry runs ...`: list, show, compare, export and clean the runs recorded in the run registry.

Every command first scans the runs root, so runs made before the registry existed appear too. Bad
input (an unknown id, sort key or format, a missing runs root) prints one `error:` line and exits 2.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlfoundry.config.errors import ConfigError
from rlfoundry.run.registry import (
    COLUMNS, Registry, RegistryError, RegistryWarning, RunRecord, read_run, select_for_clean,
)
from rlfoundry.run.rundir import write_atomic

runs_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="The run registry: list, show, compare, export and clean recorded runs.",
)

FORMATS = ("csv", "markdown", "latex")
# The columns of tables meant for people (list, markdown, latex); csv export has every column.
TABLE_COLUMNS = {
    "id": "id", "env_id": "env", "algo": "algo", "variant": "variant", "seed": "seed", "status": "status",
    "total_steps": "steps", "sps": "steps/s", "train_return_mean": "train return", "eval_return_mean": "eval return",
    "eval_return_std": "eval std", "best_eval_return": "best eval", "solved_at_step": "solved at",
}
COMPARE_FIELDS = ("env_id", "algo", "variant", "seed", "status", "total_steps", "wall_time_s", "sps",
                  "train_return_mean", "eval_return_mean", "eval_return_std", "best_eval_return", "solved_at_step",
                  "config_hash", "git_commit", "started_at")
CURVES = ("eval/return_mean", "train/return_mean")
NUMERIC = {"id", "seed", "total_steps", "wall_time_s", "sps", "train_return_mean", "eval_return_mean",
           "eval_return_std", "best_eval_return", "solved_at_step"}

RunsRoot = Annotated[Path, typer.Option("--runs-root", help="The runs root holding registry.sqlite (logging.runs_root).")]
EnvFilter = Annotated[Optional[str], typer.Option("--env", help="Env ids containing this text (any case).")]
AlgoFilter = Annotated[Optional[str], typer.Option("--algo", help="Algorithm name, e.g. ppo.")]
VariantFilter = Annotated[Optional[str], typer.Option("--variant", help="Preset variant, e.g. ppo-lstm.")]
StatusFilter = Annotated[Optional[str], typer.Option("--status", help="running | finished | failed | stopped.")]
SeedFilter = Annotated[Optional[int], typer.Option("--seed", help="train.seed")]
SortKey = Annotated[str, typer.Option("--sort", help="A column (id, env_id, seed, started_at, best_eval_return, ...) "
                                                     "or an alias (env, steps, started, eval, best).")]
Descending = Annotated[bool, typer.Option("--desc/--asc", help="Sort order.")]


def _out() -> Console:
    # Made per call so that the terminal width (COLUMNS) and the streams are those of this invocation.
    # Piped output (a file, `less`, a log) gets room for the whole table instead of rich's 80 columns.
    console = Console(soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(soft_wrap=True, width=240)
    return console


def _err() -> Console:
    return Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    _err().print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def warn(message: str) -> None:
    _err().print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


@contextmanager
def _user_errors() -> Iterator[None]:
    """ConfigError (bad input) and RegistryError (an unusable database) end the command with exit 2;
    registry warnings (skipped run directories) are printed as one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RegistryWarning)
        try:
            yield
        except (ConfigError, RegistryError) as exc:
            fail(str(exc))
        finally:
            for warning in caught:
                if issubclass(warning.category, RegistryWarning):
                    warn(str(warning.message))


def _registry(runs_root: Path) -> Registry:
    if not runs_root.is_dir():
        fail(f"runs root {runs_root}: no such directory (train a run first, or pass --runs-root DIR)")
    registry = Registry(runs_root)
    registry.scan()
    return registry


def _record(registry: Registry, run_id: int) -> RunRecord:
    record = registry.get(run_id)
    if record is None:
        fail(f"unknown run id {run_id} in {registry.path} (`rlfoundry runs list` shows the ids)")
    return record


def _fmt(name: str, value: Any) -> str:
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


def _filters(env, algo, variant, status, seed) -> dict[str, Any]:
    return {"env": env, "algo": algo, "variant": variant, "status": status, "seed": seed}


# ---------------------------------------------------------------------- list / show


@runs_app.command("list")
def list_runs(
    env: EnvFilter = None, algo: AlgoFilter = None, variant: VariantFilter = None, status: StatusFilter = None,
    seed: SeedFilter = None, sort: SortKey = "id", descending: Descending = False, runs_root: RunsRoot = Path("runs"),
) -> None:
    """List recorded runs (filtered, sorted)."""
    with _user_errors():
        registry = _registry(runs_root)
        records = registry.query(_filters(env, algo, variant, status, seed), sort, descending)
    if not records:
        _out().print(f"no runs match in {runs_root}", highlight=False)
        return
    table = Table(title=f"runs in {escape(str(runs_root))} ({len(records)})")
    for name, title in TABLE_COLUMNS.items():
        table.add_column(title, justify="right" if name in NUMERIC else "left", no_wrap=name in ("id", "env_id"))
    table.add_column("started", no_wrap=True)
    for record in records:
        row = record.as_dict()
        table.add_row(*(escape(_fmt(name, row[name])) for name in TABLE_COLUMNS), _fmt("started_at", record.started_at))
    _out().print(table)


@runs_app.command("show")
def show(
    run_id: Annotated[int, typer.Argument(metavar="ID", help="A run id from `rlfoundry runs list`.")],
    runs_root: RunsRoot = Path("runs"),
) -> None:
    """Every recorded field of one run, and its directory."""
    with _user_errors():
        record = _record(_registry(runs_root), run_id)
    out = _out()
    for name, value in record.as_dict().items():
        shown = "-" if value is None else str(value)
        out.print(f"{name:<18} {escape(shown)}", highlight=False)
    if not Path(record.run_dir).is_dir():
        warn(f"run directory {record.run_dir} no longer exists")


# ---------------------------------------------------------------------- compare


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


def _plot(records: list[RunRecord], path: Path) -> int:
    """Overlay each run's curves in one figure per metric, side by side; returns how many runs had data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6 * len(CURVES), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(CURVES), squeeze=False)[0]
    plotted = 0
    for record in records:
        try:
            curves = _read_curves(Path(record.run_dir))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            warn(f"run {record.id}: metrics.csv unreadable ({exc}); left out of the plot")
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
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return plotted


@runs_app.command("compare")
def compare(
    run_ids: Annotated[list[int], typer.Argument(metavar="ID...", help="Run ids to compare.")],
    out_path: Annotated[Optional[Path], typer.Option("--out", help="Plot file (default: compare_<ids>.png here).")] = None,
    runs_root: RunsRoot = Path("runs"),
) -> None:
    """Final metrics side by side, and eval/train return curves overlaid in one plot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_ids = list(dict.fromkeys(run_ids))
    path = out_path or Path(f"compare_{'_'.join(map(str, run_ids))}.png")
    formats = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        fail(f"--out {path}: unknown plot format {path.suffix or '(none)'!r}; use one of "
             f"{', '.join('.' + f for f in sorted(formats))}")
    if not path.parent.is_dir():
        fail(f"--out {path}: directory {path.parent} does not exist")
    with _user_errors():
        registry = _registry(runs_root)
        records = [_record(registry, run_id) for run_id in run_ids]

    table = Table(title="final metrics")
    table.add_column("")
    for record in records:
        table.add_column(f"#{record.id}", justify="right")
    for name in COMPARE_FIELDS:
        values = [getattr(record, name) for record in records]
        if name in ("config_hash", "git_commit"):
            values = [None if v is None else v[:10] for v in values]
        table.add_row(name, *(escape(_fmt(name, value)) for value in values))
    _out().print(table)

    plotted = _plot(records, path)
    if plotted < len(records):
        warn(f"{len(records) - plotted} of {len(records)} runs have no curves in metrics.csv")
    _out().print(f"plot: {escape(str(path))}", highlight=False)


# ---------------------------------------------------------------------- export


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
    cells = [[_fmt(name, record.as_dict()[name]) for name in names] for record in records]
    titles = list(TABLE_COLUMNS.values())
    if fmt == "markdown":
        lines = ["| " + " | ".join(titles) + " |",
                 "| " + " | ".join("---:" if name in NUMERIC else "---" for name in names) + " |"]
        lines += ["| " + " | ".join(cell.replace("|", r"\|") for cell in row) + " |" for row in cells]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        align = "".join("r" if name in NUMERIC else "l" for name in names)
        lines = [rf"\begin{{tabular}}{{{align}}}", r"\hline",
                 " & ".join(_latex_escape(title) for title in titles) + r" \\", r"\hline"]
        lines += [" & ".join(_latex_escape(cell) for cell in row) + r" \\" for row in cells]
        lines += [r"\hline", r"\end{tabular}"]
        return "\n".join(lines) + "\n"
    raise ConfigError(f"unknown format {fmt!r}; available: {', '.join(FORMATS)}")


@runs_app.command("export")
def export(
    fmt: Annotated[str, typer.Option("--format", help="csv | markdown | latex")] = "csv",
    out_path: Annotated[Optional[Path], typer.Option("--out", help="Write here instead of stdout.")] = None,
    env: EnvFilter = None, algo: AlgoFilter = None, variant: VariantFilter = None, status: StatusFilter = None,
    seed: SeedFilter = None, sort: SortKey = "id", descending: Descending = False, runs_root: RunsRoot = Path("runs"),
) -> None:
    """Export the recorded runs (with the same filters as `list`)."""
    if fmt not in FORMATS:
        fail(f"--format {fmt}: unknown format; available: {', '.join(FORMATS)}")
    if out_path is not None and not out_path.parent.is_dir():
        fail(f"--out {out_path}: directory {out_path.parent} does not exist")
    with _user_errors():
        registry = _registry(runs_root)
        records = registry.query(_filters(env, algo, variant, status, seed), sort, descending)
        text = render(records, fmt)
    if out_path is None:
        typer.echo(text, nl=False)
        return
    write_atomic(out_path, text)
    _err().print(f"wrote {len(records)} runs to {escape(str(out_path))}", highlight=False)


# ---------------------------------------------------------------------- clean


@runs_app.command("clean")
def clean(
    keep_best: Annotated[int, typer.Option("--keep-best", min=0, help="Keep the N best runs (best_eval_return) "
                                                                       "of each env/algo/variant.")],
    keep_recent_days: Annotated[float, typer.Option("--keep-recent-days", min=0,
                                                    help="Keep runs started less than D days ago.")],
    yes: Annotated[bool, typer.Option("--yes", help="Delete; without it, only show what would be deleted.")] = False,
    runs_root: RunsRoot = Path("runs"),
) -> None:
    """Delete run directories that are neither among the best nor recent (a dry run unless --yes).

    Runs still running are never deleted.
    """
    with _user_errors():
        registry = _registry(runs_root)
        records = registry.query()
    chosen = select_for_clean(records, keep_best, keep_recent_days)
    out = _out()
    if not chosen:
        out.print(f"nothing to delete: all {len(records)} runs are among the {keep_best} best of their group, "
                  f"newer than {keep_recent_days:g} days, or running", highlight=False)
        return
    table = Table(title=("deleting" if yes else "would delete") + f" {len(chosen)} of {len(records)} runs")
    for title in ("id", "env", "variant", "seed", "best eval", "started", "run directory"):
        table.add_column(title, no_wrap=title in ("id", "env"))
    for record in chosen:
        table.add_row(str(record.id), escape(str(record.env_id)), escape(str(record.variant)), _fmt("seed", record.seed),
                      _fmt("best_eval_return", record.best_eval_return), _fmt("started_at", record.started_at),
                      escape(record.run_dir))
    out.print(table)
    if not yes:
        out.print("dry run: nothing deleted; pass --yes to delete these run directories", highlight=False)
        return

    deleted, failures = [], 0
    for record in chosen:
        run_dir = Path(record.run_dir)
        if run_dir.exists():
            # Checked again just before deleting: the run may have been resumed since the scan, and a path
            # that no longer holds a run directory is never removed.
            try:
                status = read_run(run_dir)["status"]
            except (OSError, ValueError) as exc:
                warn(f"run {record.id}: kept {run_dir}: does not look like a run directory ({exc})")
                continue
            if status == "running":
                warn(f"run {record.id}: kept {run_dir}: it is running")
                continue
            try:
                shutil.rmtree(run_dir)
            except OSError as exc:
                warn(f"run {record.id}: could not delete {run_dir}: {exc}")
                failures += 1
                continue
        deleted.append(record.id)
    with _user_errors():
        registry.delete(deleted)
    out.print(f"deleted {len(deleted)} runs", highlight=False)
    if failures:
        fail(f"{failures} run directories could not be deleted", code=1)
