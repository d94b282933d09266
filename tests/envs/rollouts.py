"""Random-action rollouts shared by the env-family tests."""

from __future__ import annotations

import numpy as np


def rollout(envs, seed: int = 0, steps: int = 40, action_seed: int | None = None) -> np.ndarray:
    """Reset with `seed`, take `steps` uniformly random actions (seeded with `action_seed`, default `seed`);
    returns the stacked observations [steps + 1, N, ...]."""
    obs, _ = envs.reset(seed=seed)
    envs.action_space.seed(seed if action_seed is None else action_seed)
    seen = [obs]
    for _ in range(steps):
        obs, *_ = envs.step(envs.action_space.sample())
        seen.append(obs)
    return np.stack(seen)
