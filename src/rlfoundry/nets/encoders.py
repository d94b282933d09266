"""Observation encoders: map a batch of observations [N, *obs_shape] to features [N, H]."""

from __future__ import annotations

import math

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def orthogonal_(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class MLPEncoder(nn.Module):
    """Flatten, then Linear + activation per hidden size."""

    def __init__(self, obs_shape: tuple[int, ...], hidden_sizes: list[int], activation: str, ortho_init: bool):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()] if len(obs_shape) > 1 else []
        width = math.prod(obs_shape)
        for size in hidden_sizes:
            linear = nn.Linear(width, size)
            if ortho_init:
                orthogonal_(linear, math.sqrt(2))
            layers += [linear, ACTIVATIONS[activation]()]
            width = size
        self.net = nn.Sequential(*layers)
        self.out_features = width

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


ENCODERS: dict[str, type[nn.Module]] = {"mlp": MLPEncoder}
