"""The trainer: one loop for every algorithm, and everything that is not the algorithm.

    loop: agent.iterate(envs) → metrics ; then its callbacks in order: evaluate when due ; monitors ; log ;
          stop when done, solved, signalled or asked ; checkpoint when due ; profile ; debug line

It owns timing, the run directory's files, seeding and resuming; evaluation, logging, checkpoints and the stop
conditions are its built-in callbacks (`rlfoundry.run.hooks`), and a user's own (`rlfoundry.Callback`) run among them.
SIGINT and SIGTERM are honoured at the end of the current iteration: a checkpoint is saved and the
run is marked `stopped` (a second Ctrl-C interrupts at once). One that comes during an evaluation (which may take
hours: PlaNet plans every step) ends it there: the checkpoint holds the iteration's row and the random state from
before the evaluation, and a resumed run evaluates that step again before its next iteration.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
import traceback
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from rich.console import Console
from rich.markup import escape

from rlfoundry import envs as envs_lib
from rlfoundry.algos import Runtime, algorithm
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import Provenance
from rlfoundry.envs import state as envs_state
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.records.registry import Registry, RegistryError
from rlfoundry.records.report import write_report
from rlfoundry.records.rundir import git_commit, versions, write_json, write_yaml
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run import debug, distributed, hardware, hooks, weights
from rlfoundry.run.evaluate import EvaluationStopped
from rlfoundry.run.seeding import resolve_device, seed_everything, set_rng_state
from rlfoundry.sinks.files import is_disk_full

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
    spec: envs_lib.EnvInfo
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


def _check_finite(row: dict[str, Any], step: int) -> None:
    """A non-finite loss stops the run (every iteration; parameters are checked before each save)."""
    for key, value in row.items():
        if key.startswith("loss/") and isinstance(value, float) and not math.isfinite(value):
            raise FloatingPointError(f"{key} is {value} at step {step}: training diverged")


class Trainer:
    def __init__(self, cfg: ExperimentConfig, run_dir: Path, console: Console | None = None,
                 resume: ckpt.Checkpoint | None = None, group: distributed.Group | None = None,
                 stop_at_step: int | None = None, callbacks: Sequence[hooks.Callback] = (),
                 init: weights.Saved | None = None):
        """`resume`: continue the run in `run_dir` from this checkpoint (`cfg` is the run's own config.yaml).
        `init`: a new run's starting networks and observation statistics (`train.init`, read by `launch.train`).
        `group`: rank 0 of a run across processes (`rlfoundry.run.distributed`), whose process group is joined.
        `stop_at_step`: end the run after the iteration that reaches this step, as a stop does (a checkpoint, status
        `stopped`), while schedules still run over train.total_timesteps: the first steps of a run exactly as the
        whole run takes them (`rlfoundry runs verify --steps`).
        `callbacks`: the user's `rlfoundry.Callback`s, run with the built-in ones (`rlfoundry.run.hooks`)."""
        self.cfg = cfg
        self.stop_at_step = stop_at_step
        self.resume = resume
        self.init = init if resume is None else None  # a resumed run has its own networks
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
        self.signal = hooks.StopSignal(self.console)  # its handlers are on from the run's start to its recorded end
        self.callbacks = list(callbacks)
        self.registry_warned = False  # a registry problem is said on the console once

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
                                                             cfg.train.total_timesteps, self.device)
        if started is not None and cfg.train.compile == "auto" and started.compile is not None:
            compile_ = started.compile
        graphs, graphs_warning = hardware.resolve_cuda_graphs(cfg.train.cuda_graphs, cfg.algo.name, self.device,
                                                              cfg.train.debug, self.group.world if self.group else 1)
        if started is not None and cfg.train.cuda_graphs == "auto" and started.cuda_graphs is not None:
            graphs = started.cuda_graphs and self.device.type == "cuda"
        train = cfg.train.model_copy(update={"torch_threads": threads, "precision": precision, "compile": compile_,
                                             "cuda_graphs": graphs})
        every = cfg.logging.every_steps
        if every == "auto":  # the algorithm's choice; a run from before the setting wrote a row per iteration
            every = algorithm(cfg.algo.name).row_steps if started is None else started.log_every or 0
        logging_cfg = cfg.logging.model_copy(update={"every_steps": every})
        run_cfg, self.in_process_note = debug.in_process(cfg.model_copy(update={"train": train,
                                                                                "logging": logging_cfg}))
        return run_cfg, [w for w in (precision_warning, compile_warning, graphs_warning) if w]

    def _write_config(self, vectorization: str) -> None:
        git = git_commit()
        self.cfg.provenance = Provenance(
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), versions=self.summary["versions"], git_commit=git["commit"],
            git_dirty=git["dirty"], device=str(self.device), torch_threads=self.run_cfg.train.torch_threads,
            precision=self.run_cfg.train.precision, compile=self.run_cfg.train.compile,
            cuda_graphs=self.run_cfg.train.cuda_graphs, log_every=self.run_cfg.logging.every_steps,
            hardware=self.hardware.describe(), vectorization=vectorization,
            processes=self.group.world if self.group else 1, init=weights.describe(self.init, self.cfg.train.init),
        )
        write_yaml(self.run_dir / "config.yaml", self.cfg.model_dump(mode="json", by_alias=True))

    def _write_summary(self) -> None:
        write_json(self.run_dir / "summary.json", self.summary)

    def _register(self) -> None:
        """Record the run in the runs root's registry; a registry problem never stops training."""
        try:
            Registry(self.cfg.logging.runs_root).record_run(self.run_dir)
        except RegistryError as exc:
            self.log.warning("run registry: %s", exc)
            if not self.registry_warned:  # on the console too, once: the run goes on, unrecorded
                self.registry_warned = True
                self.console.print(f"[yellow]warning:[/] {escape(str(exc))}; the run trains on without a record "
                                   f"(`rlfoundry runs rebuild --runs-root {escape(self.cfg.logging.runs_root)}` "
                                   "rebuilds the registry from the run directories)", highlight=False)

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
        self.signal.install()
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
            self.signal.uninstall()
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
        return f"disk full while writing {getattr(exc, 'filename', None)}; {then}"

    def _build(self) -> Built:
        """Seeding, then the envs and the agent, before the run directory exists: an agent that cannot take the env
        (a ConfigError) leaves nothing behind."""
        cfg, run_cfg = self.cfg, self.run_cfg
        threads = run_cfg.train.torch_threads
        assert threads != "auto", "resolved in __init__"
        seed_everything(cfg.train.seed, threads, cfg.train.deterministic)
        env_cfg = run_cfg.env
        if self.resume is not None and cfg.provenance is not None and env_cfg.vectorization == "auto":
            # the vectorization the run chose, not a new measurement: the saved env state is for it
            env_cfg = env_cfg.model_copy(update={"vectorization": cfg.provenance.vectorization})
        with contextlib.ExitStack() as opened:  # closed again if a later part fails
            train_envs, spec = envs_lib.build(env_cfg, gamma=getattr(cfg.algo, "gamma", 0.99),
                                             check_finite=cfg.train.debug)
            opened.callback(train_envs.close)
            eval_envs, _ = envs_lib.build(env_cfg, cfg.eval.num_envs or min(cfg.eval.episodes, 16), evaluation=True)
            opened.callback(eval_envs.close)
            agent = algorithm(cfg.algo.name)(run_cfg, spec, Runtime.of(run_cfg.train, self.device))
            if self.init is not None:  # a misfit is bad input, said before anything is written
                weights.start_from(self.init, agent, train_envs, f"train.init {cfg.train.init}")
            opened.pop_all()
        return Built(train_envs, eval_envs, spec, agent)

    # ------------------------------------------------------------------ the loop

    def _train(self, sinks: list, built: Built) -> None:
        """The loop: each iteration's row goes through the callbacks in order (`rlfoundry.run.hooks`) until one of
        them ends the run."""
        ctx = self._context(built)
        checkpoints = hooks.Checkpoints()
        callbacks = self._callbacks(sinks, checkpoints)
        p = ctx.progress
        try:
            for callback in callbacks:
                callback.on_start(ctx)
            ctx.start = time.perf_counter() - p.wall_time
            while ctx.ending is None and (p.global_step < self.cfg.train.total_timesteps or p.pending_row is not None):
                if p.pending_row is not None:  # resumed where a signal cut an evaluation short: that row first
                    ctx.row, p.pending_row = p.pending_row, None
                else:
                    ctx.row = self._iterate(ctx, callbacks)
                _check_finite(ctx.row, p.global_step)  # a diverged model is not worth evaluating
                try:
                    for callback in callbacks:
                        callback.on_iteration(ctx, ctx.row)
                except EvaluationStopped:
                    self._stopped_in_evaluation(ctx, checkpoints)
                if ctx.ending is not None and ctx.ending.status == "stopped":
                    self.summary["status"] = "stopped"
                if ctx.ending is not None and ctx.ending.line:
                    self.log.info("%s", ctx.ending.line)
        finally:
            ctx.exits.close()
            wall = time.perf_counter() - ctx.start
            self.summary.update(wall_time_s=wall, sps=p.global_step / wall if wall > 0 else None)
            ctx.agent.close()
            ctx.envs.close()
            ctx.eval_envs.close()
        for callback in callbacks:
            callback.on_end(ctx)
        if self.summary["status"] == "stopped":
            return
        self.summary["status"] = "finished"
        self.log.info("finished: %d steps in %.1f s (%.0f steps/s); eval return %s; last checkpoint at step %s",
                      p.global_step, wall, p.global_step / wall, self.summary["eval_return_mean"], ctx.saved_at)

    def _callbacks(self, sinks: list, checkpoints: hooks.Checkpoints) -> list[hooks.Callback]:
        """The run's callbacks in the order they see each row: a row's columns complete before it is written, and
        the run knows whether it ends before its checkpoint."""
        cfg = self.cfg
        return [
            *([hooks.InLockstep(self.group, self.run_cfg)] if self.group else []),
            hooks.Evaluation(),
            *([hooks.MonitorAlerts()] if cfg.logging.monitors.enabled else []),
            hooks.Sinks(sinks, int(self.run_cfg.logging.every_steps)),  # (resolved: a number)
            self.signal,
            *([hooks.Solved()] if cfg.eval.stop_at_threshold else []),
            hooks.Finished(),
            *([hooks.StopAtStep(self.stop_at_step)] if self.stop_at_step is not None else []),
            *self.callbacks,
            checkpoints,
            *([hooks.Profiling()] if cfg.train.profile else []),
            *([hooks.DebugChecks()] if cfg.train.debug else []),
        ]

    def _context(self, built: Built) -> hooks.Context:
        """The run up to its first iteration: the warnings, debug mode's echo, the config written or the checkpoint
        restored, and the line that says what runs where."""
        cfg, run_cfg = self.cfg, self.run_cfg
        train_envs, eval_envs, spec, agent = built
        for warning in self.warnings:
            self.log.warning(warning)
            self.console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
        if cfg.train.debug:
            self.log.addHandler(debug.ConsoleEcho(self.console))
            self.log.setLevel(logging.DEBUG)
        if self.in_process_note:
            self.log.info(self.in_process_note)
        if self.resume is None:
            progress = Progress.start(cfg)
            self._write_config(spec.vectorization)
        else:
            progress = self._restore(self.resume, agent, train_envs)
        planned = self._budget(agent, progress.global_step)
        processes = f"{self.group.world} processes × " if self.group else ""
        self.log.info("env %s: %s%d envs, %s vectorization; device %s, %d torch threads, %s%s%s; %s",
                      cfg.env.id, processes, spec.num_envs, spec.vectorization, self.device,
                      run_cfg.train.torch_threads, run_cfg.train.precision, ", compiled" if run_cfg.train.compile else "",
                      ", CUDA graphs" if run_cfg.train.cuda_graphs else "", self.hardware.describe())
        return hooks.Context(
            cfg=cfg, run_dir=self.run_dir, log=self.log, console=self.console,
            title=f"{cfg.env.id}:{cfg.variant} s{cfg.train.seed}", device=self.device, summary=self.summary,
            agent=agent, envs=train_envs, eval_envs=eval_envs, spec=spec, progress=progress, signal=self.signal,
            resume=self.resume, start=time.perf_counter() - progress.wall_time, planned=planned,
        )

    def _budget(self, agent, step: int) -> int:
        """The env steps the run will have taken at its end, from `step`: train.total_timesteps rounded up to whole
        iterations where the agent knows their size. A first iteration larger than the whole budget is said once
        (it was 65,536 steps of a 2,048-step run on BipedalWalker), with the settings to lower."""
        total, world = self.cfg.train.total_timesteps, self.group.world if self.group else 1
        first, each = agent.iteration_steps(first=step == 0), agent.iteration_steps()
        if first is None or each is None or step >= total:
            return max(total, step)
        planned = step + first * world + max(0, math.ceil((total - step - first * world) / (each * world))) * each * world
        if step == 0 and first * world > total:
            sizes = " × ".join(f"{key} = {self.run_cfg.setting(key):,}" for key in agent.iteration_settings)
            warning = (f"train.total_timesteps = {total:,} is less than one iteration of {self.cfg.algo.name} "
                       f"({first * world:,} env steps: {sizes}{f' × {world} processes' if world > 1 else ''}): "
                       f"the run takes {planned:,} steps; to keep to the budget, lower "
                       f"{' or '.join(agent.iteration_settings)}")
            self.log.warning(warning)
            self.console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
        return planned

    def _iterate(self, ctx: hooks.Context, callbacks: list[hooks.Callback]) -> dict[str, Any]:
        """One iteration of the agent, counted in the progress; its row of metrics (the evaluation's come after)."""
        p = ctx.progress
        tick = time.perf_counter()
        try:
            with contextlib.ExitStack() as around:
                for callback in callbacks:
                    around.enter_context(callback.around_iteration(ctx))
                result = ctx.agent.iterate(ctx.envs, p.global_step / self.cfg.train.total_timesteps)
        except FloatingPointError as exc:  # from debug mode's checks: say which iteration
            raise FloatingPointError(f"{exc} (in the iteration from step {p.global_step:,})") from None
        for callback in callbacks:
            result = callback.on_result(ctx, result)
        iteration_time = time.perf_counter() - tick
        p.train_time += iteration_time
        p.global_step += result.steps
        p.recent.extend(result.episode_returns)
        return {
            "wall_time": time.perf_counter() - ctx.start,
            "sps": result.steps / iteration_time,
            "sps_run": p.global_step / p.train_time,
            "train/episode_return": _mean(result.episode_returns),
            "train/episode_length": _mean(result.episode_lengths),
            "train/episodes": len(result.episode_returns),
            "train/return_mean": _mean(p.recent),
            **result.metrics,
        }

    def _stopped_in_evaluation(self, ctx: hooks.Context, checkpoints: hooks.Checkpoints) -> None:
        """A stop signal cut the evaluation short: the checkpoint holds the iteration's row and the random state from
        before the evaluation, and a resumed run evaluates this step again before its next iteration."""
        p = ctx.progress
        assert ctx.row is not None, "the row of the iteration whose evaluation was stopped"
        p.pending_row = _plain(ctx.row)
        p.wall_time = time.perf_counter() - ctx.start
        self.summary.update(total_steps=p.global_step, wall_time_s=p.wall_time)
        checkpoints.save(ctx, None)
        ctx.end("stopped", f"stopped by {ctx.signal.name} during the evaluation at step {p.global_step}; checkpoint "
                           "saved (a resumed run evaluates this step again)")

    # ------------------------------------------------------------------ checkpoints

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
    window: dict[str, Any] | None = None  # the iterations not yet written as a row (`rows.RowWindow`)

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
