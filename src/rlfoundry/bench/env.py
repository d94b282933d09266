"""`rlfoundry bench env`: raw vector-env steps/s with random actions.

It builds exactly what training builds (the preset's env settings, the same `envs.build`), so the
figure says what a run of that spec will see on this machine.
"""

from __future__ import annotations

import time
from typing import Any


def bench_env(env_id: str, num_envs: int | None, steps: int, seed: int = 0, overrides: list[str] | None = None) -> dict[str, Any]:
    """Step the vector env of `env_id` (its preset's env settings, else the defaults) with uniformly random
    actions; `steps` counts vector steps. Returns env steps/s over all envs, after a short warm-up."""
    from rlfoundry.envs import build
    from rlfoundry.experiment.load import load_config

    env_cfg = load_config(env_id, overrides).env
    if num_envs:  # not an override: the preset's algorithm settings may not fit another env count
        env_cfg = env_cfg.model_copy(update={"num_envs": num_envs})
    envs, spec = build(env_cfg)
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
