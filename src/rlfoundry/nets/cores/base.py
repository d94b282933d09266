"""The cores' common base, the feed-forward identity core, the default core settings and the episode-start
helpers every memory core uses (the interface: `rlfoundry.nets.cores`)."""

from __future__ import annotations

import torch
from torch import nn

CORE_SETTINGS: dict[str, int] = {
    "core_hidden": 128,  # hidden / model width of every core
    "core_layers": 1,
    "memory_length": 16,  # TrXL / GTrXL attention window, in steps
    "num_heads": 4,  # TrXL / GTrXL attention heads
    "mamba_state": 16,  # SSM state size N
    "mamba_expand": 2,  # inner width = mamba_expand * core_hidden
    "mamba_conv": 4,  # depthwise causal conv width K
    "mamba2_head_dim": 32,  # Mamba-2 head size P
}


def _starts(episode_starts: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """episode_starts as a [T, B] float tensor of 0/1."""
    if episode_starts is None:
        return x.new_zeros(x.shape[:2])
    return episode_starts.to(x.dtype)


def _last_start(starts: torch.Tensor) -> torch.Tensor:
    """[T, B] index of the latest episode start at or before each step; -1 where none in this call."""
    steps = torch.arange(len(starts), device=starts.device)[:, None].expand_as(starts)
    return torch.where(starts > 0, steps, -1).cummax(0).values


class Core(nn.Module):
    """The cores' common base, for their types: the interface above."""

    out_features: int

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, ...] | None:
        raise NotImplementedError


class IdentityCore(Core):
    """No memory: features pass through unchanged."""

    def __init__(self, in_features: int, cfg=None):
        super().__init__()
        self.out_features = in_features

    def initial_state(self, batch_size: int) -> None:
        return None

    def forward(self, x: torch.Tensor, state: None, episode_starts: torch.Tensor | None,
                final_state: bool = True) -> tuple[torch.Tensor, None]:
        return x, None
