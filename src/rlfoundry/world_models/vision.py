"""Image encoders and decoders of the latent models: DreamerV3's and PlaNet's.

DreamerV3's image encoder and decoder (reference code HEAD, `dreamerv3/rssm.py` `Encoder`, `Decoder`;
docs/world-models/dreamer-planet.md §2, checked against danijar/dreamerv3 f8817c4). Images are uint8 [C, H, W] with H and W divisible
by 16 (the reference uses 64 × 64), scaled to [0, 1] and shifted by -0.5 for the encoder; `depth` d sets the
channels d·(2, 3, 4, 4) of the four stages.

    encoder, per stage:  Conv k5 stride 1 'same' → max-pool 2×2 → RMSNorm over channels → SiLU;  flatten
    decoder:  x = SiLU(RMSNorm(BlockLinear_8(h) + MLP(z)))  as [4d, H/16, W/16]   (group g of the block projection
              gives channels g·4d/8 .. (g+1)·4d/8 at every position; the MLP is Dense(2·units) then Linear)
              then per stage with channels 4d, 3d, 2d:  nearest ×2 → Conv k5 → RMSNorm → SiLU
              then nearest ×2 → Conv k5 to C channels → sigmoid: the image in [0, 1]
    loss:     Σ over pixels and channels of (decoded - image / 255)²

PlaNet's (google-research/planet `networks/conv_ha.py`, `tools/preprocess.py`; §7 of that page): 64 × 64 images only.

    input:    5-bit images: floor(image / 2^(8-bits)) / 2^bits + U(0, 2^-bits) - 0.5  (dequantisation noise), which
              is also the reconstruction target
    encoder:  4 × (Conv k4 stride 2 'valid' → ReLU), channels 32, 64, 128, 256: 64 → 31 → 14 → 6 → 2; flatten (1024)
    decoder:  Linear(features → 1024) as [1024, 1, 1], transposed convs k5, 5, 6, 6 stride 2 with channels 128, 64,
              32 (ReLU) and C: 1 → 5 → 13 → 30 → 64; the mean of a unit-variance Gaussian
    loss:     Σ over pixels and channels of ½ (decoded - target)²
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlfoundry.world_models.layers import BlockLinear, Dense, init_weight_

MULTS = (2, 3, 4, 4)
CHANNELS_LAST = torch.channels_last
STAGES = len(MULTS)


PLANET_SIZE = (64, 64)


def check_image(shape: tuple[int, ...], cnn: str = "dreamerv3") -> str | None:
    """Why an observation shape cannot go through the `cnn` networks, or None."""
    if cnn == "planet":
        if len(shape) != 3 or tuple(shape[1:]) != PLANET_SIZE:
            return f"images [C, 64, 64] (PlaNet's CNNs), not {list(shape)}"
    elif len(shape) != 3 or shape[1] % 2**STAGES or shape[2] % 2**STAGES:
        return f"images [C, H, W] with H and W divisible by {2 ** STAGES} (e.g. 64 × 64), not {list(shape)}"
    return None


def network_input(images: torch.Tensor, cnn: str, bits: int = 8) -> torch.Tensor:
    """uint8 images -> the float images the `cnn` networks take and reconstruct: DreamerV3 image / 255; PlaNet
    `bits`-bit images with uniform dequantisation noise, centred (module docstring)."""
    if cnn != "planet":
        return images.float() / 255.0
    bins = 2.0 ** bits
    x = torch.floor(images.float() / 2.0 ** (8 - bits)) / bins
    return x + torch.rand_like(x) / bins - 0.5


class ChannelRMSNorm(nn.Module):
    """Scale-only RMSNorm over the channels of [N, C, H, W], per pixel, in fp32 (eps 1e-4)."""

    def __init__(self, channels: int, eps: float = 1e-4):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        out = x32 * torch.rsqrt(x32.square().mean(1, keepdim=True) + self.eps) * self.weight[:, None, None]
        return out.to(x.dtype)


def conv(inputs: int, outputs: int, outscale: float = 1.0) -> nn.Conv2d:
    """A k5 'same' convolution, its weights channels-last: oneDNN's kernels for these few channels run about twice as
    fast on channels-last tensors as on NCHW ones (forward and backward, measured on AVX-512)."""
    layer = nn.Conv2d(inputs, outputs, 5, padding=2)
    assert layer.bias is not None  # bias=True is Conv2d's default
    init_weight_(layer.weight, 25 * inputs, outscale)
    nn.init.zeros_(layer.bias)
    # Module.to accepts memory_format at run time; torch's overloads for it leave the keyword out
    return layer.to(memory_format=torch.channels_last)  # type: ignore[call-overload]


class ImageEncoder(nn.Module):
    def __init__(self, shape: tuple[int, int, int], depth: int):
        super().__init__()
        channels = [shape[0], *(depth * m for m in MULTS)]
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(channels, channels[1:]))
        self.norms = nn.ModuleList(ChannelRMSNorm(c) for c in channels[1:])
        self.output_size = channels[-1] * (shape[1] >> STAGES) * (shape[2] >> STAGES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """[..., C, H, W] images in [0, 1] -> [..., output_size]."""
        lead = images.shape[:-3]
        x = (images.reshape(-1, *images.shape[-3:]) - 0.5).contiguous(memory_format=CHANNELS_LAST)
        for layer, norm in zip(self.convs, self.norms):
            x = F.silu(norm(F.max_pool2d(layer(x), 2)))
        return x.reshape(*lead, -1)


class ImageDecoder(nn.Module):
    def __init__(self, shape: tuple[int, int, int], depth: int, deter: int, stoch: int, units: int, groups: int = 8):
        super().__init__()
        self.shape, self.deter = shape, deter
        self.low = (shape[1] >> STAGES, shape[2] >> STAGES)
        self.top = depth * MULTS[-1]
        cells = self.low[0] * self.low[1]
        self.groups = groups if deter % groups == 0 and self.top % groups == 0 else 1
        self.from_deter = BlockLinear(deter, cells * self.top, self.groups)
        stoch_in = Dense(stoch, 2 * units)  # built before stoch_out: the order the RNG is drawn in
        stoch_out = nn.Linear(2 * units, cells * self.top)
        self.from_stoch = nn.Sequential(stoch_in, stoch_out)
        init_weight_(stoch_out.weight, 2 * units)
        nn.init.zeros_(stoch_out.bias)
        self.norm = ChannelRMSNorm(self.top)
        channels = [depth * m for m in reversed(MULTS)]  # 4d, 4d, 3d, 2d
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(channels, channels[1:]))
        self.norms = nn.ModuleList(ChannelRMSNorm(c) for c in channels[1:])
        self.out = conv(channels[-1], shape[0])

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """[..., deter + stoch] features -> [..., C, H, W] images in [0, 1]."""
        lead = feats.shape[:-1]
        feats = feats.reshape(-1, feats.shape[-1])
        n, (h, w), G = feats.shape[0], self.low, self.groups
        x0 = self.from_deter(feats[:, :self.deter]).reshape(n, G, h, w, self.top // G)
        x0 = x0.permute(0, 1, 4, 2, 3).reshape(n, self.top, h, w)  # group g: channels g·top/G .. (g+1)·top/G
        x1 = self.from_stoch(feats[:, self.deter:]).reshape(n, h, w, self.top).permute(0, 3, 1, 2)
        x = F.silu(self.norm(x0 + x1)).contiguous(memory_format=CHANNELS_LAST)
        for layer, norm in zip(self.convs, self.norms):
            x = F.silu(norm(layer(F.interpolate(x, scale_factor=2, mode="nearest"))))
        x = torch.sigmoid(self.out(F.interpolate(x, scale_factor=2, mode="nearest")))
        return x.reshape(*lead, *self.shape)


class PlaNetEncoder(nn.Module):
    def __init__(self, shape: tuple[int, int, int]):
        super().__init__()
        channels = [shape[0], 32, 64, 128, 256]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 4, stride=2) for a, b in zip(channels, channels[1:]))
        self.output_size = 256 * 2 * 2

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """[..., C, 64, 64] network inputs (`network_input`) -> [..., 1024]."""
        lead = images.shape[:-3]
        x = images.reshape(-1, *images.shape[-3:]).contiguous(memory_format=CHANNELS_LAST)
        for layer in self.convs:
            x = F.relu(layer(x))
        return x.reshape(*lead, -1)


class PlaNetDecoder(nn.Module):
    def __init__(self, shape: tuple[int, int, int], features: int):
        super().__init__()
        self.shape = shape
        self.project = nn.Linear(features, 1024)
        channels, kernels = [1024, 128, 64, 32, shape[0]], [5, 5, 6, 6]
        self.deconvs = nn.ModuleList(nn.ConvTranspose2d(a, b, k, stride=2)
                                     for a, b, k in zip(channels, channels[1:], kernels))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """[..., F] features -> [..., C, 64, 64] means of the network inputs."""
        lead = feats.shape[:-1]
        x = self.project(feats.reshape(-1, feats.shape[-1]))[:, :, None, None]
        for layer in self.deconvs[:-1]:
            x = F.relu(layer(x))
        return self.deconvs[-1](x).reshape(*lead, *self.shape)
