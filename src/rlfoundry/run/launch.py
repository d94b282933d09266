"""`train()`: the one public path into the trainer; the CLI's `rlfoundry train` and `rlfoundry.train` call it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import apply_overrides, load_config, validate
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.records.rundir import new_run_dir, run_lock, write_yaml
from rlfoundry.run import distributed, weights
from rlfoundry.run.checkpoint import load, resolve
from rlfoundry.run.debug import debug_config
from rlfoundry.run.hooks import Callback
from rlfoundry.run.restore import resumable_run, run_config
from rlfoundry.run.trainer import Trainer
from rlfoundry.sinks.wandb import import_wandb, sweep_overrides


def train(spec_or_cfg=None, overrides: list[str] | None = None, run_dir: str | Path | None = None,
          console=None, resume: str | Path | None = None, debug: bool = False,
          nproc: int | None = None, stop_at_step: int | None = None,
          callbacks: Sequence[Callback] = (), total_timesteps: int | None = None) -> tuple[Path | None, dict[str, Any]]:
    """Train from a SPEC (`ENV_ID:VARIANT` or a YAML path) or an `ExperimentConfig`; or, with `resume`
    (a run directory, or `@last` for the newest run under ./runs), continue a stopped run from its last
    checkpoint with its own config.

    `debug`: the debug run (`rlfoundry.run.debug`): checks, a profile, and a small budget unless the overrides
    set train.total_timesteps.

    `nproc`: one run across this many processes of this machine (`rlfoundry.run.distributed`); a resumed run
    runs as many as it started with. Under torchrun the group is torchrun's: rank 0 returns as here, the other
    ranks return (None, {}) once the run ends.

    `stop_at_step`: end the run after the iteration that reaches this step (a checkpoint, status `stopped`), its
    schedules still running over train.total_timesteps: how `rlfoundry runs verify --steps N` re-runs a run's start.

    `callbacks`: `rlfoundry.Callback`s that see every iteration's metrics row and may stop the run
    (`rlfoundry.run.hooks`); they run in this process, rank 0 of a run across processes.

    `total_timesteps`: with `resume`, train the run on to this many env steps, a finished run too (Stable-Baselines3's
    `learn(reset_num_timesteps=False)`): its config.yaml takes the new budget, its schedules stretch over it from
    here on, and its provenance records the extension (`continued`). Without `resume`, train.total_timesteps.

    Returns the run directory and its summary. The CLI's `rlfoundry train` calls exactly this.
    Raises `ConfigError` for bad input (nothing created) and `RunFailed` for failures at run time.
    """
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise ConfigError(f"callbacks: {callback!r} is not a rlfoundry.Callback")
    group = distributed.torchrun_group()
    if nproc is not None and nproc < 1:
        raise ConfigError(f"--nproc {nproc}: must be at least 1")
    if nproc is not None and group is not None and nproc != group.world:
        raise ConfigError(f"--nproc {nproc}: torchrun started {group.world} processes; leave out --nproc under torchrun")
    if group is not None and not group.main:  # everything comes from rank 0
        distributed.join(group)
        try:
            distributed.follow(group)
        finally:
            distributed.leave()
        return None, {}
    if resume is not None:
        if spec_or_cfg is not None or overrides or run_dir is not None:
            raise ConfigError("--resume continues a run with its own config.yaml: give no SPEC, overrides or --run-dir")
        if debug:
            raise ConfigError("--debug starts a new run; it cannot be combined with --resume")
        return _resume(resume, console, group, nproc, stop_at_step, callbacks, total_timesteps)
    if spec_or_cfg is None:
        raise ConfigError("nothing to train: give a SPEC (ENV_ID:VARIANT or an experiment YAML) or --resume RUN_DIR")
    if total_timesteps is not None:
        overrides = [*(overrides or []), f"train.total_timesteps={total_timesteps}"]
    cfg = _with_sweep(spec_or_cfg, overrides)
    if cfg.logging.wandb:
        import_wandb()
    if debug:
        budget_given = any(item.partition("=")[0].strip() == "train.total_timesteps" for item in overrides or [])
        cfg = debug_config(cfg, budget_given)
    world = group.world if group else nproc or 1
    distributed.check(cfg, world)
    cfg, init = _init(cfg)
    path = new_run_dir(cfg.logging.runs_root, cfg.env.id, cfg.variant, cfg.train.seed,
                       None if run_dir is None else str(run_dir))
    with run_lock(path):  # held from the run's first write to its end (the directory is created here)
        return path, _run(cfg, path, console, None, group, world, stop_at_step, callbacks, init)


def _init(cfg: ExperimentConfig) -> tuple[ExperimentConfig, weights.Saved | None]:
    """The networks `train.init` names, read before anything is created (a bad name or file: ConfigError), and the
    config with the name pinned: an absolute path and the checkpoint's step directory, or the Hub commit, so that
    config.yaml says exactly what the run started from even after `@last` or `best` has moved on."""
    spec = cfg.train.init
    if spec is None:
        return cfg, None
    where = f"train.init {spec}"
    try:
        path = weights.local_path(spec, cfg.logging.runs_root)
    except ConfigError as exc:
        raise ConfigError(f"train.init: {exc}") from None
    saved = weights.read(path, cfg.train.init_checkpoint, where)
    train = cfg.train.model_copy(update={"init": weights.pinned(spec, path), "init_checkpoint": saved.step_dir})
    return cfg.model_copy(update={"train": train}), saved


def _resume(resume: str | Path, console, group, nproc: int | None, stop_at_step: int | None,
            callbacks: Sequence[Callback], total_timesteps: int | None) -> tuple[Path, dict[str, Any]]:
    """`train(resume=...)`: the run continued from its last checkpoint (see `train`)."""
    path = resumable_run(resume, finished_ok=total_timesteps is not None)
    with run_lock(path):  # a run still writing (checkpointing after SIGTERM, say) is not resumed beside it
        cfg = run_config(path)
        if cfg.logging.wandb:
            import_wandb()  # not installed: bad input, before anything is touched
        checkpoint = load(resolve(path, "last"))  # a corrupt or foreign checkpoint: exit 2, nothing touched
        started = (cfg.provenance.processes if cfg.provenance else None) or 1
        world = group.world if group else nproc or started
        if world != started:
            raise ConfigError(f"--resume {resume}: this run was trained with {started} process(es); "
                              f"resume it with as many (--nproc {started})")
        if total_timesteps is not None:
            cfg = continued(cfg, int(checkpoint.state["step"]), total_timesteps)
            write_yaml(path / "config.yaml", cfg.model_dump(mode="json", by_alias=True))
        return path, _run(cfg, path, console, checkpoint, group, world, stop_at_step, callbacks)


def continued(cfg: ExperimentConfig, step: int, total: int) -> ExperimentConfig:
    """The config of a run continued from `step` to `total` env steps, the extension recorded in its provenance."""
    if total <= step:
        raise ConfigError(f"--total-timesteps {total:,}: the run has trained {step:,} steps already; give more to "
                          "continue it")
    record = {"at_step": step, "from_total": cfg.train.total_timesteps, "to_total": total,
              "time": datetime.now(UTC).isoformat(timespec="seconds")}
    provenance = cfg.provenance.model_copy(update={"continued": [*cfg.provenance.continued, record]}) \
        if cfg.provenance is not None else None
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"total_timesteps": total}),
                                  "provenance": provenance})


def _with_sweep(spec_or_cfg, overrides: list[str] | None) -> ExperimentConfig:
    """The config to train: SPEC or the given config with the overrides; under a W&B sweep agent, with the sweep's
    parameters for this run merged last (`rlfoundry.sinks.wandb.sweep_overrides`) and validated as overrides are."""
    sweep = sweep_overrides()
    try:
        if not isinstance(spec_or_cfg, ExperimentConfig):
            return load_config(str(spec_or_cfg), [*(overrides or []), *sweep])
        if not overrides and not sweep:
            return spec_or_cfg
        return validate(apply_overrides(spec_or_cfg.model_dump(mode="json", by_alias=True), [*(overrides or []), *sweep]))
    except ConfigError as exc:
        if not sweep:
            raise
        raise ConfigError(f"{exc} (with the parameters of the W&B sweep {os.environ['WANDB_SWEEP_ID']}: "
                          f"{' '.join(sweep[1:])})") from None


def _run(cfg: ExperimentConfig, path: Path, console, checkpoint, group, world: int,
         stop_at_step: int | None, callbacks: Sequence[Callback], init: weights.Saved | None = None) -> dict[str, Any]:
    """Train on this process (rank 0 of `world`): starting the other ranks first for --nproc, joining torchrun's."""
    if world == 1:
        return Trainer(cfg, path, console, resume=checkpoint, stop_at_step=stop_at_step, callbacks=callbacks,
                       init=init).run()
    local: list = []
    ended = False
    try:
        if group is None:  # --nproc: this process is rank 0 of ranks on this machine
            group = distributed.Group(0, world, world)
            local, port = distributed.start_local_ranks(world)
            distributed.join(group, f"tcp://127.0.0.1:{port}")
        else:
            distributed.join(group)
        summary = Trainer(cfg, path, console, resume=checkpoint, group=group, stop_at_step=stop_at_step,
                          callbacks=callbacks, init=init).run()
        ended = True
        return summary
    finally:
        distributed.leave()
        distributed.stop_local_ranks(local, timeout=30.0 if ended else 2.0)  # after a failure, nobody waits
