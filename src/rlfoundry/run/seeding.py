"""One seed for Python, NumPy and torch, and the device; the envs are seeded at their first reset
(`rlfoundry.envs.env_seed`)."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int, torch_threads: int) -> None:
    # Same seed gives the same numbers only at the same thread count (reductions split differently).
    torch.set_num_threads(torch_threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    from rlfoundry.config.errors import ConfigError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device = 'cuda': no CUDA device is available here; allowed: auto, cpu")
    return torch.device(name)
