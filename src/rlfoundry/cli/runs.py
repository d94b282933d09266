"""`rlfoundry runs ...`: list, show, compare, export and clean the runs recorded in the run registry, and verify
that a run reproduces.

Every command first scans the runs root, so runs made before the registry existed appear too. Bad
input (an unknown id, sort key or format, a missing runs root) prints one `error:` line and exits 2.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from rlfoundry.cli.common import err, fail, out, warn
from rlfoundry.config.errors import ConfigError
from rlfoundry.records.registry import (
    Registry,
    RegistryError,
    RegistryWarning,
    RunRecord,
    remove_runs,
    select_for_clean,
)
from rlfoundry.records.rundir import write_atomic
from rlfoundry.records.tables import (
    COMPARE_FIELDS,
    FORMATS,
    NUMERIC,
    TABLE_COLUMNS,
    cell,
    config_values,
    plot_curves,
    render,
    setting,
)

runs_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="The run registry: list, show, compare, export and clean recorded runs; verify that a run reproduces.",
)

RunsRoot = Annotated[Path, typer.Option("--runs-root", help="The runs root holding registry.sqlite (logging.runs_root).")]
EnvFilter = Annotated[str | None, typer.Option("--env", help="Env ids containing this text (any case).")]
AlgoFilter = Annotated[str | None, typer.Option("--algo", help="Algorithm name, e.g. ppo.")]
VariantFilter = Annotated[str | None, typer.Option("--variant", help="Preset variant, e.g. ppo-lstm.")]
StatusFilter = Annotated[str | None, typer.Option("--status", help="running | finished | failed | stopped.")]
SeedFilter = Annotated[int | None, typer.Option("--seed", help="train.seed")]
GroupFilter = Annotated[str | None, typer.Option("--group", help="logging.group: the runs of one `rlfoundry trials` "
                                                                     "set (its directory's name).")]
SortKey = Annotated[str, typer.Option("--sort", help="A column (id, env_id, seed, started_at, best_eval_return, ...) "
                                                     "or an alias (env, steps, started, eval, best).")]
Descending = Annotated[bool, typer.Option("--desc/--asc", help="Sort order.")]


@contextmanager
def _user_errors() -> Iterator[None]:
    """ConfigError (bad input) and RegistryError (an unusable database) end the command with exit 2;
    registry warnings (skipped run directories) are printed as one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RegistryWarning)
        try:
            yield
        except ConfigError as exc:
            fail(str(exc))
        except RegistryError as exc:
            fail(f"{exc} (`rlfoundry runs rebuild` makes a new one from the run directories, keeping this file)")
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


def _filters(env, algo, variant, status, seed, group) -> dict[str, Any]:
    return {"env": env, "algo": algo, "variant": variant, "status": status, "seed": seed, "group": group}


# ---------------------------------------------------------------------- list / show


@runs_app.command("list")
def list_runs(
    env: EnvFilter = None, algo: AlgoFilter = None, variant: VariantFilter = None, status: StatusFilter = None,
    seed: SeedFilter = None, group: GroupFilter = None, sort: SortKey = "id", descending: Descending = False,
    keys: Annotated[str | None, typer.Option("--keys", help="Config keys shown as columns, comma-separated (algo.lr,"
                                                             "algo.gamma): each run's value in its config.yaml.")] = None,
    runs_root: RunsRoot = Path("runs"),
) -> None:
    """List recorded runs (filtered, sorted): what they ran, how they ended, and where their directory is."""
    shown = [key.strip() for key in (keys or "").split(",") if key.strip()]
    with _user_errors():
        if keys is not None and not shown:
            raise ConfigError(f"--keys {keys!r}: give dotted config keys, e.g. algo.lr,algo.gamma")
        registry = _registry(runs_root)
        records = registry.query(_filters(env, algo, variant, status, seed, group), sort, descending)
    if not records:
        out().print(f"no runs match in {runs_root}", highlight=False)
        return
    table = Table(title=f"runs in {escape(str(runs_root))} ({len(records)})")
    for name, title in TABLE_COLUMNS.items():
        table.add_column(title, justify="right" if name in NUMERIC else "left", no_wrap=name in ("id", "env_id"))
    for key in shown:
        table.add_column(escape(key), justify="right")
    table.add_column("started", no_wrap=True)
    table.add_column("dir", overflow="fold")  # under the runs root, whole (to copy)
    for record in records:
        row = record.as_dict()
        values = [escape(setting(value)) for value in config_values(record.run_dir, shown)]
        table.add_row(*(escape(cell(name, row[name])) for name in TABLE_COLUMNS), *values,
                      cell("started_at", record.started_at), escape(_relative(record.run_dir, runs_root)))
    out().print(table)


def _relative(run_dir: str, runs_root: Path) -> str:
    """A run directory as a path under the runs root where it is one (trials/<set>/<spec>/s1), else in full."""
    try:
        return str(Path(run_dir).resolve().relative_to(runs_root.resolve()))
    except ValueError:
        return run_dir


@runs_app.command("rebuild")
def rebuild(runs_root: RunsRoot = Path("runs")) -> None:
    """Rebuild the registry from the run directories under the runs root, after it was corrupted or the folder
    moved; the old database is kept beside it (registry.sqlite.<time>.bak). Run ids are given afresh."""
    if not runs_root.is_dir():
        fail(f"runs root {runs_root}: no such directory (pass --runs-root DIR)")
    with _user_errors():
        aside, ids = Registry(runs_root).rebuild()
    kept = f"; the old database is kept as {aside}" if aside is not None else ""
    out().print(f"registry rebuilt: {len(ids)} run(s) recorded from {runs_root}{kept}", highlight=False)


@runs_app.command("show")
def show(
    run_id: Annotated[int, typer.Argument(metavar="ID", help="A run id from `rlfoundry runs list`.")],
    runs_root: RunsRoot = Path("runs"),
) -> None:
    """Every recorded field of one run, and its directory."""
    with _user_errors():
        record = _record(_registry(runs_root), run_id)
    console = out()
    for name, value in record.as_dict().items():
        shown = "-" if value is None else str(value)
        console.print(f"{name:<18} {escape(shown)}", highlight=False)
    if not Path(record.run_dir).is_dir():
        warn(f"run directory {record.run_dir} no longer exists")


# ---------------------------------------------------------------------- compare


@runs_app.command("compare")
def compare(
    run_ids: Annotated[list[int], typer.Argument(metavar="ID...", help="Run ids to compare.")],
    out_path: Annotated[Path | None, typer.Option("--out", help="Plot file (default: compare_<ids>.png here).")] = None,
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
        table.add_row(name, *(escape(cell(name, value)) for value in values))
    out().print(table)

    plotted, problems = plot_curves(records, path)
    for problem in problems:
        warn(problem)
    if plotted < len(records):
        warn(f"{len(records) - plotted} of {len(records)} runs have no curves in metrics.csv")
    out().print(f"plot: {escape(str(path))}", highlight=False)


# ---------------------------------------------------------------------- export


@runs_app.command("export")
def export(
    fmt: Annotated[str, typer.Option("--format", help="csv | markdown | latex (a booktabs tabular: \\usepackage{booktabs})")] = "csv",
    out_path: Annotated[Path | None, typer.Option("--out", help="Write here instead of stdout.")] = None,
    env: EnvFilter = None, algo: AlgoFilter = None, variant: VariantFilter = None, status: StatusFilter = None,
    seed: SeedFilter = None, group: GroupFilter = None, sort: SortKey = "id", descending: Descending = False,
    aggregate: Annotated[bool, typer.Option("--aggregate", help="One row per group of runs instead of per run: runs counted/total, and the IQM, mean and median of the final evaluation return (eval_return_mean: the mean return of a run's last evaluation; runs that finished, or stopped after an evaluation, count) with 95% stratified bootstrap CIs, and the optimality gap where the env's solved threshold is positive.")] = False,
    by: Annotated[str | None, typer.Option("--by", help="With --aggregate, the keys of a group, comma-separated: env, algo, variant, group or a dotted config key (algo.lr); default env,algo,variant. Without env a group spans envs and is scored on return / solved threshold, with the median of the env means too.")] = None,
    improvement: Annotated[bool, typer.Option("--improvement", help="With --aggregate, P(X > Y) [95% CI] for each pair of groups that ran the same envs instead: the probability that a run of X scores above a run of Y on the same env.")] = False,
    runs_root: RunsRoot = Path("runs"),
) -> None:
    """Export the recorded runs (with the same filters as `list`), one row per run or, with --aggregate, per group."""
    if fmt not in FORMATS:
        fail(f"--format {fmt}: unknown format; available: {', '.join(FORMATS)}")
    for option, given in (("--by", by is not None), ("--improvement", improvement)):
        if given and not aggregate:
            fail(f"{option} is for the groups of --aggregate; add --aggregate")
    if out_path is not None and not out_path.parent.is_dir():
        fail(f"--out {out_path}: directory {out_path.parent} does not exist")
    with _user_errors():
        keys = _group_keys(by) if aggregate else ()
        registry = _registry(runs_root)
        records = registry.query(_filters(env, algo, variant, status, seed, group), sort, descending)
        if aggregate:
            text, rows, notes = _aggregate(records, keys, fmt, improvement)
        else:
            text, rows, notes = render(records, fmt), f"{len(records)} runs", []
    for note in notes:
        err().print(f"note: {escape(note)}", highlight=False)
    if out_path is None:
        typer.echo(text, nl=False)
        return
    write_atomic(out_path, text)
    err().print(f"wrote {rows} to {escape(str(out_path))}", highlight=False)


def _group_keys(by: str | None) -> tuple[str, ...]:
    from rlfoundry.studies.aggregate import group_keys  # numpy and scipy: only for --aggregate

    return group_keys(by)


def _aggregate(records: list[RunRecord], keys: tuple[str, ...], fmt: str,
               improvement: bool) -> tuple[str, str, list[str]]:
    """The table of the records grouped by `keys` (or, with `improvement`, of P(X > Y) between the groups), how many
    rows it has, and notes: the scale, and what a group is missing and why."""
    from rlfoundry.studies import aggregate

    if improvement:
        table, left_out = aggregate.group_improvement(aggregate.record_groups(records, keys))
        return table.render(fmt), f"{len(table.rows)} pairs of groups", left_out
    normalised = "env_id" not in keys
    summaries = aggregate.summarise(aggregate.record_groups(records, keys), normalised=normalised)
    table = aggregate.aggregate_table(summaries, aggregate.label_columns(keys), normalised)
    scale = ["scores: final evaluation return / the env's solved threshold (1 = solved), as groups span envs"]
    notes = (scale if normalised and summaries else []) + aggregate.notes(summaries)
    return table.render(fmt), f"{len(summaries)} groups of {len(records)} runs", notes


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
    console = out()
    if not chosen:
        console.print(f"nothing to delete: all {len(records)} runs are among the {keep_best} best of their group, "
                  f"newer than {keep_recent_days:g} days, or running", highlight=False)
        return
    table = Table(title=("deleting" if yes else "would delete") + f" {len(chosen)} of {len(records)} runs")
    for title in ("id", "env", "variant", "seed", "best eval", "started", "run directory"):
        table.add_column(title, no_wrap=title in ("id", "env"))
    for record in chosen:
        table.add_row(str(record.id), escape(str(record.env_id)), escape(str(record.variant)), cell("seed", record.seed),
                      cell("best_eval_return", record.best_eval_return), cell("started_at", record.started_at),
                      escape(record.run_dir))
    console.print(table)
    if not yes:
        console.print("dry run: nothing deleted; pass --yes to delete these run directories", highlight=False)
        return

    deleted, problems, failures = remove_runs(chosen)
    for problem in problems:
        warn(problem)
    with _user_errors():
        registry.delete(deleted)
    console.print(f"deleted {len(deleted)} runs", highlight=False)
    if failures:
        fail(f"{failures} run directories could not be deleted", code=1)


# ---------------------------------------------------------------------- verify

SHOWN_COLUMNS = 3  # differing columns printed with their values; the rest are counted


@runs_app.command("verify")
def verify_run(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run directory, or @last: the most recently active run "
                                                           "under --runs-root.")],
    steps: Annotated[int | None, typer.Option("--steps", help="Verify the first N env steps (through the "
                                                 "iteration that reaches N); default: all the run recorded.")] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="Re-run with N torch threads instead of the "
                                                   "recorded count: do the numbers depend on it?")] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the re-run's directory for inspection.")] = False,
    runs_root: RunsRoot = Path("runs"),
) -> None:
    """Train a finished or stopped run again (its config, seed, threads, precision) and compare its metrics rows.

    Exit 0 when every non-timing column of every row repeats exactly, 1 at the first difference (named, with the
    provenance fields that differ: versions, commit, CPU, threads), 2 on bad input.
    """
    from rlfoundry.run.trainer import RunFailed
    from rlfoundry.studies.verify import verify

    try:
        result = verify(run, steps, threads, keep, runs_root, console=err())
    except ConfigError as exc:
        fail(str(exc))
    except RunFailed as exc:
        where = f"traceback in {exc.run_dir / 'run.log'}" if keep else "--keep keeps its run.log"
        fail(f"the re-run failed: {exc} ({where})", code=1)
    except KeyboardInterrupt:
        err().print("[yellow]stopped[/]: nothing verified")
        raise typer.Exit(130) from None
    console = out()
    span = f"steps {result.first_step:,}..{result.last_step:,}"
    divergence = result.divergence
    if divergence is None:
        console.print(f"reproduced: {result.rows} metrics rows ({span}), {len(result.columns)} columns compared, "
                      f"{len(result.ignored)} timing columns ignored", highlight=False)
    else:
        matched = f" after {result.rows - 1} matching rows" if result.rows > 1 else ", the first row"
        console.print(f"diverged at step {divergence.step:,}{matched} (verifying {span})", highlight=False)
        if divergence.missing is not None:
            console.print(f"  the {divergence.missing} has no metrics row there", highlight=False)
        for column, before, after in divergence.values[:SHOWN_COLUMNS]:
            console.print(f"  {escape(column)}: {escape(before or '(empty)')} (original) != "
                          f"{escape(after or '(empty)')} (re-run)", highlight=False)
        if len(divergence.values) > SHOWN_COLUMNS:
            others = ", ".join(column for column, _, _ in divergence.values[SHOWN_COLUMNS:])
            console.print(f"  and {len(divergence.values) - SHOWN_COLUMNS} more columns: {escape(others)}",
                          highlight=False)
    if result.provenance:
        changes = "; ".join(f"{name} {before} -> {after}" for name, before, after in result.provenance)
        console.print(f"provenance differs: {escape(changes)}", highlight=False)
    elif divergence is not None:
        console.print("provenance: no recorded field differs (versions, commit, CPU, threads, precision, compile)",
                      highlight=False)
    for note in result.notes:
        console.print(f"note: {escape(note)}", highlight=False)
    if result.rerun_dir is not None:
        console.print(f"re-run kept in {escape(str(result.rerun_dir))}", highlight=False)
    if divergence is not None:
        raise typer.Exit(1)
