"""The trainer: one loop for every algorithm, and everything that is not the algorithm.

    loop: agent.iterate(envs) → metrics ; evaluate when due ; log ; checkpoint when due ;
          stop when done, solved or signalled

It owns timing, evaluation, logging, checkpoints, the run directory's files and seeding.
SIGINT and SIGTERM are honoured at the end of the current iteration: a checkpoint is saved and the
run is marked `stopped` (a second Ctrl-C interrupts at once). One that comes during an evaluation (which may take
hours: PlaNet plans every step) ends it there: the checkpoint holds the iteration's row and the random state from
before the evaluation, and a resumed run evaluates that step again before its next iteration.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape

from rlfoundry import envs as envs_lib
from rlfoundry.algos import Runtime, algorithm
from rlfoundry.algos.optim import debug_checks
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import Provenance
from rlfoundry.envs import state as envs_state
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run import debug, distributed
from rlfoundry.run import hardware
from rlfoundry.run.evaluate import EvaluationStopped, evaluate
from rlfoundry.run.monitors import ALERTS, Monitors
from rlfoundry.run.profiling import IterationProfiler
from rlfoundry.run.registry import Registry, RegistryError
from rlfoundry.run.report import write_report
from rlfoundry.run.rundir import git_commit, versions, write_json, write_yaml
from rlfoundry.run.seeding import own_random_state, resolve_device, rng_state, seed_everything, set_rng_state
from rlfoundry.run.video import record_video
from rlfoundry.sinks import CSVSink, TensorBoardSink
from rlfoundry.sinks.console import ConsoleSink
from rlfoundry.sinks.files import is_disk_full
from rlfoundry.sinks.wandb import WandbSink
from rlfoundry.spec.schema import ExperimentConfig

SUMMARY_KEYS = (
    "status", "env_id", "algo", "variant", "seed", "total_steps", "wall_time_s", "sps", "train_return_mean",
    "eval_return_mean", "eval_return_std", "best_eval_return", "solved_at_step", "versions",
)


class RunFailed(Exception):
    """Training failed at run time; the traceback is in the run's run.log."""

    def __init__(self, run_dir: Path, message: str):
        super().__init__(message)
        self.run_dir = run_dir


class Built(NamedTuple):
    """What a run trains with, built before its run directory is written."""

    train_envs: Any
    eval_envs: Any
    spec: envs_lib.EnvSpec
    agent: Any


class RunLogHandler(logging.FileHandler):
    """run.log. A line that cannot be written (a full disk) is dropped quietly: the run's own error still reaches
    the console, where logging's default would print a traceback for every lost line."""

    def handleError(self, record: logging.LogRecord) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handleError(record)


def _mean(values) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row for a checkpoint's JSON: NumPy scalars as Python numbers."""
    return {key: value.item() if isinstance(value, np.generic) else value for key, value in row.items()}


class Trainer:
    def __init__(self, cfg: ExperimentConfig, run_dir: Path, console: Console | None = None,
                 resume: ckpt.Checkpoint | None = None, group: distributed.Group | None = None,
                 stop_at_step: int | None = None):
        """`resume`: continue the run in `run_dir` from this checkpoint (`cfg` is the run's own config.yaml).
        `group`: rank 0 of a run across processes (`rlfoundry.run.distributed`), whose process group is joined.
        `stop_at_step`: end the run after the iteration that reaches this step, as a stop does (a checkpoint, status
        `stopped`), while schedules still run over train.total_timesteps: the first steps of a run exactly as the
        whole run takes them (`rlfoundry runs verify --steps`)."""
        self.cfg = cfg
        self.stop_at_step = stop_at_step
        self.resume = resume
        self.group = group
        self.run_dir = Path(run_dir)
        self.console = console or Console(stderr=True)
        self.device = resolve_device(cfg.train.device)  # a config error: raised before anything is created
        self.hardware = hardware.detect()
        self.run_cfg, self.warnings = self._resolve_auto()
        self.summary: dict[str, Any] = dict.fromkeys(SUMMARY_KEYS)
        self.summary.update(
            status="running", env_id=cfg.env.id, algo=cfg.algo.name, variant=cfg.variant, seed=cfg.train.seed,
            total_steps=0, versions=versions(),
        )
        self.log = logging.getLogger(f"rlfoundry.run.{id(self)}")
        self.stop_signal: str | None = None  # set by the SIGINT/SIGTERM handlers
        self.wandb: WandbSink | None = None  # logging.wandb: also gets the evaluation videos
        self.monitors: Monitors | None = None  # logging.monitors, once the action space is known

    # ------------------------------------------------------------------ files

    def _open_run_dir(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        handler = RunLogHandler(self.run_dir / "run.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.log.addHandler(handler)
        self.log.setLevel(logging.INFO)
        self.log.propagate = False

    def _resolve_auto(self) -> tuple[ExperimentConfig, list[str]]:
        """The config the run trains with: `auto` threads, precision and compilation resolved from the hardware once,
        or, on resume, taken from the run's provenance (so a resumed run computes as before); and the warnings: bf16
        without native support, compilation asked of an agent that has none."""
        cfg = self.cfg
        threads = hardware.resolve_threads(cfg.train.torch_threads, cfg.network, self.hardware,
                                           processes=self.group.local_world if self.group else 1)
        precision, precision_warning = hardware.resolve_precision(cfg.train.precision, self.device, cfg.network,
                                                                  self.hardware)
        started = cfg.provenance if self.resume is not None else None
        if started is not None and cfg.train.torch_threads == "auto" and started.torch_threads:
            threads = started.torch_threads
        if started is not None and cfg.train.precision == "auto" and started.precision:
            precision = started.precision
        compile_, compile_warning = hardware.resolve_compile(cfg.train.compile, cfg.algo.name, cfg.network,
                                                             cfg.train.total_timesteps)
        if started is not None and cfg.train.compile == "auto" and started.compile is not None:
            compile_ = started.compile
        train = cfg.train.model_copy(update={"torch_threads": threads, "precision": precision, "compile": compile_})
        run_cfg, self.in_process_note = debug.in_process(cfg.model_copy(update={"train": train}))
        return run_cfg, [w for w in (precision_warning, compile_warning) if w]

    def _write_config(self, vectorization: str) -> None:
        git = git_commit()
        self.cfg.provenance = Provenance(
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), versions=self.summary["versions"], git_commit=git["commit"],
            git_dirty=git["dirty"], device=str(self.device), torch_threads=self.run_cfg.train.torch_threads,
            precision=self.run_cfg.train.precision, compile=self.run_cfg.train.compile,
            hardware=self.hardware.describe(), vectorization=vectorization,
            processes=self.group.world if self.group else 1,
        )
        write_yaml(self.run_dir / "config.yaml", self.cfg.model_dump(mode="json", by_alias=True))

    def _write_summary(self) -> None:
        write_json(self.run_dir / "summary.json", self.summary)

    # ------------------------------------------------------------------ the loop

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.stop_signal = name
        self.console.print(f"[yellow]{name}: stopping after this iteration and saving a checkpoint[/]")

    def _install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}  # Python allows handlers only in the main thread
        return {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _register(self) -> None:
        """Record the run in the runs root's registry; a registry problem never stops training."""
        try:
            Registry(self.cfg.logging.runs_root).record_run(self.run_dir)
        except RegistryError as exc:
            self.log.warning("run registry: %s", exc)

    def run(self) -> dict[str, Any]:
        try:
            built: Built | Exception = self._build()
        except ConfigError:
            raise  # bad input (an algorithm that cannot take this env's spaces): nothing is written
        except Exception as exc:
            built = exc  # recorded below as the run's failure
        self._open_run_dir()
        self._write_summary()
        self._register()
        sinks: list = []
        previous_handlers = self._install_signal_handlers()
        try:
            if isinstance(built, Exception):
                raise built
            self._train(sinks, built)
        except KeyboardInterrupt:
            self.summary["status"] = "stopped"
            self.log.info("stopped by the user at step %s", self.summary["total_steps"])
            raise
        except Exception as exc:
            self.summary["status"] = "failed"
            self.log.error("run failed:\n%s", traceback.format_exc())
            raise RunFailed(self.run_dir, self._failure(exc)) from exc
        finally:
            # The stop handlers stay until the end is recorded. When the command that started this run (`trials`,
            # `sweep`) dies, Linux sends the parent-death SIGTERM again each time the run is handed to another of the
            # dying command's threads, moments apart: under the default handler a late one killed the run while it
            # wrote summary.json.
            unwritten = self._record_end(sinks)
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            for handler in list(self.log.handlers):
                handler.close()
                self.log.removeHandler(handler)
        if unwritten is not None:  # the run trained, but its end could not be recorded
            raise RunFailed(self.run_dir, self._failure(unwritten)) from unwritten
        return self.summary

    def _record_end(self, sinks: list) -> Exception | None:
        """Close the sinks, write the summary, the registry row and the report as far as the disk allows: a
        failure here never hides the run's own error. Returns the first failure of the sinks or the summary."""
        first = None
        steps = [*((type(sink).__name__, sink.close, True) for sink in sinks),
                 ("summary.json", self._write_summary, True), ("the run registry", self._register, True),
                 # a plotting problem never fails a run; a full disk does
                 ("report.md / curves.png", lambda: write_report(self.run_dir), False)]
        for what, step, fails_run in steps:
            try:
                step()
            except Exception as exc:
                self.log.warning("%s not written:\n%s", what, traceback.format_exc())
                if first is None and (fails_run or is_disk_full(exc)):
                    first = exc
        return first

    def _failure(self, exc: Exception) -> str:
        """The one line the user sees for a run that failed."""
        saved = ckpt.last_step(self.run_dir / "checkpoints")
        if self.group is not None and distributed.peer_gone(exc):
            then = "" if saved is None else f"; `rlfoundry train --resume {self.run_dir}` continues from step {saved:,}"
            return f"another process of this run stopped (its message is above){then}"
        if not is_disk_full(exc):
            return f"{type(exc).__name__}: {exc}"
        if self.summary["status"] == "finished":
            then = f"training finished: free some space, then `rlfoundry report {self.run_dir}`"
        elif saved is None:
            then = "no checkpoint was saved"
        else:
            then = (f"the checkpoint of step {saved:,} is intact: free some space, then "
                    f"`rlfoundry train --resume {self.run_dir}`")
        return f"disk full while writing {exc.filename}; {then}"

    def _build(self) -> Built:
        """Seeding, then the envs and the agent, before the run directory exists: an agent that cannot take the env
        (a ConfigError) leaves nothing behind."""
        cfg, run_cfg = self.cfg, self.run_cfg
        seed_everything(cfg.train.seed, run_cfg.train.torch_threads)
        env_cfg = run_cfg.env
        if self.resume is not None and cfg.provenance is not None and env_cfg.vectorization == "auto":
            # the vectorization the run chose, not a new measurement: the saved env state is for it
            env_cfg = env_cfg.model_copy(update={"vectorization": cfg.provenance.vectorization})
        with contextlib.ExitStack() as opened:  # closed again if a later part fails
            train_envs, spec = envs_lib.make(env_cfg, gamma=getattr(cfg.algo, "gamma", 0.99),
                                             check_finite=cfg.train.debug)
            opened.callback(train_envs.close)
            eval_envs, _ = envs_lib.make(env_cfg, cfg.eval.num_envs or min(cfg.eval.episodes, 16), evaluation=True)
            opened.callback(eval_envs.close)
            agent = algorithm(cfg.algo.name)(run_cfg, spec, Runtime.of(run_cfg.train, self.device))
            opened.pop_all()
        return Built(train_envs, eval_envs, spec, agent)

    def _train(self, sinks: list, built: Built) -> None:
        cfg = self.cfg
        run_cfg = self.run_cfg
        train_envs, eval_envs, spec, agent = built
        for warning in self.warnings:
            self.log.warning(warning)
            self.console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
        if cfg.train.debug:
            echo = debug.ConsoleEcho(self.console)
            self.log.addHandler(echo)
            self.log.setLevel(logging.DEBUG)
        if self.in_process_note:
            self.log.info(self.in_process_note)
        checkpoint = self.resume
        progress = Progress.start(cfg)
        if checkpoint is None:
            self._write_config(spec.vectorization)
        else:
            progress = self._restore(checkpoint, agent, train_envs)
        lockstep = self._start_ranks(agent, train_envs, spec, progress) if self.group else None
        processes = f"{self.group.world} processes × " if self.group else ""
        self.log.info("env %s: %s%d envs, %s vectorization; device %s, %d torch threads, %s%s; %s",
                      cfg.env.id, processes, spec.num_envs, spec.vectorization, self.device,
                      run_cfg.train.torch_threads, run_cfg.train.precision, ", compiled" if run_cfg.train.compile else "",
                      self.hardware.describe())

        if cfg.train.debug:
            for line in debug.describe_shapes(spec, ckpt.split_agent_state(agent.state_dict())[0]):
                self.log.debug(line)

        resume_step = None if checkpoint is None else progress.global_step
        if cfg.logging.csv:
            sinks.append(CSVSink(self.run_dir / "metrics.csv", resume_step))
        if cfg.logging.tensorboard:
            sinks.append(TensorBoardSink(self.run_dir, resume_step))
        title = f"{cfg.env.id}:{cfg.variant} s{cfg.train.seed}"
        if cfg.logging.wandb:
            self.wandb = WandbSink(self.run_dir, cfg.logging, title, cfg.model_dump(mode="json", by_alias=True),
                                   self.summary, resume_step)
            sinks.append(self.wandb)
            self.log.info("%s", self.wandb.describe())
            self.console.print(escape(self.wandb.describe()), highlight=False)
        sinks.append(ConsoleSink(self.console, title, cfg.train.total_timesteps, cfg.logging.progress))
        if cfg.logging.monitors.enabled:
            self.monitors = Monitors(cfg.logging.monitors, cfg.algo.name, spec.discrete)
            if checkpoint is not None:
                self.monitors.load_state_dict(checkpoint.state.get("monitors"))

        total = cfg.train.total_timesteps
        threshold = cfg.threshold
        p = progress
        saved_at = None
        start = time.perf_counter() - p.wall_time
        profiler = IterationProfiler(self.run_dir, self.device, title, self.log) if cfg.train.profile else None
        checking = contextlib.ExitStack()  # debug mode's checks, on for the loop
        checks = checking.enter_context(debug_checks()) if cfg.train.debug else None
        if cfg.train.debug:
            checking.enter_context(torch.autograd.set_detect_anomaly(True, check_nan=True))
        try:
            while p.global_step < total or p.pending_row is not None:
                if p.pending_row is not None:  # resumed where a signal cut an evaluation short: that row first
                    row, p.pending_row = p.pending_row, None
                else:
                    row = self._iterate(agent, train_envs, p, start, profiler, lockstep, checks)
                self._check_finite(row, p.global_step)  # a diverged model is not worth evaluating
                finished = p.global_step >= total  # the final evaluation happens in this row
                improved = False
                if p.global_step >= p.next_eval or (finished and cfg.eval.at_end):
                    best_before = self.summary["best_eval_return"]
                    try:
                        # ranks in lockstep all iterate after a resume, so under torchrun a signal waits for the end
                        row.update(self._evaluate(agent, train_envs, eval_envs, p.global_step, lockstep is None))
                    except EvaluationStopped:
                        p.pending_row = _plain(row)
                        p.wall_time = time.perf_counter() - start
                        self.summary.update(total_steps=p.global_step, wall_time_s=p.wall_time)
                        self._save(agent, train_envs, p, None, lockstep)
                        self.summary["status"] = "stopped"
                        self.log.info("stopped by %s during the evaluation at step %d; checkpoint saved (a resumed run "
                                      "evaluates this step again)", self.stop_signal, p.global_step)
                        saved_at = p.global_step
                        break
                    improved = best_before is None or row["eval/return_mean"] > best_before
                    while p.next_eval <= p.global_step:
                        p.next_eval += cfg.eval.every_steps
                if self.monitors is not None:
                    row[ALERTS] = self._monitor(row, p.global_step)
                p.wall_time = time.perf_counter() - start
                self.summary.update(total_steps=p.global_step, train_return_mean=_mean(p.recent),
                                    wall_time_s=p.wall_time)
                for sink in sinks:
                    sink.write(p.global_step, row)
                if row.get("eval/return_mean") is not None:
                    self._write_summary()
                solved = self.summary["solved_at_step"] is not None
                stopping = self.stop_signal is not None
                reached = self.stop_at_step is not None and p.global_step >= self.stop_at_step
                last = finished or stopping or reached or (solved and cfg.eval.stop_at_threshold)
                save = last or p.global_step >= p.next_save or (improved and cfg.checkpoint.save_best)
                if lockstep is not None:
                    lockstep.decide(distributed.Decision(p.global_step, save, last))
                if save:
                    while p.next_save <= p.global_step:
                        p.next_save += cfg.checkpoint.every_steps
                    best = row["eval/return_mean"] if improved and cfg.checkpoint.save_best else None
                    self._save(agent, train_envs, p, best, lockstep)
                    saved_at = p.global_step
                if profiler is not None:
                    profiler.after(p.global_step, row)
                if checks is not None:  # debug mode: a line per iteration
                    self.log.debug("%s", debug.iteration_line(p.global_step, row))
                if stopping:
                    self.summary["status"] = "stopped"
                    self.log.info("stopped by %s at step %d; checkpoint saved", self.stop_signal, p.global_step)
                    break
                if solved and cfg.eval.stop_at_threshold:
                    self.log.info("solved: evaluation return %.2f ≥ %.2f at step %d",
                                  row["eval/return_mean"], threshold, p.global_step)
                    break
                if reached and not finished:
                    self.summary["status"] = "stopped"
                    self.log.info("stopped at step %d, as asked (stop at step %d); checkpoint saved", p.global_step,
                                  self.stop_at_step)
                    break
        finally:
            checking.close()
            if profiler is not None:
                profiler.close(p.global_step)
            wall = time.perf_counter() - start
            self.summary.update(wall_time_s=wall, sps=p.global_step / wall if wall > 0 else None)
            agent.close()
            train_envs.close()
            eval_envs.close()
        for key in self.monitors.never_seen() if self.monitors is not None else []:
            if key in cfg.logging.monitors.metrics:  # asked for in the config, but this run does not log it
                self.log.warning("monitor: no iteration reported %s, so its monitor watched nothing", key)
        if self.summary["status"] == "stopped":
            return
        self.summary["status"] = "finished"
        self.log.info("finished: %d steps in %.1f s (%.0f steps/s); eval return %s; last checkpoint at step %s",
                      p.global_step, wall, p.global_step / wall, self.summary["eval_return_mean"], saved_at)

    def _iterate(self, agent, train_envs, p: Progress, start: float, profiler, lockstep, checks) -> dict[str, Any]:
        """One iteration of the agent, counted in `p`; its row of metrics (the evaluation's come after)."""
        total = self.cfg.train.total_timesteps
        tick = time.perf_counter()
        try:
            with profiler.iteration() if profiler else contextlib.nullcontext():
                result = agent.iterate(train_envs, p.global_step / total)
        except FloatingPointError as exc:  # from debug mode's checks: say which iteration
            raise FloatingPointError(f"{exc} (in the iteration from step {p.global_step:,})") from None
        if lockstep is not None:  # all ranks' steps and episodes, and a stop signal any of them got
            result, signalled = lockstep.report(result, self.stop_signal)
            self.stop_signal = self.stop_signal or signalled
        iteration_time = time.perf_counter() - tick
        p.train_time += iteration_time
        p.global_step += result.steps
        p.recent.extend(result.episode_returns)
        return {
            "wall_time": time.perf_counter() - start,
            "sps": result.steps / iteration_time,
            "sps_run": p.global_step / p.train_time,
            "train/episode_return": _mean(result.episode_returns),
            "train/episode_length": _mean(result.episode_lengths),
            "train/episodes": len(result.episode_returns),
            "train/return_mean": _mean(p.recent),
            **result.metrics,
            **(checks.norms if checks is not None else {}),
        }

    def _evaluate(self, agent, train_envs, eval_envs, step: int, stoppable: bool) -> dict[str, float]:
        """The evaluation's row entries. It draws its random numbers (sampled actions, latent states, plans) from a
        state of its own, seeded alike at every evaluation and put back after: training draws the same numbers however
        often and however long it evaluates, and a checkpoint taken when a stop signal ends it (EvaluationStopped,
        when `stoppable`) resumes into the same evaluation."""
        tick = time.perf_counter()
        envs_lib.copy_obs_stats(train_envs, eval_envs)
        cfg = self.cfg
        seed = cfg.train.seed + cfg.eval.seed_offset
        self.log.info("evaluating at step %d: %d episodes", step, cfg.eval.episodes)
        with own_random_state(seed):
            returns, lengths = evaluate(agent, eval_envs, cfg.eval.episodes, seed, cfg.eval.deterministic,
                                        (lambda: self.stop_signal is not None) if stoppable else None)
        mean, std = float(np.mean(returns)), float(np.std(returns))
        best = self.summary["best_eval_return"]
        best = mean if best is None else max(best, mean)
        self.summary.update(eval_return_mean=mean, eval_return_std=std, best_eval_return=best)
        threshold = cfg.threshold
        if threshold is not None and mean >= threshold and self.summary["solved_at_step"] is None:
            self.summary["solved_at_step"] = step
        self.log.info("eval at step %d: return %.2f ± %.2f over %d episodes", step, mean, std, len(returns))
        if cfg.eval.video:
            with own_random_state(seed):
                video = record_video(agent, cfg.env, envs_lib.obs_stats(train_envs),
                                     self.run_dir / "videos" / f"eval_step{step}.mp4", seed, cfg.eval.deterministic)
            self.log.info("video of an evaluation episode (return %.2f): %s", video["return"], video["path"])
            if self.wandb is not None:
                self.wandb.video(step, video["path"])
        return {"eval/return_mean": mean, "eval/return_std": std, "eval/length_mean": float(np.mean(lengths)),
                "eval/best_return": best, "time/eval": time.perf_counter() - tick}

    def _check_finite(self, row: dict[str, Any], step: int) -> None:
        """A non-finite loss stops the run (every iteration; parameters are checked before each save)."""
        for key, value in row.items():
            if key.startswith("loss/") and isinstance(value, float) and not math.isfinite(value):
                raise FloatingPointError(f"{key} is {value} at step {step}: training diverged")

    def _monitor(self, row: dict[str, Any], step: int) -> str:
        """Judge the row's metrics against their monitors; the row's `monitor/alerts` cell. An alert that starts is one
        warning, on the console and in run.log; one that ends is a line in run.log."""
        cell, lines = self.monitors.observe(step, row)
        for level, line in lines:
            if level == "warning":
                self.log.warning(line)
                self.console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)
            else:
                self.log.info(line)
        return cell

    # ------------------------------------------------------------------ checkpoints

    def _save(self, agent, train_envs, progress: Progress, best_return: float | None,
              lockstep: distributed.Lockstep | None) -> None:
        """Everything a resumed run needs to continue as if never stopped (across processes: every rank's part)."""
        others = lockstep.gather(None, agent.synced_parameters()) if lockstep is not None else []
        weights, agent_arrays, rest = ckpt.split_agent_state(agent.state_dict())
        for name, tensor in weights.items():  # never checkpoint a diverged state: the last good one stays last
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise FloatingPointError(f"parameter {name} is not finite at step {progress.global_step}: "
                                         "training diverged")
        rngs, rng_arrays, rest["torch_rng"] = rng_state()
        env_state, arrays, why = (None, {}, agent.envs_elsewhere) if agent.envs_elsewhere else envs_state.capture(train_envs)
        arrays.update(agent_arrays)
        arrays.update(rng_arrays)
        state = {
            "summary": self.summary,
            "progress": progress.to_json(),
            **rngs,
            "envs": env_state,
            "envs_not_captured": why,
            "monitors": None if self.monitors is None else self.monitors.state_dict(),
        }
        if lockstep is not None:
            state["ranks"], rank_arrays = distributed.checkpoint_ranks(others)
            arrays.update(rank_arrays)
        stats = envs_lib.obs_stats(train_envs)
        if stats is not None:  # evaluation and play need the observation statistics the policy was trained on
            arrays["obs_rms_mean"], arrays["obs_rms_var"], state["obs_rms_count"] = stats
        checkpoint = ckpt.Checkpoint(weights=weights, agent=rest, arrays=arrays, state=state)
        step = progress.global_step
        path = ckpt.save(self.run_dir / "checkpoints", step, checkpoint, self.cfg.checkpoint.keep_last, best_return)
        self.log.info("checkpoint at step %d: %s%s", step, path.name, " (best)" if best_return is not None else "")

    def _start_ranks(self, agent, train_envs, spec, progress: Progress) -> distributed.Lockstep:
        """Send ranks 1 … N-1 the run: its resolved config, the agent (rank 0's initial or restored parameters), the
        step, and on resume each rank's own saved state."""
        states = None
        if self.resume is not None:
            states = distributed.saved_ranks(self.resume.state, self.resume.arrays, self.group.world)
        shared = {key: value for key, value in agent.state_dict().items() if key != distributed.PER_PROCESS}
        setup = {"cfg": self.run_cfg, "vectorization": spec.vectorization, "step": progress.global_step,
                 "agent": distributed.detached(shared), "obs_stats": envs_lib.obs_stats(train_envs)}
        distributed.share_setup(self.group, setup, states)
        return distributed.Lockstep(self.group, distributed.running_statistics(train_envs))

    def _restore(self, checkpoint: ckpt.Checkpoint, agent, train_envs) -> Progress:
        """Put a run back in the state its last checkpoint recorded."""
        state = checkpoint.state
        try:
            agent.load_state_dict(ckpt.agent_state(checkpoint))
        except (KeyError, RuntimeError, ValueError) as exc:
            raise ckpt.CheckpointError(f"the last checkpoint does not fit this run's agent ({exc})") from None
        set_rng_state(state, checkpoint.arrays, checkpoint.agent["torch_rng"])
        if state["envs"] is not None:
            envs_state.restore(train_envs, state["envs"], checkpoint.arrays)
        else:
            self.log.warning("the envs' state was not captured (%s): they are reset, so this resumed run will not "
                             "repeat the uninterrupted one exactly", state["envs_not_captured"])
            agent.forget_env_position()  # start from fresh episodes
            if "obs_rms_mean" in checkpoint.arrays:
                envs_lib.set_obs_stats(train_envs, checkpoint.arrays["obs_rms_mean"], checkpoint.arrays["obs_rms_var"],
                                       float(state["obs_rms_count"]))
        self.summary.update({**state["summary"], "status": "running"})
        progress = Progress.from_json(state["progress"], self.cfg.logging.train_return_window)
        self.log.info("resumed from %s at step %d", ckpt.step_dir_name(progress.global_step), progress.global_step)
        return progress


@dataclass
class Progress:
    """The loop's own counters: what a checkpoint must carry besides the agent and the envs."""

    global_step: int
    next_eval: float
    next_save: float
    train_time: float
    wall_time: float
    recent: deque  # returns of the latest training episodes
    pending_row: dict[str, Any] | None = None  # an iteration's row whose evaluation a stop signal cut short

    @classmethod
    def start(cls, cfg: ExperimentConfig) -> Progress:
        every_eval, every_save = cfg.eval.every_steps, cfg.checkpoint.every_steps
        return cls(
            global_step=0,
            next_eval=max(cfg.eval.warmup_steps, every_eval) if every_eval else math.inf,
            next_save=every_save if every_save else math.inf,
            train_time=0.0, wall_time=0.0, recent=deque(maxlen=cfg.logging.train_return_window),
        )

    def to_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "recent"}, "recent": list(self.recent)}

    @classmethod
    def from_json(cls, data: dict[str, Any], window: int) -> Progress:
        return cls(**{**data, "recent": deque(data["recent"], maxlen=window)})
