"""Convolutional encoders for images and symbolic grids: the encoder of encoder → core → heads.

Every encoder follows the same contract:

    Encoder(obs_shape, net_cfg, groups)
    .out_features: int
    forward(obs[N, *obs_shape]) -> features[G, N, out_features]         # G = groups

`groups` is 1 for one trunk shared by policy and value and 2 for separate actor and critic trunks.
Here the groups are independent copies of the whole network (an nn.ModuleList) whose outputs are
stacked on a new leading dim. Observations are channel-first, [C, H, W].

Pixel scaling: `NatureCNN` and `ImpalaCNN` divide uint8 frames by 255 inside the network, so frames
stay uint8 (a quarter of the memory) until they get here; rollout and replay buffers store them in
the env's own dtype. Float images are taken as they are.

Read from `net_cfg`: `ortho_init`, `hidden_sizes` (the linear layers after the conv stack; empty: the
flattened conv output is the feature), `impala_channels`, `grid_embedding_dim`, `grid_channels`.
`net_cfg.activation` is ignored: these networks use ReLU, as their papers do.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# MiniGrid's symbolic cell is (object type, colour, state): 11 object types and 6 colours
# (minigrid.core.constants). The state is open/closed/locked (0..2), but FullyObsWrapper writes the
# agent's direction (0..3) into the agent cell's state, so the state channel takes 4 values.
MINIGRID_VOCAB = (11, 6, 4)


class Encoder(nn.Module):
    """The encoders' common base, for their types: the contract above."""

    out_features: int


def _init_(module: nn.Module, ortho_init: bool) -> None:
    """Orthogonal weights with gain √2 (for ReLU) and zero biases on every conv and linear layer."""
    if not ortho_init:
        return
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(layer.weight, math.sqrt(2))
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


def _head(convs: nn.Module, obs_shape: tuple[int, ...], hidden_sizes: list[int]) -> tuple[nn.Sequential, int]:
    """convs → flatten → (Linear, ReLU) per hidden size; the flattened size comes from a dry run."""
    try:
        with torch.no_grad():
            width = convs(torch.zeros(1, *obs_shape)).flatten(1).shape[1]
    except RuntimeError as err:
        raise ValueError(f"observation shape {obs_shape} is too small for this encoder: {err}") from err
    layers: list[nn.Module] = [convs, nn.Flatten()]
    for size in hidden_sizes:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers), width


def _image_shape(obs_shape: tuple[int, ...], name: str) -> tuple[int, int, int]:
    if len(obs_shape) != 3:
        raise ValueError(f"{name} expects channel-first images [C, H, W], got observation shape {obs_shape}")
    return tuple(obs_shape)  # type: ignore[return-value]


def _check_batch(obs: torch.Tensor, obs_shape: tuple[int, ...]) -> None:
    if obs.ndim != len(obs_shape) + 1 or tuple(obs.shape[1:]) != obs_shape:
        raise ValueError(f"expected observations [N, {', '.join(map(str, obs_shape))}], got {list(obs.shape)}")


def _scale(obs: torch.Tensor) -> torch.Tensor:
    x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
    # Channels-last lets oneDNN use its fast convolution kernels: NatureCNN forward + backward on 256
    # Atari frames takes 122 ms instead of 190 ms on one CPU thread (torch 2.13). The conv weights are
    # channels-last too (`_channels_last`).
    return x.contiguous(memory_format=torch.channels_last)


def _channels_last(net: nn.Module) -> nn.Module:
    """The conv weights stored channels-last, as the inputs are (`_scale`): no weight reorder per call. IMPALA CNN
    forward + backward on 100 Catch frames (1 × 20 × 16) takes 20 ms instead of 28 ms on one thread (AMD EPYC Zen
    4, torch 2.13). `nets/flat.py` keeps the layout when it moves parameters into one buffer."""
    # Module.to takes memory_format (torch._C._nn._parse_to); torch's stubs leave it out of the overloads
    return net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]


class NatureCNN(Encoder):
    """The DQN network of Mnih et al. 2015, "Human-level control through deep reinforcement learning"
    (Nature 518): conv 32 8×8 stride 4, conv 64 4×4 stride 2, conv 64 3×3 stride 1, each with ReLU,
    then fully connected layers (the paper: one of 512 units). Any H, W of at least 36 works."""

    def __init__(self, obs_shape: tuple[int, ...], net_cfg, groups: int):
        super().__init__()
        self.obs_shape = _image_shape(obs_shape, "NatureCNN")
        channels = self.obs_shape[0]
        nets = []
        for _ in range(groups):
            convs = nn.Sequential(
                nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            )  # fmt: skip
            net, self.out_features = _head(convs, self.obs_shape, net_cfg.hidden_sizes)
            _init_(net, net_cfg.ortho_init)
            nets.append(_channels_last(net))
        self.nets = nn.ModuleList(nets)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        _check_batch(obs, self.obs_shape)
        return torch.stack([net(_scale(obs)) for net in self.nets])  # [G, N, out_features]


class _ResidualBlock(nn.Module):
    """relu → conv 3×3 → relu → conv 3×3, plus the input (IMPALA's pre-activation block)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ImpalaCNN(Encoder):
    """The "deep" ResNet of Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with
    Importance Weighted Actor-Learner Architectures" (ICML, figure 3): per stage a conv 3×3, a max
    pool 3×3 stride 2 and two residual blocks, with stage channels 16, 32, 32; then ReLU, flatten and
    fully connected layers (the paper: one of 256 units). Padding gives the sizes of the paper's
    TensorFlow "SAME" padding: an 84×84 frame becomes 42, 21, then 11 pixels wide."""

    def __init__(self, obs_shape: tuple[int, ...], net_cfg, groups: int):
        super().__init__()
        self.obs_shape = _image_shape(obs_shape, "ImpalaCNN")
        nets = []
        for _ in range(groups):
            layers: list[nn.Module] = []
            in_channels = self.obs_shape[0]
            for channels in net_cfg.impala_channels:
                layers += [
                    nn.Conv2d(in_channels, channels, 3, padding=1),
                    nn.MaxPool2d(3, stride=2, padding=1),
                    _ResidualBlock(channels),
                    _ResidualBlock(channels),
                ]
                in_channels = channels
            net, self.out_features = _head(nn.Sequential(*layers, nn.ReLU()), self.obs_shape, net_cfg.hidden_sizes)
            # PyTorch's default init, as CleanRL's ppo_procgen.py: orthogonal gain √2 through six
            # residual blocks roughly doubles the variance per block (feature std 8.8 against 0.08 at init).
            nets.append(_channels_last(net))
        self.nets = nn.ModuleList(nets)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        _check_batch(obs, self.obs_shape)
        return torch.stack([net(_scale(obs)) for net in self.nets])  # [G, N, out_features]


class _GridNet(nn.Module):
    """One group of `GridEncoder`: embedding → convs → linears."""

    def __init__(self, obs_shape: tuple[int, int, int], net_cfg):
        super().__init__()
        self.embedding = nn.Embedding(sum(MINIGRID_VOCAB), net_cfg.grid_embedding_dim)
        layers: list[nn.Module] = []
        in_channels = net_cfg.grid_embedding_dim
        for channels in net_cfg.grid_channels:
            layers += [nn.Conv2d(in_channels, channels, 3, padding=1), nn.ReLU()]
            in_channels = channels
        embedded_shape = (net_cfg.grid_embedding_dim, *obs_shape[1:])
        self.net, self.out_features = _head(nn.Sequential(*layers), embedded_shape, net_cfg.hidden_sizes)
        _init_(self.net, net_cfg.ortho_init)  # the embedding keeps PyTorch's N(0, 1) init

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embedding(idx).sum(1)  # [N, 3, H, W, E] → [N, H, W, E]: the three channels summed
        return self.net(x.permute(0, 3, 1, 2))  # convs want [N, E, H, W]


class GridEncoder(Encoder):
    """Symbolic MiniGrid grids [3, H, W] of (object type, colour, state) indices, after BabyAI 1.1
    (Hui et al. 2020, "BabyAI 1.1", arXiv:2007.12770; Chevalier-Boisvert et al. 2019, ICLR): each
    index is looked up in one embedding table (a block of rows per channel) and the three embeddings
    are summed per cell, BabyAI's "bag of words" image embedding; then 3×3 same-padded convs with
    ReLU, flatten and fully connected layers. Unlike BabyAI there is no batch norm, so acting and
    training see the same function. Indices are cast to long; one outside MINIGRID_VOCAB (or a
    non-integer float) raises a ValueError instead of reading a wrong or missing embedding row."""

    offsets: torch.Tensor  # buffers, registered in __init__
    vocab: torch.Tensor

    def __init__(self, obs_shape: tuple[int, ...], net_cfg, groups: int):
        super().__init__()
        self.obs_shape = _image_shape(obs_shape, "GridEncoder")
        if self.obs_shape[0] != len(MINIGRID_VOCAB):
            raise ValueError(f"GridEncoder expects [3, H, W] (type, colour, state) grids, got {obs_shape}")
        vocab = torch.tensor(MINIGRID_VOCAB)
        self.register_buffer("offsets", (vocab.cumsum(0) - vocab).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("vocab", vocab.view(1, 3, 1, 1), persistent=False)
        nets = [_GridNet(self.obs_shape, net_cfg) for _ in range(groups)]
        self.out_features = nets[0].out_features
        self.nets = nn.ModuleList(nets)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        _check_batch(obs, self.obs_shape)
        idx = obs.long()  # [N, 3, H, W]
        bad = (idx < 0) | (idx >= self.vocab)
        if obs.is_floating_point():
            bad |= idx != obs
        if bad.any():
            n, c, h, w = bad.nonzero()[0].tolist()
            raise ValueError(
                f"grid index {obs[n, c, h, w].item()} at [{n}, {c}, {h}, {w}] is not an integer in "
                f"0..{MINIGRID_VOCAB[c] - 1} (channel {c} of (type, colour, state))"
            )
        idx = idx + self.offsets  # each channel's block of embedding rows
        return torch.stack([net(idx) for net in self.nets])  # [G, N, out_features]


CNN_ENCODERS: dict[str, type[Encoder]] = {"nature_cnn": NatureCNN, "impala_cnn": ImpalaCNN, "minigrid": GridEncoder}
