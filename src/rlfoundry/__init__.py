"""rlfoundry: deep reinforcement learning from one config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def train(spec_or_cfg, overrides: list[str] | None = None, run_dir: str | Path | None = None,
          console=None) -> tuple[Path, dict[str, Any]]:
    """Train from a SPEC (`ENV_ID:VARIANT` or a YAML path) or an `ExperimentConfig`.

    Returns the run directory and its summary. The CLI's `rlfoundry train` calls exactly this.
    Raises `ConfigError` for bad input (nothing created) and `RunFailed` for failures at run time.
    """
    from rlfoundry.config.load import load_config
    from rlfoundry.config.schema import ExperimentConfig
    from rlfoundry.run.rundir import new_run_dir
    from rlfoundry.run.trainer import Trainer

    if isinstance(spec_or_cfg, ExperimentConfig):
        cfg = spec_or_cfg
    else:
        cfg = load_config(str(spec_or_cfg), overrides)
    path = new_run_dir(cfg.logging.runs_root, cfg.env.id, cfg.variant, cfg.train.seed,
                       None if run_dir is None else str(run_dir))
    trainer = Trainer(cfg, path, console)
    return path, trainer.run()
