"""Throughput measurements behind `rlfoundry bench`: raw vector-env steps/s and training steps/s.

Both build exactly what training builds (the preset's env settings, the same `envs.make`), so the
figures say what a run of that spec will see on this machine.
"""

from __future__ import annotations

import csv
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def bench_env(env_id: str, num_envs: int | None, steps: int, seed: int = 0, overrides: list[str] | None = None) -> dict[str, Any]:
    """Step the vector env of `env_id` (its preset's env settings, else the defaults) with uniformly random
    actions; `steps` counts vector steps. Returns env steps/s over all envs, after a short warm-up."""
    from rlfoundry.config.load import load_config
    from rlfoundry.envs import make

    env_cfg = load_config(env_id, overrides).env
    if num_envs:  # not an override: the preset's algorithm settings may not fit another env count
        env_cfg = env_cfg.model_copy(update={"num_envs": num_envs})
    envs, spec = make(env_cfg)
    try:
        envs.reset(seed=seed)
        envs.action_space.seed(seed)
        # Sampling the batched action space costs Python time per step; draw all actions up front.
        actions = [envs.action_space.sample() for _ in range(min(steps, 1000))]
        for t in range(min(steps // 10, 100)):  # warm-up: worker start, first resets
            envs.step(actions[t % len(actions)])
        start = time.perf_counter()
        for t in range(steps):
            envs.step(actions[t % len(actions)])
        seconds = time.perf_counter() - start
    finally:
        envs.close()
    return {
        "env_id": env_id, "num_envs": spec.num_envs, "vectorization": spec.vectorization,
        "obs_shape": spec.obs_shape, "obs_dtype": str(spec.obs_dtype), "vector_steps": steps,
        "seconds": seconds, "sps": steps * spec.num_envs / seconds,
    }


def bench_train(spec: str, overrides: list[str] | None, steps: int, seed: int = 1) -> dict[str, Any]:
    """Train `spec` for `steps` env steps without evaluation or logging extras, in a throw-away run
    directory; returns steps/s and where the time went (env, act, learn)."""
    import rlfoundry
    from rich.console import Console

    from rlfoundry.config.load import load_config

    with tempfile.TemporaryDirectory(prefix="rlfoundry_bench_") as tmp:
        extra = list(overrides or []) + [
            f"train.total_timesteps={steps}", f"train.seed={seed}", f"logging.runs_root={tmp}",
            "logging.progress=false", "logging.tensorboard=false",
            "eval.every_steps=0", "eval.at_end=false", "eval.stop_at_threshold=false",
        ]
        cfg = load_config(spec, extra)
        path, summary = rlfoundry.train(cfg, run_dir=Path(tmp) / "run", console=Console(quiet=True))
        with open(path / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    parts = {key: sum(float(row[f"time/{key}"] or 0) for row in rows) for key in ("env", "act", "learn")}
    return {
        "spec": spec, "steps": summary["total_steps"], "seconds": summary["wall_time_s"], "sps": summary["sps"],
        "num_envs": cfg.env.num_envs, "torch_threads": torch.get_num_threads(),
        **{f"share_{key}": value / summary["wall_time_s"] for key, value in parts.items()},
    }
