"""`rlfoundry bench train`: training steps/s of a spec, and where the time goes (env, act, learn).

It trains exactly what `rlfoundry train` would (the same config, trainer and envs), without evaluation
or TensorBoard, in a throw-away run directory.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from typing import Any

import torch


def bench_train(spec: str, overrides: list[str] | None, steps: int, seed: int = 1) -> dict[str, Any]:
    """Train `spec` for `steps` env steps without evaluation or logging extras, in a throw-away run
    directory; returns steps/s and where the time went (env, act, learn)."""
    from rich.console import Console

    from rlfoundry.experiment.load import load_config
    from rlfoundry.run.launch import train

    with tempfile.TemporaryDirectory(prefix="rlfoundry_bench_") as tmp:
        extra = list(overrides or []) + [
            f"train.total_timesteps={steps}", f"train.seed={seed}", f"logging.runs_root={tmp}",
            "logging.progress=false", "logging.tensorboard=false",
            "eval.every_steps=0", "eval.at_end=false", "eval.stop_at_threshold=false",
        ]
        cfg = load_config(spec, extra)
        path, summary = train(cfg, run_dir=Path(tmp) / "run", console=Console(quiet=True))
        assert path is not None, "a run given its run_dir has one"
        with open(path / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    parts = {key: sum(float(row[f"time/{key}"] or 0) for row in rows) for key in ("env", "act", "learn")}
    return {
        "spec": spec, "steps": summary["total_steps"], "seconds": summary["wall_time_s"], "sps": summary["sps"],
        "num_envs": cfg.env.num_envs, "torch_threads": torch.get_num_threads(),
        **{f"share_{key}": value / summary["wall_time_s"] for key, value in parts.items()},
    }
