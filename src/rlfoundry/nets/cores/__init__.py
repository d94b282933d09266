"""Cores: where memory lives. One interface, so any core serves any algorithm that takes memory:

    initial_state(batch_size) -> state                      # a flat tuple of float tensors, or None
    forward(x[T, B, D], state, episode_starts[T, B], final_state=True) -> (y[T, B, H], new_state)

`episode_starts` resets memory inside a sequence, so replaying stored sequences equals acting step by step. With
`final_state=False` the caller will not read the new state, which a core may then return as None (skipping work). Every
state tensor has the env batch on axis 1 (`s[:, idx]` selects envs) and zeros mean a fresh episode. Each core's
state shapes: docs/guide/memory-cores.md, "The core interface".
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
