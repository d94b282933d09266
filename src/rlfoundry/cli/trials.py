"""`rlfoundry trials SPEC [SPEC ...] --seeds N [overrides]`: many seeds of one or more specs, with their statistics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from rlfoundry.cli.common import Address, err, fail, out, running_many
from rlfoundry.config.errors import ConfigError


def trials(
    items: Annotated[list[str], typer.Argument(help="SPECs (ENV_ID:VARIANT or experiment YAMLs), then dotted overrides for all of them (key=value).", metavar="SPEC... [KEY=VALUE...]")],
    seeds: Annotated[str, typer.Option(help="How many seeds (5: seeds 1..5) or which (1,2,3).")] = "3",
    workers: Annotated[int | None, typer.Option(help="Runs at once (default: the cores this process may use); each gets its share of the cores.")] = None,
    out_dir: Annotated[str | None, typer.Option("--out", help="The set's directory (default runs/trials/<time>_<spec>); the same --out again continues the set.")] = None,
    total_timesteps: Annotated[int | None, typer.Option(help="Shortcut for train.total_timesteps=N.")] = None,
    backend: Annotated[str, typer.Option(help="local: worker processes here; ray: tasks on a Ray cluster.")] = "local",
    address: Address = None,
    formats: Annotated[list[str] | None, typer.Option("--format", help="Also write tables for papers, in csv, markdown and/or latex (booktabs), comma-separated or repeated: aggregate.* (per spec: runs counted/total; IQM, mean, median of the final evaluation return with 95% CIs; optimality gap) and improvement.* (P(X > Y) per pair of specs). Default: none.")] = None,
    plots: Annotated[str, typer.Option("--plots", help="The plots' file formats, comma-separated: png, pdf, svg.")] = "png",
) -> None:
    """Train every SPEC with every seed, several runs at once, then write trials.md, trials.csv and plots (IQM and
    bootstrap confidence intervals), and with --format the tables for papers. Run it again with the same --out to
    continue after a stop or a crash, or to write the report again (other --format or --plots) once it finished."""
    from rlfoundry.records.tables import FORMATS
    from rlfoundry.studies.plots import FORMATS as PLOT_FORMATS
    from rlfoundry.studies.trials import parse_seeds

    specs = [item for item in items if "=" not in item]
    overrides = [item for item in items if "=" in item]
    if total_timesteps is not None:
        overrides.append(f"train.total_timesteps={total_timesteps}")
    try:
        seed_list = parse_seeds(seeds)
    except ConfigError as exc:
        fail(str(exc))
    tables = choices("--format", formats or [], FORMATS, required=formats is not None)
    figures = choices("--plots", [plots], PLOT_FORMATS, required=True)
    run_set(specs, seed_list, overrides, out_dir, workers, backend, address, tables=tables, figures=figures)


def choices(option: str, values: list[str], allowed: tuple[str, ...], required: bool) -> tuple[str, ...]:
    """An option's values, each comma-separated list split, repeats dropped; an unknown one, or none where some
    were `required`, ends the command with exit 2."""
    chosen = [part.strip().lower() for value in values for part in value.split(",") if part.strip()]
    unknown = [value for value in chosen if value not in allowed]
    if unknown:
        fail(f"{option} {unknown[0]}: unknown format; available: {', '.join(allowed)}")
    if required and not chosen:
        fail(f"{option}: give at least one of {', '.join(allowed)}")
    return tuple(dict.fromkeys(chosen))


def run_set(specs: list[str], seeds: list[int], overrides: list[str], out_dir: str | None,
            workers: int | None, backend: str = "local", address: str | None = None,
            again: str = "the same --out again continues them", tables: tuple[str, ...] = (),
            figures: tuple[str, ...] = ("png",)) -> None:
    """Run the set with one progress display, then print where its report is; `train --seed 1,2,3` comes here too
    (`again`: how to continue the set, `{path}` its directory; `tables` and `figures`: the formats of the tables
    for papers and of the plots)."""
    from rlfoundry.studies.trials import default_out, run_trials

    try:
        path = Path(out_dir) if out_dir else default_out(specs, overrides)
    except ConfigError as exc:
        fail(str(exc))
    console = err()
    console.print(f"trials in {path}  ({again.replace('{path}', str(path))})", highlight=False)
    bar = Progress(TextColumn("trials"), BarColumn(), TextColumn("{task.fields[state]}"), console=console,
                   transient=False)
    started = time.monotonic()
    first: list[int] = []

    def show(progress) -> None:
        if not first:
            first.append(progress.steps)
            bar.start()
            bar.add_task("trials", total=progress.total, state="")
        elapsed = time.monotonic() - started
        rate = (progress.steps - first[0]) / elapsed if elapsed > 0 else 0.0
        remaining = max(0, progress.total - progress.steps)
        eta = time.strftime("%H:%M:%S", time.gmtime(remaining / rate)) if rate > 0 else "-:--:--"
        state = (f"{progress.done} done, {progress.running} running, {progress.failed} failed  "
                 f"{rate:,.0f} steps/s  ETA {eta}")
        bar.update(TaskID(0), total=progress.total, completed=progress.steps, state=state)

    with running_many(bar, path):
        results = run_trials(specs, seeds, overrides, path, workers, show, backend, address, tables, figures)
    failed = [r for r in results if r.status != "finished"]
    for result in failed:
        console.print(f"[red]{result.status}[/] {result.spec} seed {result.seed}: {result.error or '-'}",
                      highlight=False)
    out().print(f"report: {path / 'trials.md'}", highlight=False)
    refused = [r for r in failed if r.status == "refused"]
    if refused:  # the same command would refuse them again
        named = ", ".join(dict.fromkeys(r.spec for r in refused))
        fail(f"{len(refused)} of {len(results)} runs refused their config as bad input ({named}): fix the spec or "
             "the overrides (the errors are above)", code=1)
    if failed:
        fail(f"{len(failed)} of {len(results)} runs did not finish; run the same command with --out {path} to "
             "continue them", code=1)
