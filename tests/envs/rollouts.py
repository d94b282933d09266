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


def play(env, seed: int = 0, steps: int = 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One single env reset with `seed`, then `steps` random actions (the action space seeded with `seed`), resetting
    at each episode's end: the stacked observations [steps + 1, ...], rewards [steps] and the (terminated, truncated)
    flags [steps, 2]."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    seen, rewards, flags = [obs], [], []
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        seen.append(obs)
        rewards.append(reward)
        flags.append((terminated, truncated))
        if terminated or truncated:
            seen.append(env.reset()[0])
    return np.stack(seen), np.asarray(rewards, dtype=np.float64), np.asarray(flags, dtype=bool)
