"""The layers of the latent world models (DreamerV3 reference code HEAD, `embodied/jax/nets.py`; PlaNet): dense
layers with an optional RMSNorm and activation, block-diagonal linear layers, and their initialisation.

- Initialisation (DreamerV3 `Initializer`, `trunc_normal_in`): weights from a normal truncated to ±2, scaled by
  1.1368 / √fan_in (so their std is 1/√fan_in), times the layer's `outscale` (0 zero-initialises an output: the
  reward and value heads predict exactly 0 at first); biases 0.
- `Dense`: Linear (with bias) → RMSNorm (eps 1e-4, scale only, in fp32) → activation; DreamerV3 uses SiLU, PlaNet
  ReLU and no norm.
- `BlockLinear`: the input split into G equal blocks, each multiplied by its own [in/G, out/G] kernel; its fan-in
  for initialisation is the whole input width (as the reference code computes it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

TRUNC_STD_CORRECTION = 1.1368  # 1 / std of a standard normal truncated to [-2, 2]
ACTIVATIONS = {"silu": F.silu, "relu": F.relu, "none": lambda x: x}


def init_weight_(weight: torch.Tensor, fan_in: int, outscale: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        nn.init.trunc_normal_(weight, 0.0, 1.0, -2.0, 2.0)
        weight.mul_(TRUNC_STD_CORRECTION / fan_in**0.5 * outscale)
    return weight


class RMSNorm(nn.RMSNorm):
    """Scale-only RMSNorm over the last axis, computed in fp32 (DreamerV3 `nets.Norm`, impl rms, eps 1e-4)."""

    def __init__(self, size: int, eps: float = 1e-4):
        super().__init__(size, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).to(x.dtype)


class Dense(nn.Module):
    """Linear → RMSNorm (if `norm`) → activation."""

    def __init__(self, inputs: int, outputs: int, norm: bool = True, act: str = "silu", outscale: float = 1.0):
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)
        init_weight_(self.linear.weight, inputs, outscale)
        nn.init.zeros_(self.linear.bias)
        self.norm = RMSNorm(outputs) if norm else None
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        return self.act(self.norm(x) if self.norm is not None else x)


def mlp(inputs: int, units: int, layers: int, norm: bool = True, act: str = "silu") -> nn.Sequential:
    """`layers` Dense layers of `units` (an empty Sequential for 0 layers: the identity)."""
    return nn.Sequential(*(Dense(inputs if i == 0 else units, units, norm, act) for i in range(layers)))


def output_layer(inputs: int, outputs: int, outscale: float) -> nn.Linear:
    layer = nn.Linear(inputs, outputs)
    init_weight_(layer.weight, inputs, outscale)
    nn.init.zeros_(layer.bias)
    return layer


class BlockLinear(nn.Module):
    """[..., G·i] -> [..., G·o]: block g of the input times its own kernel [i, o], plus a bias of G·o."""

    def __init__(self, inputs: int, outputs: int, groups: int):
        super().__init__()
        if inputs % groups or outputs % groups:
            raise ValueError(f"BlockLinear: {inputs} inputs and {outputs} outputs must both divide into {groups} groups")
        self.groups = groups
        self.weight = nn.Parameter(init_weight_(torch.empty(groups, inputs // groups, outputs // groups), inputs))
        self.bias = nn.Parameter(torch.zeros(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        blocks = x.reshape(-1, self.groups, x.shape[-1] // self.groups).transpose(0, 1)  # [G, N, i]
        out = torch.bmm(blocks, self.weight).transpose(0, 1)  # [N, G, o]
        return out.reshape(*lead, -1) + self.bias
