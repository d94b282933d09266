"""`train.debug` (`rlfoundry train SPEC --debug`): the quick run to make when something looks wrong.

    budget     a few iterations (after `learning_starts`, where the algorithm has one) unless a budget is given
    checks     autograd anomaly detection; observations, rewards and actions finite at every env step
               (`envs.wrappers.FiniteCheck`); each loss term and every parameter's gradient finite at every update
               (`algos.optim.debug_checks`): the first NaN or inf stops the run, named with its step
    metrics    per-layer gradient and weight norms (`debug/grad_norm/<layer>`, `debug/weight_norm/<layer>`)
    verbose    spaces, parameter shapes, and a line per iteration (steps, timings, losses) on the console and in run.log
    profile    a few updates under torch.profiler (`train.profile`)

Separately, any run started under a debugger (a trace function set, as pdb, debugpy and IDEs do) steps its envs in
this process, so breakpoints in env code are hit: async vectorization becomes sync, async SAC actors run inline.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from rlfoundry.envs import family_vectorization
from rlfoundry.experiment.schema import ExperimentConfig

ITERATIONS = 10  # iterations in a debug run's default budget, after any learning_starts


def debug_config(cfg: ExperimentConfig, budget_given: bool) -> ExperimentConfig:
    """`cfg` in debug mode: debug checks and a profile on, and, unless `budget_given`, a budget of ITERATIONS
    iterations (plus the algorithm's learning_starts), never more than the configured one."""
    train: dict[str, Any] = {"debug": True, "profile": True}
    if not budget_given:
        algo = cfg.algo
        # env steps per iteration: on-policy rollouts of num_steps, off-policy iterations of train_freq, per env
        per_env: int = getattr(algo, "num_steps", 0) or getattr(algo, "train_freq", 1)
        budget = getattr(algo, "learning_starts", 0) + ITERATIONS * per_env * cfg.env.num_envs
        train["total_timesteps"] = min(cfg.train.total_timesteps, budget)
    return cfg.model_copy(update={"train": cfg.train.model_copy(update=train)})


def under_debugger() -> bool:
    return sys.gettrace() is not None


def in_process(cfg: ExperimentConfig) -> tuple[ExperimentConfig, str | None]:
    """Under a debugger: `cfg` with its envs stepped in this process, and a line saying what changed (else None)."""
    if not under_debugger():
        return cfg, None
    changes: list[str] = []
    update: dict[str, Any] = {}
    # a family's own choice stays: Retro's one emulator per process, Brax's batched env (already in this process)
    if cfg.env.vectorization in ("auto", "async") and family_vectorization(cfg.env.id) is None:
        update["env"] = cfg.env.model_copy(update={"vectorization": "sync"})
        changes.append(f"env.vectorization {cfg.env.vectorization} -> sync")
    actors = getattr(cfg.algo, "async_actors", 0)  # only some algorithms' sections have it
    if actors:
        update["algo"] = cfg.algo.model_copy(update={"async_actors": 0})
        changes.append(f"algo.async_actors {actors} -> 0")
    if not changes:
        return cfg, None
    return cfg.model_copy(update=update), "under a debugger, the envs step in this process: " + ", ".join(changes)


class ConsoleEcho(logging.Handler):
    """Echoes a run's log lines on its console (debug mode), above a live progress display."""

    def __init__(self, console: Console):
        super().__init__(logging.DEBUG)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(f"[dim]{record.levelname.lower()}:[/] {escape(record.getMessage())}", highlight=False)


def describe_shapes(spec, weights: dict) -> list[str]:
    """Lines naming the spaces and every network parameter's shape."""
    lines = [f"observation space {spec.observation_space} (fed as {spec.obs_dtype}), action space "
             f"{spec.action_space}, {spec.num_envs} envs ({spec.vectorization})"]
    total = sum(tensor.numel() for tensor in weights.values())
    lines.append(f"{len(weights)} parameter tensors, {total:,} values:")
    lines += [f"  {name} {tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"
              for name, tensor in weights.items()]
    return lines


def iteration_line(step: int, row: dict) -> str:
    """One line per iteration: the step, the time split and the losses."""
    times = ", ".join(f"{key.removeprefix('time/')} {row[key] * 1e3:.1f} ms" for key in row
                      if key.startswith("time/") and row[key] is not None)
    losses = ", ".join(f"{key} {row[key]:.4g}" for key in row if key.startswith("loss/"))
    return f"step {step:,}: {row['sps']:.0f} steps/s; {times}" + (f"; {losses}" if losses else "")
