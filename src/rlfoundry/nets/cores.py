"""Cores: where memory lives. One interface for all of them (DESIGN.md):

    initial_state(batch_size) -> state                      # any pytree of tensors, or None
    forward(x[T, B, D], state, episode_starts[T, B]) -> (y[T, B, H], new_state)

`episode_starts` resets memory inside a sequence, so training on stored sequences and acting step by
step give the same outputs. The identity core is the feed-forward case.
"""

from __future__ import annotations

import torch
from torch import nn


class IdentityCore(nn.Module):
    """No memory: features pass through unchanged."""

    def __init__(self, in_features: int):
        super().__init__()
        self.out_features = in_features

    def initial_state(self, batch_size: int) -> None:
        return None

    def forward(self, x: torch.Tensor, state: None, episode_starts: torch.Tensor | None) -> tuple[torch.Tensor, None]:
        return x, None


CORES: dict[str, type[nn.Module]] = {"identity": IdentityCore}
