"""Deterministic evaluation on separate envs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gymnasium.vector import VectorEnv

from rlfoundry.algos.base import Memory
from rlfoundry.envs import env_seed


class EvaluationStopped(Exception):
    """`stop()` said so during the evaluation (a stop signal): its episodes so far are dropped."""


def evaluate(agent, envs: VectorEnv, episodes: int, seed: int, deterministic: bool = True,
             stop: Callable[[], bool] | None = None) -> tuple[list[float], list[int]]:
    """Run exactly `episodes` episodes, spread evenly over the sub-envs, and return their returns and lengths.

    Each sub-env runs a fixed quota, so short episodes are not over-represented. The envs are reset
    with the same seed every time: successive evaluations see the same start states. `stop` is asked before every
    step; when it says so, EvaluationStopped ends the evaluation there.
    """
    num_envs = envs.num_envs
    quota = np.full(num_envs, episodes // num_envs)
    quota[: episodes % num_envs] += 1
    done_count = np.zeros(num_envs, dtype=int)
    returns: list[float] = []
    lengths: list[int] = []
    obs, _ = envs.reset(seed=env_seed(seed))
    memory = Memory()
    while (done_count < quota).any():
        if stop is not None and stop():
            raise EvaluationStopped
        obs, _, terminated, truncated, info = envs.step(agent.predict(obs, deterministic, memory))
        memory.ended(terminated | truncated)
        if "_episode" in info:
            for i in np.flatnonzero(info["_episode"]):
                if done_count[i] < quota[i]:
                    done_count[i] += 1
                    returns.append(float(info["episode"]["r"][i]))
                    lengths.append(int(info["episode"]["l"][i]))
    return returns, lengths
