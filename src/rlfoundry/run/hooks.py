"""The trainer's duties as callbacks, and the base class of a user's own (`rlfoundry.Callback`).

The trainer's loop only iterates the agent and hands each iteration to its callbacks in a fixed order; each duty
(evaluation, monitors, sinks, the stop conditions, checkpoints, the profiler, debug mode's checks, the exchange
between a run's processes) is one small class below that implements the few events it needs. A user's callbacks
run among them with the same events: they see every row of metrics and may end the run as a stop signal does.

    on_start           before the first iteration (after a resumed run is restored)
    around_iteration   a context around each `agent.iterate` (the profiler's named range)
    on_result          the agent's iteration before it is counted (the ranks' merged; debug mode's norms added)
    on_iteration       each iteration's row, in this order: evaluation, monitors, sinks, stop conditions, the
                       user's callbacks, checkpoint, profiler, debug line
    on_end             after the last iteration of a run that finished or stopped; what must be released however
                       the run ends goes to `ctx.exits`
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape

from rlfoundry import envs as envs_lib
from rlfoundry.algos.base import Iteration
from rlfoundry.algos.optim import debug_checks
from rlfoundry.envs import state as envs_state
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.records.rundir import write_json
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run import debug, distributed
from rlfoundry.run.evaluate import evaluate
from rlfoundry.run.monitors import ALERTS, Monitors
from rlfoundry.run.profiling import IterationProfiler
from rlfoundry.run.rows import RowWindow
from rlfoundry.run.seeding import own_random_state, rng_state
from rlfoundry.run.video import record_video
from rlfoundry.sinks import CSVSink, TensorBoardSink
from rlfoundry.sinks.console import ConsoleSink
from rlfoundry.sinks.wandb import WandbSink

if TYPE_CHECKING:
    from rlfoundry.run.trainer import Progress


class Ending(NamedTuple):
    """Why the run ends after this iteration: its status and the run.log line that says so (None: no line)."""

    status: str  # "stopped" or "finished"
    line: str | None


@dataclass
class Context:
    """The run as the callbacks see it. They read it; the fields after `start` are the few they set."""

    cfg: ExperimentConfig
    run_dir: Path
    log: logging.Logger  # run.log
    console: Console
    title: str  # "ENV_ID:VARIANT sSEED"
    device: torch.device
    summary: dict[str, Any]  # what summary.json holds
    agent: Any
    envs: Any  # the training envs
    eval_envs: Any
    spec: envs_lib.EnvInfo
    progress: Progress  # the loop's counters: global_step, next_eval, next_save, ...
    signal: StopSignal
    resume: ckpt.Checkpoint | None  # the checkpoint a resumed run started from
    start: float = 0.0  # time.perf_counter() at the run's step 0 (a resumed run's clock goes on)
    planned: int = 0  # the env steps the run will have taken at its end: whole iterations (train.total_timesteps
    # where their size is not known before they run)
    row: dict[str, Any] | None = None  # the latest iteration's metrics
    lockstep: distributed.Lockstep | None = None  # InLockstep: the exchange with the run's other processes
    monitors: Monitors | None = None  # MonitorAlerts: their state goes into checkpoints
    wandb: WandbSink | None = None  # Sinks: the evaluation videos go there too
    improved: bool = False  # Evaluation: this iteration's evaluation set a new best return
    ending: Ending | None = None  # the stop conditions: the run ends after this iteration
    saved_at: int | None = None  # Checkpoints: the step of the latest checkpoint this process saved
    exits: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # closed however the run ends

    @property
    def step(self) -> int:
        """Env steps so far (all envs, all processes)."""
        return self.progress.global_step

    def stop(self, reason: str) -> None:
        """From `on_iteration`: end the run after this iteration, as a stop signal does (a checkpoint, status
        `stopped`, a line in run.log with `reason`; `rlfoundry train --resume` continues it). An iteration that
        finishes the run, is solved or got a signal ends for that reason instead."""
        self.end("stopped", f"stopped at step {self.step} by a callback: {reason}; checkpoint saved")

    def end(self, status: str, line: str | None) -> None:
        """The first reason given this iteration is the one the run ends with."""
        if self.ending is None:
            self.ending = Ending(status, line)


class Callback:
    """A hook into the trainer's loop: override the events you need (the module's docstring lists them).

    A user's callback goes to `rlfoundry.train(..., callbacks=[...])`; it reads `ctx` and the rows, and
    `ctx.stop(reason)` in `on_iteration` ends the run after that iteration. It must not change the row or the run's
    state: the run's metrics and checkpoints stay those of the same run without it."""

    def on_start(self, ctx: Context) -> None:
        pass

    def around_iteration(self, ctx: Context) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def on_result(self, ctx: Context, result: Iteration) -> Iteration:
        return result

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        pass

    def on_end(self, ctx: Context) -> None:
        pass


# ---------------------------------------------------------------------------------------------------------- rows


class Evaluation(Callback):
    """Every eval.every_steps (after eval.warmup_steps) and at the end: the evaluation's columns join the row."""

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        cfg, p = ctx.cfg, ctx.progress
        ctx.improved = False
        if p.global_step >= p.next_eval or (p.global_step >= cfg.train.total_timesteps and cfg.eval.at_end):
            best_before = ctx.summary["best_eval_return"]
            row.update(self.evaluate(ctx))  # EvaluationStopped: the trainer saves the run as it was before
            ctx.improved = best_before is None or row["eval/return_mean"] > best_before
            while p.next_eval <= p.global_step:
                p.next_eval += cfg.eval.every_steps

    def evaluate(self, ctx: Context) -> dict[str, float]:
        """The evaluation's row entries. It draws its random numbers (sampled actions, latent states, plans) from a
        state of its own, seeded alike at every evaluation and put back after: training draws the same numbers
        however often and however long it evaluates, and a checkpoint taken when a stop signal ends it
        (EvaluationStopped; ranks in lockstep all iterate after a resume, so there a signal waits for the end)
        resumes into the same evaluation."""
        tick = time.perf_counter()
        envs_lib.copy_obs_stats(ctx.envs, ctx.eval_envs)
        cfg, step, summary = ctx.cfg, ctx.step, ctx.summary
        seed = cfg.train.seed + cfg.eval.seed_offset
        ctx.log.info("evaluating at step %d: %d episodes", step, cfg.eval.episodes)
        stop = (lambda: ctx.signal.name is not None) if ctx.lockstep is None else None
        with own_random_state(seed):
            returns, lengths = evaluate(ctx.agent, ctx.eval_envs, cfg.eval.episodes, seed, cfg.eval.deterministic,
                                        stop)
        mean, std = float(np.mean(returns)), float(np.std(returns))
        best = summary["best_eval_return"]
        best = mean if best is None else max(best, mean)
        summary.update(eval_return_mean=mean, eval_return_std=std, best_eval_return=best)
        threshold = cfg.threshold
        if threshold is not None and mean >= threshold and summary["solved_at_step"] is None:
            summary["solved_at_step"] = step
        ctx.log.info("eval at step %d: return %.2f ± %.2f over %d episodes", step, mean, std, len(returns))
        if cfg.eval.video:
            with own_random_state(seed):
                video = record_video(ctx.agent, cfg.env, envs_lib.obs_stats(ctx.envs),
                                     ctx.run_dir / "videos" / f"eval_step{step}.mp4", seed, cfg.eval.deterministic)
            ctx.log.info("video of an evaluation episode (return %.2f): %s", video["return"], video["path"])
            if ctx.wandb is not None:
                ctx.wandb.video(step, video["path"])
        return {"eval/return_mean": mean, "eval/return_std": std, "eval/length_mean": float(np.mean(lengths)),
                "eval/best_return": best, "time/eval": time.perf_counter() - tick}


class MonitorAlerts(Callback):
    """logging.monitors: the row's metrics judged against their bounds; the row's `monitor/alerts` cell. An alert
    that starts is one warning, on the console and in run.log; one that ends is a line in run.log."""

    def on_start(self, ctx: Context) -> None:
        self.monitors = ctx.monitors = Monitors(ctx.cfg.logging.monitors, ctx.cfg.algo.name, ctx.spec.discrete)
        if ctx.resume is not None:
            self.monitors.load_state_dict(ctx.resume.state.get("monitors"))

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        row[ALERTS], lines = self.monitors.observe(ctx.step, row)
        for level, line in lines:
            if level == "warning":
                ctx.log.warning(line)
                ctx.console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)
            else:
                ctx.log.info(line)

    def on_end(self, ctx: Context) -> None:
        for key in self.monitors.never_seen():
            if key in ctx.cfg.logging.monitors.metrics:  # asked for in the config, but this run does not log it
                ctx.log.warning("monitor: no iteration reported %s, so its monitor watched nothing", key)


class Sinks(Callback):
    """The rows to metrics.csv, TensorBoard, W&B and the console (one per `every` env steps, each evaluation and the
    end: `rows.RowWindow`), and summary.json after an evaluation. The trainer closes the sinks (`sinks`, its list)
    once the run's end is recorded."""

    def __init__(self, sinks: list, every: int):
        self.sinks, self.every = sinks, every

    def on_start(self, ctx: Context) -> None:
        cfg = ctx.cfg
        self.window = RowWindow(self.every, ctx.step, ctx.progress.window)
        ctx.progress.window = self.window.state  # (so checkpoints carry it)
        resume_step = None if ctx.resume is None else ctx.step
        if cfg.logging.csv:
            self.sinks.append(CSVSink(ctx.run_dir / "metrics.csv", resume_step))
        if cfg.logging.tensorboard:
            self.sinks.append(TensorBoardSink(ctx.run_dir, resume_step))
        if cfg.logging.wandb:
            ctx.wandb = WandbSink(ctx.run_dir, cfg.logging, ctx.title, cfg.model_dump(mode="json", by_alias=True),
                                  ctx.summary, resume_step)
            self.sinks.append(ctx.wandb)
            ctx.log.info("%s", ctx.wandb.describe())
            ctx.console.print(escape(ctx.wandb.describe()), highlight=False)
        self.sinks.append(ConsoleSink(ctx.console, ctx.title, ctx.planned, cfg.logging.progress))

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        p = ctx.progress
        p.wall_time = time.perf_counter() - ctx.start
        recent = float(np.mean(p.recent)) if len(p.recent) else None
        ctx.summary.update(total_steps=p.global_step, train_return_mean=recent, wall_time_s=p.wall_time)
        self._write(ctx, self.window.add(p.global_step, row, final=p.global_step >= ctx.cfg.train.total_timesteps))
        if row.get("eval/return_mean") is not None:
            write_json(ctx.run_dir / "summary.json", ctx.summary)

    def on_end(self, ctx: Context) -> None:
        if ctx.ending is not None and ctx.ending.status == "finished":  # (a stopped run's checkpoint holds them)
            self._write(ctx, self.window.pending())

    def _write(self, ctx: Context, row: dict[str, Any] | None) -> None:
        if row is not None:
            for sink in self.sinks:
                sink.write(ctx.progress.global_step, row)


# ----------------------------------------------------------------------------------------------- stop conditions


class StopSignal(Callback):
    """SIGINT and SIGTERM end the run after the current iteration (a checkpoint, status `stopped`); one that comes
    during an evaluation ends it there (`Evaluation`). A second Ctrl-C interrupts at once. The trainer installs the
    handlers (`install`, `uninstall`) for the whole run, its end's records included."""

    def __init__(self, console: Console):
        self.console = console
        self.name: str | None = None  # the signal received (or another rank's, `InLockstep`)
        self.previous: dict = {}  # the handlers SIGINT and SIGTERM had before

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # Python allows handlers only there
            self.previous = {sig: signal.signal(sig, self._received) for sig in (signal.SIGINT, signal.SIGTERM)}

    def uninstall(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def _received(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.name = name
        self.console.print(f"[yellow]{name}: stopping after this iteration and saving a checkpoint[/]")

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        if self.name is not None:
            ctx.end("stopped", f"stopped by {self.name} at step {ctx.step}; checkpoint saved")


class Solved(Callback):
    """eval.stop_at_threshold: the run ends once an evaluation reached the task's solved threshold. (A run that a stop
    signal ended on the iteration it was solved at resumes, and ends after one iteration more.)"""

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        summary = ctx.summary
        if ctx.ending is None and summary["solved_at_step"] is not None:
            ctx.end("finished", f"solved: evaluation return {summary['best_eval_return']:.2f} ≥ "
                                f"{ctx.cfg.threshold:.2f} at step {summary['solved_at_step']}")


class Finished(Callback):
    """The run ends once it took train.total_timesteps steps."""

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        if ctx.step >= ctx.cfg.train.total_timesteps:
            ctx.end("finished", None)


class StopAtStep(Callback):
    """`stop_at_step`: the run stops after the iteration that reaches this step, while its schedules still run over
    train.total_timesteps (`rlfoundry runs verify --steps`)."""

    def __init__(self, step: int):
        self.step = step

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        if ctx.step >= self.step:
            ctx.end("stopped", f"stopped at step {ctx.step}, as asked (stop at step {self.step}); checkpoint saved")


# ------------------------------------------------------------------------------------------- checkpoints, ranks


class Checkpoints(Callback):
    """A checkpoint every checkpoint.every_steps, at a new best evaluation (checkpoint.save_best) and after the last
    iteration. Across processes it is also where rank 0 tells the others the step, whether to save and whether
    to stop (`distributed.Decision`), and where they send their part of a checkpoint."""

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        cfg, p = ctx.cfg, ctx.progress
        last = ctx.ending is not None
        best = ctx.improved and cfg.checkpoint.save_best
        save = last or p.global_step >= p.next_save or best
        if ctx.lockstep is not None:
            ctx.lockstep.decide(distributed.Decision(p.global_step, save, last))
        if save:
            while p.next_save <= p.global_step:
                p.next_save += cfg.checkpoint.every_steps
            self.save(ctx, row["eval/return_mean"] if best else None)

    def save(self, ctx: Context, best_return: float | None) -> None:
        """Everything a resumed run needs to continue as if never stopped (across processes: every rank's part)."""
        agent, train_envs, lockstep = ctx.agent, ctx.envs, ctx.lockstep
        others = lockstep.gather(None, agent.synced_parameters()) if lockstep is not None else []
        weights, agent_arrays, rest = ckpt.split_agent_state(agent.state_dict())
        for name, tensor in weights.items():  # never checkpoint a diverged state: the last good one stays last
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise FloatingPointError(f"parameter {name} is not finite at step {ctx.step}: training diverged")
        rngs, rng_arrays, rest["torch_rng"] = rng_state()
        env_state, arrays, why = (None, {}, agent.envs_elsewhere) if agent.envs_elsewhere else envs_state.capture(train_envs)
        arrays.update(agent_arrays)
        arrays.update(rng_arrays)
        state = {
            "summary": ctx.summary,
            "progress": ctx.progress.to_json(),
            **rngs,
            "envs": env_state,
            "envs_not_captured": why,
            "monitors": None if ctx.monitors is None else ctx.monitors.state_dict(),
        }
        if lockstep is not None:
            state["ranks"], rank_arrays = distributed.checkpoint_ranks(others)
            arrays.update(rank_arrays)
        stats = envs_lib.obs_stats(train_envs)
        if stats is not None:  # evaluation and play need the observation statistics the policy was trained on
            arrays["obs_rms_mean"], arrays["obs_rms_var"], state["obs_rms_count"] = stats
        checkpoint = ckpt.Checkpoint(weights=weights, agent=rest, arrays=arrays, state=state)
        path = ckpt.save(ctx.run_dir / "checkpoints", ctx.step, checkpoint, ctx.cfg.checkpoint.keep_last, best_return)
        ctx.log.info("checkpoint at step %d: %s%s", ctx.step, path.name, " (best)" if best_return is not None else "")
        ctx.saved_at = ctx.step


class InLockstep(Callback):
    """A run across processes (`rlfoundry.run.distributed`), at rank 0: the other ranks get the run at the start;
    every iteration, the ranks' normalisation statistics are merged, and their steps, episodes and any stop
    signal gathered here (`Checkpoints` does the rest of the exchange)."""

    def __init__(self, group: distributed.Group, run_cfg: ExperimentConfig):
        self.group, self.run_cfg = group, run_cfg

    def on_start(self, ctx: Context) -> None:
        """Send ranks 1 … N-1 the run: its resolved config, the agent (rank 0's initial or restored parameters), the
        step, and on resume each rank's own saved state."""
        states = None
        if ctx.resume is not None:
            states = distributed.saved_ranks(ctx.resume.state, ctx.resume.arrays, self.group.world)
        shared = {key: value for key, value in ctx.agent.state_dict().items() if key != distributed.PER_PROCESS}
        setup = {"cfg": self.run_cfg, "vectorization": ctx.spec.vectorization, "step": ctx.step,
                 "agent": distributed.detached(shared), "obs_stats": envs_lib.obs_stats(ctx.envs)}
        distributed.share_setup(self.group, setup, states)
        self.lockstep = ctx.lockstep = distributed.Lockstep(self.group, distributed.running_statistics(ctx.envs))

    def on_result(self, ctx: Context, result: Iteration) -> Iteration:
        result, signalled = self.lockstep.report(result, ctx.signal.name)
        ctx.signal.name = ctx.signal.name or signalled
        return result


# ------------------------------------------------------------------------------------------------ debug, profile


class Profiling(Callback):
    """train.profile: a window of iterations under torch.profiler (`rlfoundry.run.profiling`)."""

    def on_start(self, ctx: Context) -> None:
        self.profiler = IterationProfiler(ctx.run_dir, ctx.device, ctx.title, ctx.log)
        ctx.exits.callback(lambda: self.profiler.close(ctx.step))  # a run that ends while recording writes it

    def around_iteration(self, ctx: Context) -> contextlib.AbstractContextManager:
        return self.profiler.iteration()

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        self.profiler.after(ctx.step, row)


class DebugChecks(Callback):
    """train.debug (`rlfoundry.run.debug`): the parameter shapes; the checks and anomaly detection for the whole
    loop; each row with the per-layer norms; a line per iteration."""

    def on_start(self, ctx: Context) -> None:
        for line in debug.describe_shapes(ctx.spec, ckpt.split_agent_state(ctx.agent.state_dict())[0]):
            ctx.log.debug(line)
        self.checks = ctx.exits.enter_context(debug_checks())
        ctx.exits.enter_context(torch.autograd.set_detect_anomaly(True, check_nan=True))

    def on_result(self, ctx: Context, result: Iteration) -> Iteration:
        return result._replace(metrics={**result.metrics, **self.checks.norms})

    def on_iteration(self, ctx: Context, row: dict[str, Any]) -> None:
        ctx.log.debug("%s", debug.iteration_line(ctx.step, row))
