"""The interface the trainer drives. Every algorithm is one `Agent` subclass in its own file."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium.vector import VectorEnv


class Iteration(NamedTuple):
    """What one `iterate` call reports to the trainer."""

    steps: int  # env steps taken (all envs)
    metrics: dict[str, float]  # loss/*, diag/*, time/* ...
    episode_returns: list[float]  # episodes that ended during this iteration (true, unnormalised)
    episode_lengths: list[int]


class Agent:
    """One iteration = collect some experience, then learn from it."""

    def iterate(self, envs: VectorEnv, progress: float) -> Iteration:
        """`progress` is the fraction of training done (0 → 1), for schedules."""
        raise NotImplementedError

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations, as the env takes them."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        raise NotImplementedError


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """The mixed-precision context for `train.precision`: a no-op for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
