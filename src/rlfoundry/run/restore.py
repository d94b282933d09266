"""A trained agent back from its run directory: config, networks, and observation statistics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from gymnasium.vector import VectorEnv

from rlfoundry import envs as envs_lib
from rlfoundry.config.errors import ConfigError
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run import hardware
from rlfoundry.run.rundir import run_status
from rlfoundry.spec.schema import ExperimentConfig


@dataclass
class Restored:
    cfg: ExperimentConfig
    agent: object  # an rlfoundry.algos Agent
    envs: VectorEnv  # evaluation envs: no reward normalisation, frozen observation statistics
    checkpoint: ckpt.Checkpoint


def run_config(run_dir: Path) -> ExperimentConfig:
    """The resolved config a run wrote (validated again, so a hand-edited one gets the usual errors)."""
    from rlfoundry.spec.load import load_config

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no config.yaml)")
    return load_config(str(path))


def run_named(spec: str | Path, runs_root: str | Path, holding: str, described: str, option: str = "") -> Path:
    """The run directory a command's RUN names: a path, or `@last`, the most recently active run directory under
    `runs_root` (by its summary.json's time) that holds the file `holding` (ConfigError when none does)."""
    if str(spec) != "@last":
        return Path(spec)
    candidates = [path for path in Path(runs_root).glob("*") if (path / holding).is_file()]
    if not candidates:
        raise ConfigError(f"{option}@last: no run with {described} under {runs_root}/")
    return max(candidates, key=lambda p: (p / "summary.json").stat().st_mtime if (p / "summary.json").exists() else 0)


def resumable_run(spec: str | Path, runs_root: str | Path = "runs") -> Path:
    """The run directory `--resume` names (`@last`: the most recently active run under `runs_root` that has
    a checkpoint), checked to be resumable: it has a last checkpoint and did not finish."""
    run_dir = run_named(spec, runs_root, "checkpoints/last.json", "a checkpoint", "--resume ")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"--resume {spec}: {run_dir} is not a run directory (no config.yaml)")
    ckpt.resolve(run_dir, "last")  # a clear error when there is no checkpoint to resume from
    if run_status(run_dir) == "finished":
        raise ConfigError(f"--resume {spec}: the run in {run_dir} finished; there is nothing to continue")
    return run_dir


def load_for_evaluation(run_dir: Path, which: str = "last", num_envs: int | None = None,
                        render_mode: str | None = None, device: str = "cpu") -> Restored:
    """Build evaluation envs and the run's agent with the weights of checkpoint `which` (last, best or a
    step directory). Raises ConfigError / CheckpointError (exit 2) for anything unusable."""
    from rlfoundry.algos import ALGORITHMS

    run_dir = Path(run_dir)
    cfg = run_config(run_dir)
    precision = cfg.train.precision
    if precision == "auto":  # what this machine runs natively, as a new run here would
        precision, _ = hardware.resolve_precision("auto", torch.device(device), cfg.network, hardware.detect())
    # evaluation runs eagerly: compiling would cost more than the few episodes it speeds up
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"precision": precision, "compile": False})})
    path = ckpt.resolve(run_dir, which)
    checkpoint = ckpt.load(path)
    envs, spec = envs_lib.make(cfg.env, num_envs or cfg.env.num_envs, evaluation=True, render_mode=render_mode)
    try:
        agent = ALGORITHMS[cfg.algo.name](cfg, spec, torch.device(device))
        try:
            agent.load_state_dict(ckpt.agent_state(checkpoint))
        except (KeyError, RuntimeError, ValueError) as exc:  # shapes or names that do not fit this config
            raise ckpt.CheckpointError(f"{path}: does not fit the run's network ({exc})") from None
        if "obs_rms_mean" in checkpoint.arrays:
            envs_lib.set_obs_stats(envs, checkpoint.arrays["obs_rms_mean"], checkpoint.arrays["obs_rms_var"],
                                   float(checkpoint.state["obs_rms_count"]))
    except BaseException:
        envs.close()
        raise
    return Restored(cfg, agent, envs, checkpoint)
