"""`rlfoundry sweep SWEEP.yaml [--workers P] [--out DIR]`: a hyperparameter search, each trial's seeds ordinary runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from rlfoundry.cli.common import Address, err, fail, out, running_many, warn
from rlfoundry.config.errors import ConfigError


def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="The sweep file: base, overrides, method, objective, budget, "
                                                    "pruner, parameters (docs/guide/experiments.md, \"Hyperparameter sweeps\").",
                                               metavar="SWEEP.yaml")],
    workers: Annotated[int | None, typer.Option(help="Runs at once (default: the cores this process may use); "
                                                        "each gets its share of the cores.")] = None,
    out_dir: Annotated[str | None, typer.Option("--out", help="The sweep's directory (default "
                                                                 "runs/sweeps/<time>_<file stem>); the same --out "
                                                                 "again continues the sweep.")] = None,
    backend: Annotated[str, typer.Option(help="optuna: an embedded Optuna study, runs here; ray: Ray Tune with "
                                              "Optuna's sampler and Tune's schedulers.")] = "optuna",
    address: Address = None,
) -> None:
    """Search hyperparameters with Optuna (grid, random, TPE, CMA-ES), pruning bad trials from their evaluations;
    writes sweep.md, plots and best.yaml. Run it again with the same --out to continue after a stop or a crash."""
    try:
        from rlfoundry.studies.sweep import default_out, prepare, run_sweep
    except ModuleNotFoundError as exc:
        if exc.name != "optuna":
            raise
        fail("rlfoundry sweep needs optuna: pip install 'rlfoundry[experiments]'")
    try:
        plan = prepare(sweep_file)
        path = Path(out_dir) if out_dir else default_out(plan)
    except ConfigError as exc:
        fail(str(exc))
    console = err()
    for note in plan.notes:
        warn(note)
    bar = Progress(TextColumn("sweep"), BarColumn(), TextColumn("{task.fields[state]}"), console=console)
    task: list[TaskID] = []

    def show(progress) -> None:
        if not task:  # the first call: the input was good and the study is open
            console.print(f"sweep in {path}  (the same --out again continues it)", highlight=False)
            bar.start()
            task.append(bar.add_task("sweep", total=progress.limit, state=""))
        eta = time.strftime("%H:%M:%S", time.gmtime(progress.eta_s)) if progress.eta_s is not None else "-:--:--"
        best = f"best {progress.best:.4g} (trial {progress.best_trial})" if progress.best is not None else "best -"
        state = (f"{progress.complete} done, {progress.pruned} pruned, {progress.failed} failed, "
                 f"{progress.running} running  {best}  ETA {eta}")
        bar.update(task[0], completed=progress.complete + progress.pruned, state=state)

    with running_many(bar, path):
        study = run_sweep(plan, path, workers, show, backend, address)
    _summarise(study, path)


def _summarise(study, path: Path) -> None:
    """The counts and the best trial; exit 1 when no trial completed."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    counts = {name: sum(trial.state == state for trial in trials)
              for name, state in (("completed", TrialState.COMPLETE), ("pruned", TrialState.PRUNED),
                                  ("failed", TrialState.FAIL))}
    console = out()
    console.print(", ".join(f"{count} {name}" for name, count in counts.items()), highlight=False)
    for trial in trials:
        if trial.state == TrialState.FAIL:
            err().print(f"[red]failed[/] trial {trial.number}: {trial.user_attrs.get('error', '-')}",
                        highlight=False)
    console.print(f"report: {path / 'sweep.md'}", highlight=False)
    if not counts["completed"]:
        fail(f"no trial completed; run the same command with --out {path} to continue", code=1)
    best = study.best_trial
    console.print(f"best: trial {best.number}, objective {best.value:.4g}; repeat its best run with "
                  f"rlfoundry train {path / 'best.yaml'}", highlight=False)
