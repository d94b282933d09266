"""One seed for Python, NumPy and torch; the envs are seeded at their first reset."""

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


def env_seed(seed: int) -> int:
    """The seed a vector env is reset with; sub-env i then gets env_seed + i (Gymnasium's convention,
    also ale_py's). Hashing the run seed first keeps runs apart: with the run seed used directly, seeds
    1 and 2 of an 8-env run would share 7 of their 8 env streams."""
    return int(np.random.SeedSequence(seed).generate_state(1)[0] >> 1)  # < 2**31: every env family takes it


def resolve_device(name: str) -> torch.device:
    from rlfoundry.config.errors import ConfigError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device = 'cuda': no CUDA device is available here; allowed: auto, cpu")
    return torch.device(name)
