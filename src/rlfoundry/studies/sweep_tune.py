"""`rlfoundry sweep --backend ray`: the same sweep file through Ray Tune, on a Ray cluster or a local instance.

Tune's `OptunaSearch`, with the embedded backend's sampler and distributions, proposes the trials; Tune's schedulers
take the pruner's place. A trial (`SweepTrial`) is a trainable holding `seeds_per_trial` CPUs that starts its seeds'
ordinary `rlfoundry train` runs in `OUT/trials/<Tune trial id>/s<seed>`, on a file system every node sees
(`studies.cluster`). At the end the results are written as an Optuna study into `OUT/study.journal`, and the report
is the embedded backend's. Schedulers, continuing, budget: docs/guide/experiments.md, "Ray clusters".
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from ray import tune
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from rlfoundry.config.cores import usable_cores
from rlfoundry.studies import cluster, processes
from rlfoundry.studies.sweep import (
    JOURNAL,
    POLL_S,
    STUDY,
    TUNE,
    Plan,
    Progress,
    distributions,
    final_returns,
    first_rung_steps,
    mark_pruned,
    may_start,
    new_reports,
    poll,
    run_schedule,
    sampler,
    seed_runs,
    start_run,
)
from rlfoundry.studies.sweep_file import METRICS, OBJECTIVES, SweepFile, run_log


class Search(OptunaSearch):
    """OptunaSearch that proposes trials while the sweep's budget allows, counted as the embedded sweep counts it
    (`sweep.may_start`: completed and pruned trials against the trials budget, failed ones against
    `budget.failures`, a grid's points once each, the minutes over every session); once it is spent, those under
    way finish. Its counts and the time spent so far are part of the state Tune saves and restores."""

    def __init__(self, plan: Plan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._plan, self._spent, self._since = plan, 0.0, time.monotonic()
        self._counted = self._failed = 0
        self._live: set[str] = set()

    def elapsed(self) -> float:
        return self._spent + time.monotonic() - self._since

    # Ray documents Searcher.FINISHED (a str) as a return that ends the search, but annotates Optional[Dict]
    def suggest(self, trial_id: str) -> dict | str | None:  # type: ignore[override]
        live = len(self._live)
        if not may_start(self._plan, self._counted, self._failed, self._counted + self._failed + live, live,
                         self.elapsed()):
            # (one under way may still fail and, not counting, leave room for another)
            return None if self._live else Searcher.FINISHED
        config = super().suggest(trial_id)
        if isinstance(config, dict):
            self._live.add(trial_id)
        return config

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        super().on_trial_complete(trial_id, result, error)
        if trial_id in self._live:
            self._live.discard(trial_id)
            self._failed += error
            self._counted += not error

    def save(self, checkpoint_path: str) -> None:
        now = time.monotonic()
        self._spent, self._since = self._spent + now - self._since, now
        super().save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        self._since = time.monotonic()  # (the saved one is another process's clock)


class SweepTrial(tune.Trainable):
    """One trial: its seeds' runs, one Tune result per evaluation step they have all reached, the last one when all
    finished (`finished: True`, with each seed's return)."""

    # tune.with_parameters passes these as keywords; Trainable.setup declares only `config`
    def setup(  # type: ignore[override]
        self, config: dict, sweep: SweepFile, spec: str, out: str, share: int, cwd: str, rung: int,
    ) -> None:
        self.sweep, self.out, self.reported, self.total, self.rung = sweep, Path(out), -1, 0, rung
        self.runs = seed_runs(self.out, self.trial_id, sweep)
        labels = {key: config[key] for key in sweep.parameters}
        for run in self.runs:
            if run.state == "waiting":
                start_run(run, sweep, spec, labels, self.out, self.trial_id, share, cwd=cwd, own_session=True)

    def step(self) -> dict:
        while True:
            for run in self.runs:
                poll(run, self.sweep)
            failed = next((run for run in self.runs if run.state == "failed"), None)
            if failed is not None:
                log = run_log(self.out, self.trial_id, failed.seed)
                raise RuntimeError(f"seed {failed.seed}: {processes.error_line(log)} (output in {log})")
            finished = all(run.state == "finished" for run in self.runs)
            # The final evaluation comes with the final result: a scheduler stops a trial whose step reaches the
            # budget, and it should be stopped finished.
            reports = [(step, value) for step, value in new_reports(self.runs, self.sweep, self.reported)
                       if step < self._total()]
            if reports:
                self.reported, value = reports[0]
                return {"objective": value, "step": self.reported, "rungs": self.reported / self.rung,
                        "finished": False}
            if finished:
                returns = final_returns(self.runs, self.sweep)
                if returns is None:
                    raise RuntimeError(f"a run finished without {METRICS[self.sweep.metric][0]} in its summary.json")
                return {"objective": OBJECTIVES[self.sweep.objective](returns), "step": self._total(),
                        "rungs": self._total() / self.rung, "finished": True, "returns": returns, "done": True}
            processes.pause([run.handle for run in self.runs if run.state == "running"], POLL_S)

    def _total(self) -> float:
        """The runs' train.total_timesteps (a parameter may set it), from the first run's config.yaml."""
        if not self.total:
            self.total = run_schedule(self.runs[0].run_dir)[1]
        return self.total or math.inf

    def cleanup(self) -> None:
        """Stopped (pruned, paused, or the sweep ends): the runs checkpoint and stop."""
        processes.stop([run.handle for run in self.runs if run.state == "running"])

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        return {"reported": self.reported}  # the runs keep their own checkpoints in their run directories

    def load_checkpoint(self, checkpoint: dict | None) -> None:
        assert checkpoint is not None, "Tune hands back what save_checkpoint returned, a dict"
        self.reported = checkpoint["reported"]


_show: list[Callable[[Progress], None]] = []  # the display of this command (a callback Tune pickles holds none)


class Display(tune.Callback):
    """Hands the progress display the counts and the best objective after every step of Tune's loop."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if not _show:
            return
        states = [trial.status for trial in trials]
        complete = [trial for trial in trials if (trial.last_result or {}).get("finished")]
        best = max(complete, key=lambda trial: trial.last_result["objective"], default=None)
        _show[0](Progress(complete=len(complete), limit=self.limit, running=states.count("RUNNING"),
                          pruned=sum(state == "TERMINATED" for state in states) - len(complete),
                          failed=states.count("ERROR"),
                          best=best.last_result["objective"] if best else None,
                          best_trial=trials.index(best) if best else None))


def _dirname(trial) -> str:
    return trial.trial_id


def _scheduler(plan: Plan):
    """Tune's scheduler for the sweep's pruner, in env steps on the evaluation grid. HyperBand counts in rungs
    (`first_rung_steps` each), since Tune's HyperBand has no minimum resource: its brackets come from `max_t` alone,
    and in env steps they would start below a single evaluation."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, HyperBandScheduler, MedianStoppingRule

    pruner, total = plan.sweep.pruner, plan.cfg.train.total_timesteps
    first_rung = first_rung_steps(plan.sweep, plan.cfg)
    if pruner.kind == "asha":
        return ASHAScheduler(time_attr="step", max_t=total, grace_period=first_rung,
                             reduction_factor=pruner.reduction_factor or 4)
    if pruner.kind == "hyperband":
        # (Ray annotates max_t an int; it computes with any positive number, here rungs of the first rung's steps)
        return HyperBandScheduler(time_attr="rungs", max_t=total / first_rung,  # type: ignore[arg-type]
                                  reduction_factor=pruner.reduction_factor or 3)
    if pruner.kind == "median":
        return MedianStoppingRule(time_attr="step", grace_period=pruner.warmup_steps,
                                  min_samples_required=max(1, pruner.startup_trials))
    return FIFOScheduler()


def run_sweep_ray(plan: Plan, spec: str, out: Path, workers: int | None, address: str | None,
                  show: Callable[[Progress], None] | None) -> optuna.Study:
    """Run (or continue) the sweep on Ray; returns the study the report is written from."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's console output: the display below shows progress
    # Tune saves its experiment state (trials, searcher) at most this often; a second's worth is cheap, and a
    # `kill -9` then loses at most the trials proposed in the last two seconds (their runs start again).
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")
    if plan.sweep.pruner.kind == "hyperband":
        # Tune proposes one trial at a time with a searcher (its "auto" pending limit); HyperBand's brackets need
        # theirs all proposed at once to fill (`_concurrent`), up to the trials budget.
        os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(plan.trial_limit or 64))
    # (OptunaSearch logs GridSampler's "Study.stop is supposed to be invoked inside an objective" after the last point)
    logging.getLogger("ray.tune.search.optuna.optuna_search").setLevel(logging.ERROR)
    # A failed trial is reported once, in a line naming the file with its traceback (`rlfoundry sweep` prints it);
    # Tune's own report of it is a page of Ray's traceback.
    controller = logging.getLogger("ray.tune.execution.tune_controller")
    if _trial_failures not in controller.filters:
        controller.addFilter(_trial_failures)
    with cluster.connected(address, workers, out) as cpus:
        per_trial = min(len(plan.sweep.seeds), cpus)
        # Each run's `auto` threads: its trial's CPUs shared among its seeds, out of the node's cores.
        share = math.ceil(usable_cores() * len(plan.sweep.seeds) / per_trial)
        trainable = tune.with_resources(
            tune.with_parameters(SweepTrial, sweep=plan.sweep, spec=spec, out=str(out.resolve()), share=share,
                                 cwd=os.getcwd(), rung=first_rung_steps(plan.sweep, plan.cfg)),
            {"cpu": per_trial})
        path = out.resolve() / TUNE
        _show[:] = [show] if show is not None else []
        started, before = time.monotonic(), _elapsed_before(out)
        try:
            if tune.Tuner.can_restore(str(path)):
                tuner = tune.Tuner.restore(str(path), trainable, resume_unfinished=True, resume_errored=False)
            else:
                tuner = _new_tuner(plan, trainable, out, cpus // per_trial)
            results = tuner.fit()
        finally:
            _show.clear()
    return _write_study(out, plan, results, before + time.monotonic() - started)


def _trial_failures(record: logging.LogRecord) -> bool:
    """False for Tune's "Trial task failed for trial ..." records (a logging filter)."""
    return not str(record.msg).startswith("Trial task failed")


def _elapsed_before(out: Path) -> float:
    """The sweep's time in earlier sessions, as the last report's study recorded it."""
    if not (out / JOURNAL).exists():
        return 0.0
    try:
        study = optuna.load_study(study_name=STUDY, storage=JournalStorage(JournalFileBackend(str(out / JOURNAL))))
    except (KeyError, ValueError):
        return 0.0
    return float(study.user_attrs.get("elapsed_s", 0.0))


def _new_tuner(plan: Plan, trainable, out: Path, concurrent: int) -> tune.Tuner:
    sweep = plan.sweep
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    search = Search(plan, space=distributions(sweep), sampler=sampler(sweep, 0), metric="objective", mode="max")
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(metric="objective", mode="max", search_alg=search, scheduler=_scheduler(plan),
                                    num_samples=-1,  # the searcher ends the sweep
                                    max_concurrent_trials=_concurrent(plan, concurrent),
                                    trial_dirname_creator=_dirname),
        run_config=tune.RunConfig(name=TUNE, storage_path=str(out.resolve()), verbose=0,
                                  callbacks=[Display(plan.trial_limit)],
                                  failure_config=tune.FailureConfig(max_failures=0)))


def _concurrent(plan: Plan, workers: int) -> int | None:
    """Trials under way at once: as many as the workers run, so each proposal can learn from the results before it;
    for HyperBand no limit (None), since a bracket halves only once it holds all its trials, running, paused or
    waiting for a worker, and Tune adds a trial to the next bracket when it is full, not when it is done."""
    return None if plan.sweep.pruner.kind == "hyperband" else max(1, workers)


def _write_study(out: Path, plan: Plan, results, elapsed_s: float) -> optuna.Study:
    """The Tune results as an Optuna study in OUT/study.journal (written aside, then moved into place), with the
    sweep's time so far (`elapsed_s`)."""
    space = distributions(plan.sweep)
    path, aside = out / JOURNAL, out / f"{JOURNAL}.new"
    aside.unlink(missing_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=JournalStorage(JournalFileBackend(str(aside))), study_name=STUDY,
                                direction="maximize")
    study.set_user_attr("elapsed_s", round(elapsed_s, 1))
    for result in results:
        metrics, folder = result.metrics or {}, Path(result.path).name
        history = result.metrics_dataframe
        reports = {} if history is None or "step" not in history else {
            int(step): float(value) for step, value, done in zip(history["step"], history["objective"],
                                                                 history["finished"]) if not done}
        attrs: dict[str, Any] = {"folder": folder}
        if metrics.get("finished"):
            state, value = TrialState.COMPLETE, float(metrics["objective"])
            attrs["returns"] = list(metrics["returns"])
        elif result.error is not None:
            state, value = TrialState.FAIL, None
            attrs["error"] = str(result.error).strip().splitlines()[-1]
        else:
            state, value = TrialState.PRUNED, None
            for run in seed_runs(out, folder, plan.sweep):
                mark_pruned(run.run_dir)
        params = {key: result.config[key] for key in plan.sweep.parameters}
        study.add_trial(optuna.trial.create_trial(state=state, value=value, params=params, distributions=space,
                                                  intermediate_values=reports, user_attrs=attrs))
    os.replace(aside, path)
    Path(f"{aside}.lock").unlink(missing_ok=True)
    return optuna.load_study(study_name=STUDY, storage=JournalStorage(JournalFileBackend(str(path))))
