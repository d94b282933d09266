"""Observation encoders: map a batch of observations [N, *obs_shape] to features [G, N, H].

`G` is the number of trunks (groups) that read the same observation: 1 when policy and value share
a trunk, 2 when each has its own. Every encoder takes `(obs_shape, net_cfg, groups)`.

The MLP evaluates its G trunks as one batched network with a hand-written backward pass. Small
actor-critic MLPs are bound by per-operation cost on the CPU, not by arithmetic: stacking the trunks
halves the operations, and the explicit backward replaces a dozen autograd nodes with one.
`tests/unit/test_encoders.py` checks the backward against autograd (gradcheck, float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from rlfoundry.envs.spaces import packed_parts
from rlfoundry.nets.cnn import CNN_ENCODERS, Encoder


def orthogonal_(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _tanh_(z: torch.Tensor) -> torch.Tensor:
    # tanh(z) = 2·sigmoid(2z) − 1. In the torch 2.13 CPU build tanh is not vectorised: on a 256×128
    # batch it takes 79 µs against 9 µs for sigmoid (AVX-512), and it dominated the PPO update.
    return z.mul_(2).sigmoid_().mul_(2).sub_(1)


# name: (activation applied in place to a fresh pre-activation, the gradient through it, dL/dz from dL/dy,
# written in terms of the activation's *output* y, or None when the output does not determine it).
ACTIVATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor],
                             Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None]] = {
    "tanh": (_tanh_, lambda grad, y: grad * (1 - y.square())),
    # ReLU's own backward kernel: one pass, 22 µs against 156 µs for grad * (y > 0).to(dtype) on a [2, 256, 256]
    # layer of SAC's critics, six of which each SAC gradient step goes back through (bit-identical results)
    "relu": (torch.relu_, lambda grad, y: torch.ops.aten.threshold_backward(grad, y, 0)),
    "elu": (nn.functional.elu_, lambda grad, y: grad * torch.where(y > 0, 1.0, y + 1)),
    "silu": (nn.functional.silu, None),  # runs under autograd, so not in place
}


def _stacked_forward(x: torch.Tensor, weights, biases, activation: str) -> list[torch.Tensor]:
    """Inputs and outputs of every layer: [x as [G, N, D], h1, ..., hL], each [G, N, ·]."""
    act = ACTIVATIONS[activation][0]
    layers = [x.expand(weights[0].shape[0], *x.shape) if weights else x.unsqueeze(0)]
    for weight, bias in zip(weights, biases):
        layers.append(act(torch.baddbmm(bias, layers[-1], weight)))
    return layers


class _StackedMLPFunction(torch.autograd.Function):
    """G MLPs (weights [G, in, out], biases [G, 1, out]) on one input, backward written out."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, activation: str, *params: torch.Tensor) -> torch.Tensor:
        weights, biases = params[: len(params) // 2], params[len(params) // 2 :]
        layers = _stacked_forward(x, weights, biases, activation)
        ctx.activation = activation
        ctx.save_for_backward(*layers, *weights)
        return layers[-1]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        saved = ctx.saved_tensors
        depth = len(saved) // 2
        layers, weights = saved[: depth + 1], saved[depth + 1 :]
        through = ACTIVATIONS[ctx.activation][1]
        assert through is not None  # MLPEncoder.forward runs activations without one under autograd instead
        grad_w: list[torch.Tensor | None] = [None] * depth
        grad_b: list[torch.Tensor | None] = [None] * depth
        grad_x: torch.Tensor | None = None
        needs = ctx.needs_input_grad
        for i in reversed(range(depth)):
            grad = through(grad, layers[i + 1])  # dL/dz
            if needs[2 + i]:  # weights that do not require gradients (SAC's critics judging the actor) get none
                grad_w[i] = torch.bmm(layers[i].transpose(1, 2), grad)
            if needs[2 + depth + i]:
                grad_b[i] = grad.sum(1, keepdim=True)
            if i > 0:
                grad = torch.bmm(grad, weights[i].transpose(1, 2))
            elif needs[0]:  # an input that is itself computed (SAC's critics see the actor's actions)
                grad_x = torch.bmm(grad, weights[0].transpose(1, 2)).sum(0)  # every group read the same x
        return grad_x, None, *grad_w, *grad_b


class MLPEncoder(Encoder):
    """G MLPs over the flattened observation: Linear + activation per hidden size, per group."""

    def __init__(self, obs_shape: tuple[int, ...], net_cfg, groups: int):
        super().__init__()
        self.activation = net_cfg.activation
        sizes = [math.prod(obs_shape), *net_cfg.hidden_sizes]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            weight, bias = torch.empty(groups, fan_in, fan_out), torch.empty(groups, 1, fan_out)
            for g in range(groups):
                if net_cfg.ortho_init:
                    nn.init.orthogonal_(weight[g], math.sqrt(2))
                    nn.init.zeros_(bias[g])
                else:  # nn.Linear's default: U(±1/√fan_in) for weight and bias
                    bound = 1 / math.sqrt(fan_in)
                    nn.init.uniform_(weight[g], -bound, bound)
                    nn.init.uniform_(bias[g], -bound, bound)
            self.weights.append(weight)
            self.biases.append(bias)
        self.groups = groups
        self.out_features = sizes[-1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1)
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()  # bytes (Atari's RAM) to [0, 1], as images
        weights, biases = list(self.weights), list(self.biases)
        # Always fp32, also under bf16 autocast: acting and learning must compute the same function, the
        # hand-written backward is for one dtype, and on networks this small bf16 saves no time.
        with torch.autocast(x.device.type, enabled=False):
            if torch.is_grad_enabled() and weights and ACTIVATIONS[self.activation][1] is not None:
                return _StackedMLPFunction.apply(x, self.activation, *weights, *biases)
            out = _stacked_forward(x, weights, biases, self.activation)[-1]
        return out if weights else out.expand(self.groups, *x.shape)


ENCODERS: dict[str, type[Encoder]] = {"mlp": MLPEncoder, **CNN_ENCODERS}


class PackedEncoder(Encoder):
    """Observations packed from a Tuple or Dict with images (`rlfoundry.envs.spaces.PackedBox`): each image through the
    configured image encoder, the other entries as they are (uint8 values scaled to [0, 1] as frames are),
    concatenated and mixed by one linear layer and ReLU per group, as wide as the last of `hidden_sizes`.
    Stable-Baselines3's CombinedExtractor, with the mixing layer as the first layer of what follows it."""

    def __init__(self, parts, net_cfg, groups: int):
        super().__init__()
        if net_cfg.encoder not in CNN_ENCODERS:
            raise ValueError(f"network.encoder = {net_cfg.encoder}: observations with images in them need an image "
                             f"encoder ({', '.join(CNN_ENCODERS)})")
        self.image_parts = [part for part in parts if part.kind == "image"]
        self.vector_parts = [part for part in parts if part.kind != "image"]
        images = [CNN_ENCODERS[net_cfg.encoder](part.shape, net_cfg, groups) for part in self.image_parts]
        self.images = nn.ModuleList(images)
        width = sum(encoder.out_features for encoder in images) + sum(part.size for part in self.vector_parts)
        self.out_features = net_cfg.hidden_sizes[-1] if net_cfg.hidden_sizes else width
        self.weight = nn.Parameter(torch.empty(groups, width, self.out_features))
        self.bias = nn.Parameter(torch.zeros(groups, 1, self.out_features))
        for g in range(groups):
            if net_cfg.ortho_init:
                nn.init.orthogonal_(self.weight.data[g], math.sqrt(2))
            else:  # nn.Linear's default
                nn.init.uniform_(self.weight.data[g], -1 / math.sqrt(width), 1 / math.sqrt(width))
        self.groups = groups

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        n = obs.shape[0]
        features = []
        for encoder, part in zip(self.images, self.image_parts):
            image = obs[:, part.offset:part.offset + part.size].reshape(n, *part.shape)
            features.append(encoder(image if image.dtype == torch.uint8 else image / 255.0))  # [G, N, H]
        for part in self.vector_parts:
            values = obs[:, part.offset:part.offset + part.size].float()
            features.append((values / 255.0 if part.kind == "bytes" else values).expand(self.groups, n, part.size))
        mixed = torch.baddbmm(self.bias, torch.cat([f.float() for f in features], -1), self.weight)
        return torch.relu(mixed)


def encoder_for(observation_space, net_cfg, groups: int) -> Encoder:
    """The encoder `net_cfg.encoder` names for observations of `observation_space`; a packed observation's
    (`PackedEncoder`) when it lists parts."""
    parts = packed_parts(observation_space)
    if parts:
        return PackedEncoder(parts, net_cfg, groups)
    return ENCODERS[net_cfg.encoder](tuple(observation_space.shape), net_cfg, groups)
