"""`train()`: the one public path into the trainer; the CLI's `rlfoundry train` and `rlfoundry.train` call it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlfoundry.config.errors import ConfigError
from rlfoundry.run.checkpoint import load, resolve
from rlfoundry.run.debug import debug_config
from rlfoundry.run.restore import resumable_run, run_config
from rlfoundry.run.rundir import new_run_dir
from rlfoundry.run.trainer import Trainer
from rlfoundry.spec.load import load_config
from rlfoundry.spec.schema import ExperimentConfig


def train(spec_or_cfg=None, overrides: list[str] | None = None, run_dir: str | Path | None = None,
          console=None, resume: str | Path | None = None, debug: bool = False) -> tuple[Path, dict[str, Any]]:
    """Train from a SPEC (`ENV_ID:VARIANT` or a YAML path) or an `ExperimentConfig`; or, with `resume`
    (a run directory, or `@last` for the newest run under ./runs), continue a stopped run from its last
    checkpoint with its own config.

    `debug`: the debug run (`rlfoundry.run.debug`): checks, a profile, and a small budget unless the overrides
    set train.total_timesteps.

    Returns the run directory and its summary. The CLI's `rlfoundry train` calls exactly this.
    Raises `ConfigError` for bad input (nothing created) and `RunFailed` for failures at run time.
    """
    if resume is not None:
        if spec_or_cfg is not None or overrides or run_dir is not None:
            raise ConfigError("--resume continues a run with its own config.yaml: give no SPEC, overrides or --run-dir")
        if debug:
            raise ConfigError("--debug starts a new run; it cannot be combined with --resume")
        path = resumable_run(resume)
        cfg = run_config(path)
        checkpoint = load(resolve(path, "last"))  # a corrupt or foreign checkpoint is bad input: exit 2, nothing touched
        return path, Trainer(cfg, path, console, resume=checkpoint).run()
    if spec_or_cfg is None:
        raise ConfigError("nothing to train: give a SPEC (ENV_ID:VARIANT or an experiment YAML) or --resume RUN_DIR")
    if isinstance(spec_or_cfg, ExperimentConfig):
        cfg = spec_or_cfg
    else:
        cfg = load_config(str(spec_or_cfg), overrides)
    if debug:
        budget_given = any(item.partition("=")[0].strip() == "train.total_timesteps" for item in overrides or [])
        cfg = debug_config(cfg, budget_given)
    path = new_run_dir(cfg.logging.runs_root, cfg.env.id, cfg.variant, cfg.train.seed,
                       None if run_dir is None else str(run_dir))
    trainer = Trainer(cfg, path, console)
    return path, trainer.run()
