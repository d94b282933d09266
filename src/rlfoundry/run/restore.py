"""A run directory back: its config, and the run a command names (`@last`, `--resume`)."""

from __future__ import annotations

from pathlib import Path

from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.records.rundir import run_status
from rlfoundry.run import checkpoint as ckpt


def run_config(run_dir: Path) -> ExperimentConfig:
    """The resolved config a run wrote (validated again, so a hand-edited one gets the usual errors)."""
    from rlfoundry.experiment.load import load_config

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no config.yaml)")
    return load_config(str(path))


def run_named(spec: str | Path, runs_root: str | Path, holding: str, described: str, option: str = "") -> Path:
    """The run directory a command's RUN names: a path, or `@last`, the most recently active run directory under
    `runs_root`, at any depth (trials and sweeps keep theirs in folders of their own), by its summary.json's time,
    that holds the file `holding` (ConfigError when none does)."""
    if str(spec) != "@last":
        return Path(spec)
    candidates = [config.parent for config in Path(runs_root).rglob("config.yaml")
                  if (config.parent / holding).is_file()]
    if not candidates:
        raise ConfigError(f"{option}@last: no run with {described} under {runs_root}/")
    return max(candidates, key=lambda p: (p / "summary.json").stat().st_mtime if (p / "summary.json").exists() else 0)


def resumable_run(spec: str | Path, runs_root: str | Path = "runs", finished_ok: bool = False) -> Path:
    """The run directory `--resume` names (`@last`: the most recently active run under `runs_root` that has
    a checkpoint), checked to be resumable: it has a last checkpoint and did not finish (`finished_ok`: or did, and
    is being continued to a larger budget)."""
    run_dir = run_named(spec, runs_root, "checkpoints/last.json", "a checkpoint", "--resume ")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"--resume {spec}: {run_dir} is not a run directory (no config.yaml)")
    ckpt.resolve(run_dir, "last")  # a clear error when there is no checkpoint to resume from
    if run_status(run_dir) == "finished" and not finished_ok:
        raise ConfigError(f"--resume {spec}: the run in {run_dir} finished; there is nothing to continue (add "
                          "--total-timesteps N to train it on to N steps)")
    return run_dir
