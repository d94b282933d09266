"""`rlfoundry sweep`, embedded: an Optuna study in `OUT/study.journal`, each trial's seeds ordinary `rlfoundry train`
runs (`OUT/trials/<number>/s<seed>`) in worker processes (`studies.processes`). This command is the one coordinator:
it asks Optuna for trials and tells it their outcome (ask-and-tell); the runs know nothing of Optuna. `--backend
ray` is `studies.sweep_tune`, which shares this module's sampler, distributions and reading of a trial's runs.

Reports to the pruner are on the evaluation grid: a row at step s counts as `s // eval.every_steps *
eval.every_steps`, the final evaluation as `train.total_timesteps`. Why a journal file, pruning over the seeds and
continuing a sweep: docs/guide/experiments.md, "Hyperparameter sweeps".
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from pydantic import ValidationError

from rlfoundry.config.cores import concurrent_runs, usable_cores
from rlfoundry.config.errors import ConfigError
from rlfoundry.records.registry import Registry, RegistryError
from rlfoundry.records.report import read_metrics
from rlfoundry.records.rundir import run_lock, run_status, write_atomic, write_json
from rlfoundry.studies import processes
from rlfoundry.studies.sweep_file import (
    METRICS,
    OBJECTIVES,
    SweepFile,
    base_spec,
    check_space,
    grid_points,
    grid_size,
    read_sweep,
    replaced_schedules,
    run_args,
    run_dir,
    run_log,
    trial_value,
)

if TYPE_CHECKING:
    from rlfoundry.experiment.schema import ExperimentConfig

STUDY = "sweep"  # the study's name in the journal: fixed, so a renamed sweep directory still continues
JOURNAL = "study.journal"
MANIFEST = "sweep.yaml"  # the sweep file as run: a continuation must match it, apart from its budget
BASE = "base.yaml"  # a copy of the base experiment file, which every run loads
TUNE = "tune"  # Ray Tune's experiment directory (`--backend ray`, `experiments.sweep_tune`)
POLL_S = 0.5


@dataclass(frozen=True)
class Plan:
    """A checked sweep file: the sweep, its base as a SPEC, and the base config."""

    path: Path
    sweep: SweepFile
    spec: str
    cfg: ExperimentConfig
    notes: list[str] = field(default_factory=list)  # what the user should know before it starts (replaced schedules)

    @property
    def trial_limit(self) -> int | None:
        return self.sweep.budget.trials or (grid_size(self.sweep) if self.sweep.method == "grid" else None)


@dataclass
class Progress:
    """What the display shows."""

    complete: int = 0
    pruned: int = 0
    failed: int = 0
    running: int = 0
    limit: int | None = None  # the trials budget
    best: float | None = None
    best_trial: int | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None


@dataclass
class SeedRun:
    seed: int
    run_dir: Path
    state: str = "waiting"  # waiting, running, finished, failed
    process: processes.Handle | None = None
    evals: dict[int, float] = field(default_factory=dict)  # grid step -> evaluation return
    stamp: tuple[int, int] | None = None  # metrics.csv's (size, mtime) when last read

    @property
    def handle(self) -> processes.Handle:
        """The process of a run that has started (state running, finished or failed)."""
        assert self.process is not None, f"run {self.run_dir} has not started"
        return self.process


@dataclass
class Live:
    """A trial under way."""

    trial: optuna.Trial
    runs: list[SeedRun]
    reported: int = -1  # the last step reported to Optuna


# ---------------------------------------------------------------- checking and planning


def prepare(path: Path) -> Plan:
    """Read and check the sweep file against the config schema; ConfigError before anything is created."""
    try:
        sweep = read_sweep(path)
        spec = base_spec(sweep, path)
        cfg = check_space(sweep, spec)
    except ConfigError as exc:
        raise ConfigError(f"sweep file {path}: {exc}") from None
    if sweep.method == "cmaes" and importlib.util.find_spec("cmaes") is None:
        raise ConfigError(f"sweep file {path}: method cmaes needs the package cmaes (Optuna's CmaEsSampler runs on "
                          "it): pip install cmaes")
    return Plan(Path(path), sweep, spec, cfg, replaced_schedules(sweep, cfg))


def default_out(plan: Plan) -> Path:
    """runs/sweeps/<time>_<sweep file stem>, under the runs root of the base config."""
    return Path(plan.cfg.logging.runs_root) / "sweeps" / f"{datetime.now():%Y%m%d-%H%M%S}_{plan.path.stem}"


def _record(out: Path, plan: Plan, backend: str) -> str:
    """Write the sweep file (and a base experiment file) into `out`, or check that a continuation matches them and
    the backend that made it (Ray Tune's continuation keeps the budget too); returns the SPEC every run loads."""
    sweep = plan.sweep.model_dump(mode="json", by_alias=True)
    base = Path(plan.spec).read_text() if plan.spec.endswith((".yaml", ".yml")) else None
    manifest = out / MANIFEST
    if manifest.exists():
        try:
            known = SweepFile.model_validate(yaml.safe_load(manifest.read_text()))
        except (OSError, yaml.YAMLError, ValidationError) as exc:
            raise ConfigError(f"{manifest}: unreadable ({exc}); is {out} a sweep directory?") from None
        made_with = "ray" if (out / TUNE).exists() else "optuna"
        if made_with != backend:
            raise ConfigError(f"--out {out}: this sweep runs on --backend {made_with}; continue it there")
        known_dump = known.model_dump(mode="json", by_alias=True)
        fixed = [key for key in sweep if key != "budget" or backend == "ray"]
        changed = sorted(key for key in fixed if known_dump[key] != sweep[key])
        if base != ((out / BASE).read_text() if (out / BASE).exists() else None):
            changed.append(f"the base file {plan.spec}")
        if changed:
            may = "" if backend == "ray" else " (only its budget may change)"
            raise ConfigError(f"--out {out}: its study was made from another sweep (differs in {', '.join(changed)}); "
                              f"continue with the same sweep file{may} or choose another --out")
    elif base is not None:
        write_atomic(out / BASE, base)
    written = plan.sweep.model_dump(mode="json", by_alias=True, exclude_unset=True)  # as the user wrote it
    write_atomic(manifest, yaml.safe_dump(written, sort_keys=False))
    return str(out / BASE) if base is not None else plan.spec


# ---------------------------------------------------------------- the study


def _journal(out: Path) -> JournalStorage:
    """The journal storage in `out`. Holding the sweep's lock, nobody else writes it: a lock file left by a killed
    command is stale (Optuna would wait 30 s before breaking it), and an unfinished last line is cut off so the next
    append does not run into it."""
    path = out / JOURNAL
    Path(f"{path}.lock").unlink(missing_ok=True)
    if path.exists():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
    return JournalStorage(JournalFileBackend(str(path)))


def sampler(sweep: SweepFile, trials_so_far: int) -> optuna.samplers.BaseSampler:
    """The method's sampler, seeded. A continuation reseeds random, TPE and CMA-ES from (seed, trials so far), else
    their first proposals would repeat the first session's; the grid keeps its seed, which orders its points."""
    if sweep.method == "grid":
        space = {key: grid_points(parameter) for key, parameter in sweep.parameters.items()}
        return optuna.samplers.GridSampler(space, seed=sweep.seed)
    seed = sweep.seed
    if trials_so_far:
        seed = int(np.random.SeedSequence([sweep.seed, trials_so_far]).generate_state(1)[0])
    if sweep.method == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if sweep.method == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)  # choices: sampled at random


def _pruner(sweep: SweepFile, cfg: ExperimentConfig) -> optuna.pruners.BasePruner:
    """Optuna's pruner for the sweep's; rungs in env steps, the first at `min_steps` (default: the evaluation
    interval). Hyperband's largest rung is found from the first finished trial (Optuna's "auto")."""
    pruner = sweep.pruner
    first_rung = first_rung_steps(sweep, cfg)
    if pruner.kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=pruner.startup_trials, n_warmup_steps=pruner.warmup_steps)
    if pruner.kind == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=first_rung,
                                                      reduction_factor=pruner.reduction_factor or 4)
    if pruner.kind == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=first_rung, reduction_factor=pruner.reduction_factor or 3)
    return optuna.pruners.NopPruner()


def first_rung_steps(sweep: SweepFile, cfg: ExperimentConfig) -> int:
    """The env steps at which successive halving first compares trials (default: the evaluation interval)."""
    return sweep.pruner.min_steps or cfg.eval.every_steps


def distributions(sweep: SweepFile) -> dict[str, optuna.distributions.BaseDistribution]:
    found: dict[str, optuna.distributions.BaseDistribution] = {}
    for key, parameter in sweep.parameters.items():
        if parameter.float_ is not None:  # (its kind is "float")
            found[key] = FloatDistribution(*parameter.float_, log=parameter.log)
        elif parameter.int_ is not None:  # (its kind is "int")
            found[key] = IntDistribution(*parameter.int_, log=parameter.log, step=parameter.step or 1)
        else:
            found[key] = CategoricalDistribution(parameter.labels)
    return found


def open_study(storage: JournalStorage, plan: Plan) -> optuna.Study:
    """The sweep's study in `storage` (created on the first run), with its sampler and pruner."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress display reports trials
    known = next((s.n_trials for s in optuna.get_all_study_summaries(storage) if s.study_name == STUDY), 0)
    return optuna.create_study(storage=storage, study_name=STUDY, direction="maximize", load_if_exists=True,
                               sampler=sampler(plan.sweep, known), pruner=_pruner(plan.sweep, plan.cfg))


def _tell(study: optuna.Study, trial: optuna.Trial, **kwargs: Any) -> None:
    """study.tell. With ask-and-tell, GridSampler raises RuntimeError after the last grid point is told (it calls
    study.stop(), which only optimize() allows; documented in Optuna, optuna#5141): the trial is stored before that,
    and this driver ends a grid itself."""
    try:
        study.tell(trial, **kwargs)
    except RuntimeError:
        if not isinstance(study.sampler, optuna.samplers.GridSampler):
            raise


# ---------------------------------------------------------------- running


def run_sweep(plan: Plan, out: Path, workers: int | None = None, show: Callable[[Progress], None] | None = None,
              backend: str = "optuna", address: str | None = None) -> optuna.Study:
    """Run (or continue) the sweep in `out` with `workers` run processes at once (default: the usable cores; on Ray,
    the cluster's CPUs), embedded (`backend` "optuna") or through Ray Tune ("ray", on the cluster at `address` or a
    local instance), calling `show(progress)` as it goes; writes the report and returns the study. ConfigError for
    bad input, before anything is created."""
    from rlfoundry.studies.sweep_report import write_report

    processes.check_options("sweep", backend, ("optuna", "ray"), address, workers)
    if backend == "ray":
        from rlfoundry.studies.cluster import require_ray

        require_ray("ray.tune")
    processes.make_out(out)
    with processes.locked(out, "sweep"):
        spec = _record(out, plan, backend)
        if backend == "ray":
            from rlfoundry.studies.sweep_tune import run_sweep_ray

            study = run_sweep_ray(plan, spec, out, workers, address, show)
        else:
            storage = _journal(out)
            study = open_study(storage, plan)
            Driver(study, storage, plan, spec, out, workers or usable_cores(), show).run()
        write_report(out, study, plan.sweep, spec)
    return study


class Driver:
    """The loop: start runs as workers free up, read their evaluations, report, prune, tell."""

    def __init__(self, study: optuna.Study, storage: JournalStorage, plan: Plan, spec: str, out: Path, workers: int,
                 show: Callable[[Progress], None] | None) -> None:
        self.study, self.storage, self.plan, self.sweep = study, storage, plan, plan.sweep
        self.spec, self.out, self.workers, self.show = spec, out, workers, show
        # Runs at once, times whatever share of the machine this command itself was given (it may be one of several).
        limit = plan.trial_limit
        self.share = min(workers, limit * len(plan.sweep.seeds) if limit else workers) * concurrent_runs()
        self.started = time.monotonic()
        self.elapsed_before = float(study.user_attrs.get("elapsed_s", 0.0))
        self.counted_before = self._counts()[0]
        self.stopping: list[processes.Handle] = []  # runs of pruned and failed trials, still checkpointing
        self.pruning: list[SeedRun] = []  # runs of pruned trials, marked `pruned` once they have stopped

    def run(self) -> None:
        live = [item for item in map(self._adopt, self._stale()) if item is not None]
        try:
            while True:
                self.stopping = [process for process in self.stopping if process.poll() is None]
                self._mark_pruned()
                for item in list(live):
                    if self._advance(item):
                        live.remove(item)
                        self._save_elapsed()
                free = self._start_waiting(live)
                while free > 0 and not any(run.state == "waiting" for item in live for run in item.runs) \
                        and self._may_ask(len(live)):
                    live.append(self._ask())
                    free = self._start_waiting(live)
                if self.show is not None:
                    self.show(self.progress(len(live)))
                if not live and not self._may_ask(0):  # (it may wait for a pruned trial's runs to free a worker)
                    break
                processes.pause([run.handle for item in live for run in item.runs if run.state == "running"]
                                + self.stopping, POLL_S)
            for process in self.stopping:
                process.wait()
        finally:
            self._save_elapsed()
            processes.stop([*self.stopping, *(run.handle for item in live for run in item.runs
                                              if run.state == "running")])
            self._mark_pruned()

    # -------------------------------------------------------- trials in and out

    def _stale(self) -> list[optuna.trial.FrozenTrial]:
        """Trials left RUNNING by a command that died: this one holds the lock, so nobody else runs them."""
        return self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))

    def _adopt(self, frozen: optuna.trial.FrozenTrial) -> Live | None:
        """Take up an interrupted trial again under its own number, with its finished runs and its reports; one
        killed while its parameters were being chosen had no runs yet, and fails."""
        study_id = self.storage.get_study_id_from_name(STUDY)
        trial = optuna.trial.Trial(self.study, self.storage.get_trial_id_from_study_id_trial_number(study_id,
                                                                                                   frozen.number))
        trial.set_user_attr("interrupted", int(frozen.user_attrs.get("interrupted", 0)) + 1)
        if set(frozen.params) != set(self.sweep.parameters):
            trial.set_user_attr("error", "interrupted while its parameters were being chosen")
            _tell(self.study, trial, state=TrialState.FAIL)
            return None
        item = Live(trial, seed_runs(self.out, frozen.number, self.sweep))
        item.reported = max(frozen.intermediate_values, default=-1)
        return item

    def _ask(self) -> Live:
        trial = self.study.ask(distributions(self.sweep))
        return Live(trial, seed_runs(self.out, trial.number, self.sweep))

    def _may_ask(self, live: int) -> bool:
        counted, failed, total = self._counts()
        return may_start(self.plan, counted, failed, total, live, self._elapsed())

    def _counts(self) -> tuple[int, int, int]:
        """(completed + pruned, failed, all) trials."""
        states = [trial.state for trial in self.study.get_trials(deepcopy=False)]
        counted = sum(state in (TrialState.COMPLETE, TrialState.PRUNED) for state in states)
        return counted, states.count(TrialState.FAIL), len(states)

    # -------------------------------------------------------- runs

    def _start_waiting(self, live: list[Live]) -> int:
        """Start waiting runs, oldest trial first, while workers are free; returns the workers still free."""
        busy = len(self.stopping) + sum(run.state == "running" for item in live for run in item.runs)
        free = self.workers - busy
        for item in live:
            for run in item.runs:
                if free > 0 and run.state == "waiting":
                    self._start(item, run)
                    free -= 1
        return free

    def _start(self, item: Live, run: SeedRun) -> None:
        start_run(run, self.sweep, self.spec, item.trial.params, self.out, item.trial.number, self.share)

    def _advance(self, item: Live) -> bool:
        """Poll the trial's runs, report new evaluations, prune or finish it; True when it is over."""
        for run in item.runs:
            poll(run, self.sweep)
        failed = [run for run in item.runs if run.state == "failed"]
        if failed:
            log = run_log(self.out, item.trial.number, failed[0].seed)
            self._halt(item, f"seed {failed[0].seed}: {processes.error_line(log)} (output in {log})")
            return True
        if self._report(item):
            self._halt(item)
            self.pruning += [run for run in item.runs if run.state == "running"]
            _tell(self.study, item.trial, state=TrialState.PRUNED)
            return True
        if all(run.state == "finished" for run in item.runs):
            self._complete(item)
            return True
        return False

    def _mark_pruned(self) -> None:
        for run in [run for run in self.pruning if run.handle.poll() is not None]:
            mark_pruned(run.run_dir)
            self.pruning.remove(run)

    def _report(self, item: Live) -> bool:
        """Report the objective at each evaluation step all the trial's runs have reached; True to prune."""
        for step, value in new_reports(item.runs, self.sweep, item.reported):
            item.trial.report(value, step)
            item.reported = step
            if item.trial.should_prune():
                return True
        return False

    def _complete(self, item: Live) -> None:
        returns = final_returns(item.runs, self.sweep)
        if returns is None:
            self._halt(item, f"a run finished without {METRICS[self.sweep.metric][0]} in its summary.json")
            return
        item.trial.set_user_attr("returns", returns)
        _tell(self.study, item.trial, values=OBJECTIVES[self.sweep.objective](returns))

    def _halt(self, item: Live, error: str | None = None) -> None:
        """Stop the trial's runs (they checkpoint; they hold their workers until they exit); with `error`, fail it."""
        for run in item.runs:
            if run.state == "running":
                run.handle.terminate()
                self.stopping.append(run.handle)
        if error is not None:
            item.trial.set_user_attr("error", error)
            _tell(self.study, item.trial, state=TrialState.FAIL)

    # -------------------------------------------------------- time and progress

    def _elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def _save_elapsed(self) -> None:
        self.study.set_user_attr("elapsed_s", round(self._elapsed(), 1))

    def progress(self, running: int) -> Progress:
        trials = self.study.get_trials(deepcopy=False)
        complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
        best = max(complete, key=trial_value, default=None)
        progress = Progress(complete=len(complete), running=running, limit=self.plan.trial_limit,
                            pruned=sum(trial.state == TrialState.PRUNED for trial in trials),
                            failed=sum(trial.state == TrialState.FAIL for trial in trials),
                            best=best.value if best else None, best_trial=best.number if best else None,
                            elapsed_s=self._elapsed())
        progress.eta_s = self._eta(progress)
        return progress

    def _eta(self, progress: Progress) -> float | None:
        """The sooner of: the trials left at this session's pace, the minutes left."""
        etas = []
        done = progress.complete + progress.pruned - self.counted_before
        if progress.limit is not None and done > 0:
            left = max(0, progress.limit - progress.complete - progress.pruned)
            etas.append(left * (time.monotonic() - self.started) / done)
        if self.sweep.budget.minutes is not None:
            etas.append(max(0.0, self.sweep.budget.minutes * 60 - progress.elapsed_s))
        return min(etas, default=None)


# ---------------------------------------------------------------- a trial's runs, read from their directories
# (shared with the Ray Tune backend, `experiments.sweep_tune`)


def may_start(plan: Plan, counted: int, failed: int, total: int, live: int, elapsed_s: float) -> bool:
    """Whether the budget allows another trial, given the trials `counted` (completed and pruned), `failed`, `total`
    (all, those under way included) and `live` (under way, counted as if they will count), and the sweep's time so
    far: the trials budget (a grid: its size), a grid's points once each, `budget.failures` failed trials (default:
    the trials budget), `budget.minutes`."""
    budget, limit = plan.sweep.budget, plan.trial_limit
    if limit is not None and counted + live >= limit:
        return False
    if plan.sweep.method == "grid" and total >= grid_size(plan.sweep):
        return False
    failures = budget.failures or budget.trials
    if failures is not None and failed >= failures:
        return False
    return budget.minutes is None or elapsed_s < budget.minutes * 60


def seed_runs(out: Path, trial: int | str, sweep: SweepFile) -> list[SeedRun]:
    """A trial's runs, one per seed, those finished already marked so."""
    runs = [SeedRun(seed, run_dir(out, trial, seed)) for seed in sweep.seeds]
    for run in runs:
        if run_status(run.run_dir) == "finished":
            run.state = "finished"
    return runs


def start_run(run: SeedRun, sweep: SweepFile, spec: str, labels: dict[str, Any], out: Path, trial: int | str,
              share: int, **options: Any) -> None:
    """Start (or resume) one of a trial's runs with the trial's parameters; `options` go to `processes.start`."""
    args = run_args(sweep, spec, labels, run.seed, out.name)
    run.process = processes.start(processes.train_command(run.run_dir, args), run_log(out, trial, run.seed), share,
                                  **options)
    run.state = "running"


def mark_pruned(run_dir: Path) -> None:
    """A run of a pruned trial, stopped by the sweep and ended: its summary.json and registry row say `pruned`
    rather than `stopped`, so that `runs list` tells the sweep's choice from a user's stop. It has its checkpoint:
    `train --resume` continues it as any stopped run. A run that finished or failed meanwhile keeps its status."""
    if run_status(run_dir) != "stopped":
        return
    try:
        with run_lock(run_dir):  # nobody is training in it again
            summary = json.loads((run_dir / "summary.json").read_text())
            write_json(run_dir / "summary.json", {**summary, "status": "pruned"})
            runs_root = yaml.safe_load((run_dir / "config.yaml").read_text())["logging"]["runs_root"]
            Registry(runs_root).record_run(run_dir)
    except (ConfigError, RegistryError, OSError, ValueError, KeyError, TypeError):
        return  # a run taken up again, or records it cannot read: it stays `stopped`, which is also true


def poll(run: SeedRun, sweep: SweepFile) -> None:
    """Update a run's state from its process and re-read its evaluations."""
    if run.state == "running":
        code = run.handle.poll()
        if code is not None:
            run.state = "finished" if code == 0 and run_status(run.run_dir) == "finished" else "failed"
    _read_evals(run, METRICS[sweep.metric][1])


def new_reports(runs: list[SeedRun], sweep: SweepFile, reported: int) -> list[tuple[int, float]]:
    """(step, objective over the runs) at each evaluation step after `reported` that every run has reached."""
    common = set.intersection(*(set(run.evals) for run in runs))
    return [(step, OBJECTIVES[sweep.objective]([run.evals[step] for run in runs]))
            for step in sorted(step for step in common if step > reported)]


def final_returns(runs: list[SeedRun], sweep: SweepFile) -> list[float] | None:
    """Each finished run's final metric from its summary.json; None when one lacks it."""
    returns = [_summary_value(run.run_dir, METRICS[sweep.metric][0]) for run in runs]
    found = [value for value in returns if value is not None]
    return found if len(found) == len(returns) else None


def _read_evals(run: SeedRun, column: str) -> None:
    """The run's evaluations on the evaluation grid, re-read when metrics.csv changed."""
    path = run.run_dir / "metrics.csv"
    try:
        stat = path.stat()
    except OSError:
        return
    if (stat.st_size, stat.st_mtime_ns) == run.stamp:
        return
    run.stamp = (stat.st_size, stat.st_mtime_ns)
    every, total = run_schedule(run.run_dir)
    columns = read_metrics(path)
    steps, values = columns.get("global_step", np.zeros(0)), columns.get(column, np.zeros(0))
    run.evals = {_grid_step(int(step), every, total): float(value)
                 for step, value in zip(steps, values) if np.isfinite(value)}


def run_schedule(run_dir: Path) -> tuple[int, int]:
    """(eval.every_steps, train.total_timesteps) of a run, from its config.yaml (parameters may change them)."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        return int(config["eval"]["every_steps"]), int(config["train"]["total_timesteps"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return 0, 0


def _grid_step(step: int, every: int, total: int) -> int:
    """An evaluation row's step on the evaluation grid (see the module docstring)."""
    if step >= total or every <= 0:
        return total or step
    return step // every * every


def _summary_value(run_dir: Path, key: str) -> float | None:
    try:
        value = json.loads((run_dir / "summary.json").read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None
