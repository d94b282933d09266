"""Cores: where memory lives. One interface for all of them, so any core serves any algorithm:

    initial_state(batch_size) -> state                      # a flat tuple of tensors, or None
    forward(x[T, B, D], state, episode_starts[T, B]) -> (y[T, B, H], new_state)

`episode_starts` (bool or 0/1 float; None = no starts) resets memory inside a sequence, so training
on stored sequences and acting step by step give the same outputs. The identity core is the
feed-forward case.

State layout: every state tensor has the env batch on axis 1, so `tuple(s[:, idx] for s in state)`
selects envs and a buffer can store each tensor per step. Zero state means "fresh episode".

    lstm    (h [L, B, H], c [L, B, H])                 gru: (h [L, B, H],)
    trxl    (memory [M, B, L, H], length [1, B])         gtrxl: same
    mamba   (conv [K-1, B, L, E], ssm [L, B, E, N])
    mamba2  (conv [K-1, B, L, E + 2N], ssm [L, B, E / P, P, N])

L = core_layers, H = core_hidden, M = memory_length, K = mamba_conv, N = mamba_state,
E = mamba_expand * H, P = mamba2_head_dim. All state tensors are floating point (TrXL's `length`,
the count of memory steps in the current episode, too). Only TrXL memory is stored detached.
"""

from __future__ import annotations

from rlfoundry.nets.cores.base import CORE_SETTINGS, Core, IdentityCore
from rlfoundry.nets.cores.gru import GRUCore
from rlfoundry.nets.cores.lstm import LSTMCore
from rlfoundry.nets.cores.mamba import MambaCore
from rlfoundry.nets.cores.mamba2 import Mamba2Core
from rlfoundry.nets.cores.trxl import GTrXLCore, TrXLCore

CORES: dict[str, type[Core]] = {
    "identity": IdentityCore,
    "lstm": LSTMCore,
    "gru": GRUCore,
    "trxl": TrXLCore,
    "gtrxl": GTrXLCore,
    "mamba": MambaCore,
    "mamba2": Mamba2Core,
}

__all__ = ["CORES", "CORE_SETTINGS", "Core", "GRUCore", "GTrXLCore", "IdentityCore", "LSTMCore", "Mamba2Core", "MambaCore",
           "TrXLCore"]
