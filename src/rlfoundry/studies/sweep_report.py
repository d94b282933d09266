"""What a sweep leaves in its directory, read from the study and the run directories alone:

    sweep.md       the best trial (parameters, objective, runs), parameter importances, a table of every trial
    history.png    Optuna's optimisation history; parallel.png, its parallel coordinates (matplotlib, Agg)
    best.yaml      an experiment file with which `rlfoundry train best.yaml` repeats the best trial's best run

Every file is written atomically, so a report being rewritten is never seen half done.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml
from optuna.exceptions import ExperimentalWarning
from optuna.trial import FrozenTrial, TrialState

from rlfoundry.experiment.load import apply_overrides
from rlfoundry.records.rundir import write_atomic
from rlfoundry.studies.sweep_file import METRICS, SweepFile, experiment, override_text, run_dir, trial_value

MIN_IMPORTANCE_TRIALS = 10  # fewer completed trials give PED-ANOVA too few in its top quantile to compare
PLOTS = {"history": "optimisation history", "parallel": "parallel coordinates"}


def write_report(out: Path, study: optuna.Study, sweep: SweepFile, spec: str) -> None:
    """sweep.md, the plots and (once a trial completed) best.yaml in `out`."""
    trials = study.get_trials(deepcopy=False)
    complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    best = max(complete, key=trial_value, default=None)
    images = _plots(out, study, len(complete))
    lines = [f"# sweep {out.name}", "", *_setting(sweep, study), ""]
    if best is not None:
        seed = best_seed(sweep, best)
        write_atomic(out / "best.yaml", _best_yaml(out, sweep, spec, best, seed))
        lines += _best(out, sweep, best, seed)
    else:
        lines += ["No trial has completed yet.", ""]
    lines += _importances(study, sweep, len(complete))
    lines += _table(out, sweep, trials)
    lines += [f"![{PLOTS[name]}]({name}.png)" for name in images]
    write_atomic(out / "sweep.md", "\n".join(lines) + "\n")


def folder(trial: FrozenTrial) -> str:
    """The trial's directory under trials/: its number, or Ray Tune's trial id (`--backend ray`)."""
    return str(trial.user_attrs.get("folder", trial.number))


def best_seed(sweep: SweepFile, trial: FrozenTrial) -> int:
    """The seed of the trial's best run (its highest final return)."""
    returns = trial.user_attrs.get("returns") or []
    return sweep.seeds[int(np.argmax(returns))] if returns else sweep.seeds[0]


# ---------------------------------------------------------------- best.yaml


def _best_yaml(out: Path, sweep: SweepFile, spec: str, trial: FrozenTrial, seed: int) -> str:
    """The base (preset or file), the overrides, the parameters and the seed as one experiment file. A run whose
    `auto` threads resolved to its share of the machine gets that count pinned: results repeat only at the same
    count (docs/guide/runs.md, "Reproducibility")."""
    data = experiment(sweep, spec, trial.params, seed)
    threads = _resolved_threads(run_dir(out, folder(trial), seed))
    if threads is not None:
        data = apply_overrides(data, [f"train.torch_threads={threads}"])
    head = (f"# sweep {out.name}: trial {trial.number}, objective {trial.value:.6g} ({sweep.objective} of "
            f"{sweep.metric} over {_seeds(sweep)}), its best run: seed {seed}, trials/{folder(trial)}/s{seed}.\n"
            f"# rlfoundry train best.yaml repeats that run.\n")
    return head + yaml.safe_dump(data, sort_keys=False)


def _resolved_threads(path: Path) -> int | None:
    """The thread count a run resolved from `train.torch_threads: auto`, None when it was set or is unknown."""
    try:
        config = yaml.safe_load((path / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    if (config.get("train") or {}).get("torch_threads") != "auto":
        return None
    return (config.get("provenance") or {}).get("torch_threads")


# ---------------------------------------------------------------- sweep.md


def _seeds(sweep: SweepFile) -> str:
    return "seed 1" if sweep.seeds_per_trial == 1 else f"seeds 1..{sweep.seeds_per_trial}"


def _setting(sweep: SweepFile, study: optuna.Study) -> list[str]:
    budget = [f"{sweep.budget.trials} trials" if sweep.budget.trials else "",
              f"{sweep.budget.minutes:g} minutes" if sweep.budget.minutes else ""]
    elapsed = float(study.user_attrs.get("elapsed_s", 0.0))
    return [
        f"Base `{sweep.base}`" + (f" with `{' '.join(sweep.overrides)}`" if sweep.overrides else "") + ".",
        f"Method {sweep.method} (seed {sweep.seed}), pruner {sweep.pruner.kind}, budget "
        f"{' and '.join(part for part in budget if part) or 'the whole grid'}; "
        f"{elapsed / 60:.1f} minutes so far.",
        f"Objective (maximised): the {sweep.objective} over {_seeds(sweep)} of each run's final "
        f"`{METRICS[sweep.metric][0]}`.",
    ]


def _best(out: Path, sweep: SweepFile, trial: FrozenTrial, seed: int) -> list[str]:
    returns = trial.user_attrs.get("returns") or []
    runs = ", ".join(f"`trials/{folder(trial)}/s{s}` ({_number(value)})" for s, value in zip(sweep.seeds, returns))
    lines = [f"## Best: trial {trial.number}, objective {_number(trial.value)}", "", "| parameter | value |",
             "| --- | --- |"]
    lines += [f"| `{key}` | {_value(sweep, key, trial.params[key])} |" for key in sweep.parameters]
    lines += ["", f"Runs: {runs}.", "",
              f"`rlfoundry train {out / 'best.yaml'}` repeats its best run (seed {seed}).", ""]
    return lines


def _importances(study: optuna.Study, sweep: SweepFile, complete: int) -> list[str]:
    if len(sweep.parameters) < 2 or complete < MIN_IMPORTANCE_TRIALS:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PED-ANOVA warns about sparse regions; the table says how many trials
        importances = optuna.importance.get_param_importances(study)
    lines = ["## Parameter importances", "",
             f"PED-ANOVA (optuna.importance, Watanabe et al. 2023) over {complete} completed trials: how much each "
             "parameter's distribution differs between the best 10% and all trials.", "",
             "| parameter | importance |", "| --- | --- |"]
    return lines + [f"| `{key}` | {value:.3f} |" for key, value in importances.items()] + [""]


def _table(out: Path, sweep: SweepFile, trials: list[FrozenTrial]) -> list[str]:
    keys = list(sweep.parameters)
    lines = ["## Trials", "", "| trial | state | objective | " + " | ".join(f"`{key}`" for key in keys)
             + " | runs | note |", "|" + " --- |" * (len(keys) + 5)]
    for trial in trials:
        values = [_value(sweep, key, trial.params[key]) if key in trial.params else "" for key in keys]
        runs = " ".join(f"`trials/{folder(trial)}/s{seed}`" for seed in sweep.seeds
                        if run_dir(out, folder(trial), seed).exists())
        lines.append(f"| {trial.number} | {_state(trial)} | {_number(trial.value)} | " + " | ".join(values)
                     + f" | {runs} | {_note(trial)} |")
    return lines + [""]


def _state(trial: FrozenTrial) -> str:
    state = trial.state.name.lower()
    interrupted = trial.user_attrs.get("interrupted")
    return f"{state} (interrupted {interrupted}x, continued)" if interrupted else state


def _note(trial: FrozenTrial) -> str:
    if trial.state.name == "PRUNED" and trial.intermediate_values:
        return f"pruned at step {max(trial.intermediate_values):,}"
    returns = trial.user_attrs.get("returns")
    if returns:
        return "returns " + ", ".join(_number(value) for value in returns)
    return str(trial.user_attrs.get("error", "")).replace("|", "\\|")


def _value(sweep: SweepFile, key: str, label: Any) -> str:
    value = sweep.parameters[key].value_of(label)
    if isinstance(value, float):
        return _number(value)
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else f"`{override_text(value)}`"


def _number(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.4g}"


# ---------------------------------------------------------------- plots


def with_pruned(study: optuna.Study) -> optuna.Study:
    """The completed trials and the pruned ones at their last reported value, as one study in memory: Optuna's
    parallel-coordinates plot draws completed trials only, and the parameters a pruner cut short belong there too."""
    shown = optuna.create_study(directions=study.directions)
    for trial in study.get_trials(deepcopy=False):
        if trial.state == TrialState.COMPLETE:
            shown.add_trial(trial)
        elif trial.state == TrialState.PRUNED and trial.intermediate_values:
            last = trial.intermediate_values[max(trial.intermediate_values)]
            shown.add_trial(optuna.trial.create_trial(params=trial.params, distributions=trial.distributions,
                                                      value=last))
    return shown


def _plots(out: Path, study: optuna.Study, complete: int) -> list[str]:
    """Optuna's matplotlib plots as PNGs (the Agg backend: a sweep runs without a display); returns the names."""
    if complete == 0:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as plots

    makers: dict[str, Callable[[optuna.Study], Any]] = {
        "history": plots.plot_optimization_history,
        "parallel": lambda study: plots.plot_parallel_coordinate(with_pruned(study)),
    }
    written = []
    for name, make in makers.items():
        if name == "parallel" and len(with_pruned(study).trials) < 2:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            axes = make(study)
        figure = axes.figure if hasattr(axes, "figure") else np.ravel(axes)[0].figure
        figure.set_size_inches(9, 5)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        plt.close(figure)
        write_atomic(out / f"{name}.png", buffer.getvalue())
        written.append(name)
    return written

