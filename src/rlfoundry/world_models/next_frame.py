"""SimPLe's stochastic next-frame predictor (Kaiser et al. 2019, arXiv:1903.00374), with MBARC's reward head.

Sizes and structure are the MBARC PyTorch port's defaults (tag MB, thomas-schillaci/mbarc_atari, as
docs/world-models/simple-mbarc.md gives them; § numbers below are that page's); the code is this project's own. One
step of the model, for a batch of B observations of S = 4 stacked RGB frames:

    x      = standardise(frames / 255) per frame channel                         [B, S·C, H, W]    §2.1
    x      = embed_1x1(x) + timing(level 0)                                       [B, 96, H, W]
    for each of the K = 5 encoder levels l:  skip_l = x
        x  = InstanceNorm(ReLU(conv4x4s2(dropout(x) + timing(l))))                -> [B, 768, 3, 2] at the end
    value  = linear(flatten(x))                                                   [B]     (before the action)
    x      = inject(x, a)  with inject(x, a) = x·σ(W₁a) + W₂a per channel, a one-hot
    x      = x·σ(W·bits) + W'·bits  for the samples that use the latent (bits ∈ {±1}^128)       §2.2
    mid    = x;  x = middle(x)   (2 convs 3×3 after dropout 0.5, the 2nd residual + InstanceNorm)
    for each level l from K-1 down to 0:
        x  = InstanceNorm(ReLU(convT4x4s2(inject(dropout(x), a))) + skip_l) + timing(l)
    frame logits = conv1x1(x) viewed [B, 256, C, H, W];  reward logits = head(mid, x)   [B, 3]    §4.4

128 latent bits carry what the frames do not determine: in training a posterior net infers them from the target
frame, in the simulator (`simulate`) an LSTM prior samples them. Their warm-up, and every place where this follows
tensor2tensor rather than MB (dropout off in the simulator, the direction of the warm-up ramps, the posterior's
pooling, the bit sampling), are in §2.6 of that page; the model's cost and size are measured in
docs/guide/model-based.md, "The next-frame predictor: cost and size".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from rlfoundry.world_models import dists
from rlfoundry.world_models.reward_strategies import NUM_REWARD_CLASSES

NUM_COLOURS = 256  # a 256-way softmax per pixel and channel (§2.1 "Frame output", paper Fig. 2)
BITS_PER_CHUNK = 8  # the LSTM prior emits bits 8 at a time as one 256-way choice (§2.2)
TARGET_LOSS_CLIPPING = 0.03  # MB `--target-loss-clipping`, T2T `video_modality_loss_cutoff` (§2.3)
# Logits per block when the CPU picks the colours (`colour_argmax`, `simulate`): 256·C colours × a run of pixels of
# one sample, a 1 MB L2 cache of fp32. Measured (module docstring "Cost"): 2^18 best or within noise of the best
# from hidden 16 to 96, RGB and grey; 2^16 and below slower (narrow matmuls, per-block overhead), 2^19-2^20 no better.
CPU_ARGMAX_BLOCK = 2**18
RewardHead = Literal["modified", "original"]


@dataclass(frozen=True)
class NextFrameConfig:
    """Sizes and settings of the predictor's layers. Defaults are MB's (the page's rows cited per field). The frames
    it reads (MB: 4 stacked RGB 105×80 frames, §1) are the predictor's arguments, given by the env."""

    hidden_size: int = 96  # §2.1 "Embedding" (`--hidden-size`)
    compress_steps: int = 5  # §2.1 "Encoder" (`--compress-steps`); T2T uses 6 (§2.5)
    filter_double_steps: int = 3  # §2.1 "Encoder": 96 -> 192 -> 384 -> 768, then 768
    hidden_layers: int = 2  # §2.1 "Middle" (`--hidden-layers`)
    dropout: float = 0.15  # §2.3 "Dropout": encoder and decoder
    residual_dropout: float = 0.5  # §2.3 "Dropout": middle network
    bottleneck_bits: int = 128  # §2.2 "Posterior" (`--bottleneck-bits`); a multiple of BITS_PER_CHUNK
    latent_state_size: int = 128  # §2.2 "Prior" (`--latent-state-size`)
    bottleneck_noise: float = 0.1  # §2.2 "Discretisation": bit-flip probability (`--bottleneck-noise`)
    latent_noise_std: float = 0.2  # §2.2 "Discretisation": truncated-normal σ, cut at ±2σ
    lstm_dropout: float = 0.1  # §2.2 "Bit loss": dropout on the teacher-forced LSTM's inputs and outputs
    posterior_filters: tuple[int, int] = (128, 512)  # §2.2 "Posterior": conv 8×8 s4 -> 128, -> 512
    latent_rnn_max_sampling: float = 0.5  # §2.2 "Warm-up": final P(LSTM-sampled bit)
    latent_use_max_probability: float = 0.8  # §2.2 "Warm-up": final P(apply the latent)
    reward_head: RewardHead = "modified"  # §4.4: MBARC's head is MB's default (`--use-modified-model` unset)
    reward_head_channels: int = 96  # §4.4: the modified head's width (hard-coded 96 in MB)
    reward_head_dropout: float = 0.3  # §4.4: Dropout2d in the modified head's downscaling blocks

    def __post_init__(self):
        if self.reward_head not in ("modified", "original"):
            raise ValueError(f"reward_head must be 'modified' or 'original', got {self.reward_head!r}")
        if self.bottleneck_bits % BITS_PER_CHUNK or self.bottleneck_bits <= 0:
            raise ValueError(f"bottleneck_bits must be a positive multiple of {BITS_PER_CHUNK}, "
                             f"got {self.bottleneck_bits}")

    @classmethod
    def tiny(cls, **changes) -> NextFrameConfig:
        """Narrow layers and 2 compress steps with MB's structure (frames from 4×4 up, e.g. 3×20×16): trains on a CPU in seconds (tests, smoke runs)."""
        small = dict(hidden_size=16, compress_steps=2, filter_double_steps=2,
                     bottleneck_bits=16, latent_state_size=32, posterior_filters=(16, 32), reward_head_channels=16)
        return replace(cls(), **{**small, **changes})


class LatentMixing(NamedTuple):
    """Warm-up probabilities of the training path (§2.2), each ramping up from 0 (see the module docstring)."""

    p_hard_bits: float  # a bit is hard ±1 (else its continuous tanh code); per bit, 0 -> 1
    p_prior_bits: float  # a bit is replaced by the LSTM prior's sample; per bit, 0 -> latent_rnn_max_sampling
    p_latent: float  # the latent is applied to a sample at all; per sample, 0 -> latent_use_max_probability

    @classmethod
    def hard_posterior(cls) -> LatentMixing:
        """Hard posterior bits, always applied: the end of the discretisation ramp without any mixing."""
        return cls(1.0, 0.0, 1.0)


def latent_mixing(step: int, cfg: NextFrameConfig, warmup_steps: int = 40_000) -> LatentMixing:
    """T2T's linear ramps (`basic_stochastic.inject_latent`, `discretization.tanh_discrete_bottleneck`):
    hard bits and LSTM bits over `warmup_steps` (T2T `discretize_warmup_steps`, `latent_rnn_warmup_steps`, both
    40,000), latent use over half of it. From 0 rather than T2T's 0.01 floor. MB finishes its ramps inside epoch 0."""
    progress = min(max(step, 0) / warmup_steps, 1.0)
    use = min(2.0 * max(step, 0) / warmup_steps, 1.0)
    return LatentMixing(progress, progress * cfg.latent_rnn_max_sampling, use * cfg.latent_use_max_probability)


class FramePrediction(NamedTuple):
    frame_logits: torch.Tensor | None  # [B, 256, C, H, W]; None when asked for without them (frame_logits=False)
    reward_logits: torch.Tensor  # [B, 3], classes of the clipped reward -1, 0, +1
    values: torch.Tensor  # [B]
    bit_loss: torch.Tensor  # scalar: the LSTM prior's teacher-forced cross-entropy (0 without a target)
    bits: torch.Tensor  # [B, bottleneck_bits] the bits injected (±1 once the warm-up is over)
    reward_inputs: tuple[torch.Tensor, torch.Tensor]  # (mid, fin) the reward head reads, to train it alone


class SimulatedStep(NamedTuple):
    next_frame: torch.Tensor  # [B, C, H, W] uint8, argmax over the 256 colours
    reward_class: torch.Tensor  # [B] long in {0, 1, 2} = clipped reward + 1
    values: torch.Tensor  # [B]
    bits: torch.Tensor  # [B, bottleneck_bits] ±1, the sampled (or given) latent


def frame_loss(frame_logits: torch.Tensor, target_frame: torch.Tensor,
               clip: float = TARGET_LOSS_CLIPPING) -> torch.Tensor:
    """mean(max(CE, clip)) - clip over every pixel and channel (MB, §2.3): elements already predicted with
    CE <= clip give no gradient. frame_logits [B, 256, C, H, W], target_frame [B, C, H, W] uint8 -> scalar."""
    ce = F.cross_entropy(frame_logits, target_frame.long(), reduction="none")
    return ce.clamp(min=clip).mean() - clip


def _first_max(logits: torch.Tensor, colours: torch.Tensor, scratch: torch.Tensor, out: torch.Tensor) -> None:
    """torch.argmax(logits, 0) - 256 into `out` (float) for a block [256, ...]: the first of equal maxima, as torch's
    (+inf included), and 0 where a column has no maximum (a NaN, which torch.argmax counts as one: the caller then
    asks torch.argmax). On the CPU torch.argmax is a scalar loop (≈1 ns per logit); these four vectorised passes
    over a cached block take ≈0.3 ns. `logits >= top` holds exactly at the maxima; it is written as floats to
    `scratch` (a bool tensor is 4× slower to write here) and becomes colour - 256 there, the colour elsewhere, so
    the minimum is the first maximum's colour - 256. `colours` is [256, 1, ...] float32."""
    top = logits.amax(0, keepdim=True)
    hit = torch.ge(logits, top, out=scratch[:logits.numel()].view(logits.shape))
    torch.amin(torch.add(colours, hit, alpha=-NUM_COLOURS, out=hit), 0, out=out)


def _argmax_blocks(block, batch: int, channels: int, pixels: int, device: torch.device) -> torch.Tensor | None:
    """The colour index [batch, channels, pixels] uint8 from `block(i, pixels slice)` -> logits [256, channels, n] of
    sample i, about CPU_ARGMAX_BLOCK logits at a time; None when a logit is NaN. A sample's pixels are cut into runs
    of near-equal length (at least half the step, never a short tail): MKL computes a product narrower than 12
    columns by another path whose rounding differs from the batched one's (measured), the rest agree."""
    step = max(1, CPU_ARGMAX_BLOCK // (NUM_COLOURS * channels))
    blocks = -(-pixels // step)
    edges = [pixels * k // blocks for k in range(blocks + 1)]
    colours = torch.arange(NUM_COLOURS, dtype=torch.float32, device=device)[:, None, None]
    scratch = torch.empty(NUM_COLOURS * channels * -(-pixels // blocks), device=device)
    index = torch.empty(batch, channels, pixels, device=device)
    for i in range(batch):
        for start, end in zip(edges, edges[1:]):
            _first_max(block(i, slice(start, end)), colours, scratch, index[i, :, start:end])
    if (index >= 0).any():  # CPU only: no device sync
        return None
    return index.add_(NUM_COLOURS).to(torch.uint8)


def colour_argmax(frame_logits: torch.Tensor) -> torch.Tensor:
    """frame_logits [B, 256, C, H, W] -> frame_logits.argmax(1) as uint8 [B, C, H, W], bit for bit (the first of equal
    maxima). On the CPU block by block in cache (`_first_max`); elsewhere torch.argmax itself."""
    if frame_logits.device.type != "cpu":
        return frame_logits.argmax(1).to(torch.uint8)
    b, _, c, h, w = frame_logits.shape
    flat = frame_logits.flatten(3)
    index = _argmax_blocks(lambda i, where: flat[i, :, :, where], b, c, h * w, frame_logits.device)
    return frame_logits.argmax(1).to(torch.uint8) if index is None else index.view(b, c, h, w)


def standardise(frames: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """uint8 [B, K, H, W] -> each channel of each frame in [0, 1], then (x - mean) / max(std, 1/√(H·W)) over its
    pixels (§2.1; T2T `standardize_images`, population std)."""
    x = frames.to(dtype) / 255.0
    var, mean = torch.var_mean(x, dim=(-2, -1), keepdim=True, correction=0)
    floor = 1.0 / math.sqrt(x.shape[-1] * x.shape[-2])
    return (x - mean) / var.sqrt().clamp(min=floor)


def timing_signal(channels: int, height: int, width: int) -> torch.Tensor:
    """T2T's 2-D sinusoidal signal (`add_timing_signal_nd`) [channels, height, width]: C//4 timescales from 1 to
    1e4; channels [0, 2n) carry sin, cos of the row position, [2n, 4n) of the column position, the rest 0."""
    n = channels // 4
    inv = torch.exp(-math.log(1e4) * torch.arange(n, dtype=torch.float64) / max(n - 1, 1))
    signal = torch.zeros(channels, height, width, dtype=torch.float64)
    for dim, length in enumerate((height, width)):
        angles = torch.arange(length, dtype=torch.float64)[:, None] * inv  # [length, n]
        waves = torch.cat([angles.sin(), angles.cos()], dim=1).T  # [2n, length]
        shape = (2 * n, length, 1) if dim == 0 else (2 * n, 1, length)
        signal[2 * n * dim: 2 * n * (dim + 1)] += waves.reshape(shape)
    return signal.float()


def bits_to_chunks(bits: torch.Tensor) -> torch.Tensor:
    """±1 bits [B, N·8] -> chunk indices [B, N] long, least significant bit first."""
    weights = 2 ** torch.arange(BITS_PER_CHUNK, device=bits.device)
    return ((bits > 0).long().view(bits.shape[0], -1, BITS_PER_CHUNK) * weights).sum(-1)


def chunks_to_bits(chunks: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Chunk indices [B, N] -> ±1 bits [B, N·8] of `dtype` (inverse of `bits_to_chunks`)."""
    shifts = torch.arange(BITS_PER_CHUNK, device=chunks.device)
    return ((chunks[..., None] >> shifts) & 1).flatten(1).to(dtype) * 2 - 1


class ActionInjector(nn.Module):
    """x·σ(W₁a) + W₂a per channel, a one-hot (MB `ActionInjector`, T2T `multi_additive`)."""

    def __init__(self, num_actions: int, channels: int):
        super().__init__()
        self.mul = nn.Linear(num_actions, channels)
        self.add = nn.Linear(num_actions, channels)

    def forward(self, x: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.mul(onehot))[:, :, None, None] + self.add(onehot)[:, :, None, None]


class AttentionPool(nn.Module):
    """[B, C, H, W] -> [B, 5·C]: 4 softmax-over-positions weighted averages and the plain mean (§2.2 posterior)."""

    def __init__(self, channels: int, heads: int = 4):
        super().__init__()
        self.scores = nn.Conv2d(channels, heads, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self.scores(x).flatten(2).softmax(-1)  # [B, heads, H·W]
        pooled = torch.einsum("bkp,bcp->bck", weights, x.flatten(2))
        return torch.cat([pooled, x.mean((2, 3))[:, :, None]], dim=2).flatten(1)


class Posterior(nn.Module):
    """(standardised frames, standardised target) -> bottleneck_bits logits (§2.2 "Posterior", training only)."""

    def __init__(self, cfg: NextFrameConfig, num_actions: int, input_channels: int, frame_channels: int):
        super().__init__()
        f1, f2 = cfg.posterior_filters
        self.embed = nn.Conv2d(input_channels + frame_channels, cfg.hidden_size, 1)
        self.inject = ActionInjector(num_actions, cfg.hidden_size)
        self.conv1 = nn.Conv2d(cfg.hidden_size, f1, 8, stride=4, padding=2)
        self.conv2 = nn.Conv2d(f1, f2, 8, stride=4, padding=2)
        self.pool1, self.pool2 = AttentionPool(f1), AttentionPool(f2)
        self.logits = nn.Linear(5 * (f1 + f2), cfg.bottleneck_bits)

    def forward(self, x: torch.Tensor, target: torch.Tensor, onehot: torch.Tensor,
                timing: torch.Tensor) -> torch.Tensor:
        x = self.inject(self.embed(torch.cat([x, target], dim=1)) + timing, onehot)
        x = self.conv1(x)
        pooled1 = self.pool1(x)
        pooled2 = self.pool2(self.conv2(torch.relu(x)))
        return self.logits(torch.cat([pooled1, pooled2], dim=1))


class BitsPrior(nn.Module):
    """LSTM over chunks of 8 bits, initial input, h and c from the flattened bottleneck (§2.2 "Prior")."""

    def __init__(self, cfg: NextFrameConfig, bottleneck_size: int):
        super().__init__()
        state = cfg.latent_state_size
        self.num_chunks = cfg.bottleneck_bits // BITS_PER_CHUNK
        self.dropout = cfg.lstm_dropout
        self.start = nn.Linear(bottleneck_size, 3 * state)  # first input, h0, c0 (three maps in one matmul)
        self.embed = nn.Embedding(2 ** BITS_PER_CHUNK, state)  # = a 256 -> state linear map on one-hot chunks
        self.cell = nn.LSTMCell(state, state)
        self.out = nn.Linear(state, 2 ** BITS_PER_CHUNK)

    def loss(self, bottleneck: torch.Tensor, clean_bits: torch.Tensor, drop: bool) -> torch.Tensor:
        """Teacher-forced cross-entropy of the chunks of `clean_bits` (±1, no gradient), mean over chunks."""
        first, h, c = self.start(bottleneck.flatten(1)).chunk(3, dim=1)
        chunks = bits_to_chunks(clean_bits)  # [B, N]
        inputs = F.dropout(self.embed(chunks[:, :-1]), self.dropout, drop)  # [B, N-1, state]
        outputs = []
        for i in range(self.num_chunks):
            h, c = self.cell(first if i == 0 else inputs[:, i - 1], (h, c))
            outputs.append(h)
        logits = self.out(F.dropout(torch.stack(outputs, dim=1), self.dropout, drop))  # [B, N, 256]
        return F.cross_entropy(logits.transpose(1, 2), chunks)

    def sample(self, bottleneck: torch.Tensor, temperature: float,
               generator: torch.Generator | None) -> torch.Tensor:
        """Bits [B, N·8] ±1 sampled chunk by chunk at `temperature` (0: the most likely chunk)."""
        x, h, c = self.start(bottleneck.flatten(1)).chunk(3, dim=1)
        chunks = []
        for _ in range(self.num_chunks):
            h, c = self.cell(x, (h, c))
            logits = self.out(h)
            if temperature > 0:
                chunk = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
            else:
                chunk = logits.argmax(-1)
            chunks.append(chunk)
            x = self.embed(chunk)
        return chunks_to_bits(torch.stack(chunks, dim=1), bottleneck.dtype)


class SimPLeRewardHead(nn.Module):
    """`original` (§4.4, MB `RewardEstimator`): spatial means of mid and fin -> linear 128 -> ReLU -> linear 3."""

    def __init__(self, cfg: NextFrameConfig, mid_channels: int, mid_size: tuple[int, int]):
        super().__init__()
        self.hidden = nn.Linear(mid_channels + cfg.hidden_size, 128)
        self.out = nn.Linear(128, NUM_REWARD_CLASSES)

    def forward(self, mid: torch.Tensor, fin: torch.Tensor, train: bool) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(torch.cat([mid.mean((2, 3)), fin.mean((2, 3))], dim=1))))


class MBARCRewardHead(nn.Module):
    """`modified` (§4.4, MB `ModifiedRewardEstimator`): 1×1 convs of mid and fin to `reward_head_channels`, fin
    brought down to the bottleneck size by compress_steps × [Dropout2d 0.3, conv 4×4 s2, ReLU, InstanceNorm (no
    affine, eps 1e-5)], both flattened -> linear 128 -> ReLU -> linear 3."""

    def __init__(self, cfg: NextFrameConfig, mid_channels: int, mid_size: tuple[int, int]):
        super().__init__()
        width = cfg.reward_head_channels
        self.dropout = cfg.reward_head_dropout
        self.embed_mid = nn.Conv2d(mid_channels, width, 1)
        self.embed_fin = nn.Conv2d(cfg.hidden_size, width, 1)
        self.down = nn.ModuleList(nn.Conv2d(width, width, 4, stride=2, padding=1) for _ in range(cfg.compress_steps))
        self.hidden = nn.Linear(2 * width * mid_size[0] * mid_size[1], 128)
        self.out = nn.Linear(128, NUM_REWARD_CLASSES)

    def forward(self, mid: torch.Tensor, fin: torch.Tensor, train: bool) -> torch.Tensor:
        fin = self.embed_fin(fin)
        for conv in self.down:
            fin = F.instance_norm(torch.relu(conv(F.dropout2d(fin, self.dropout, train))), eps=1e-5)
        x = torch.cat([self.embed_mid(mid), fin], dim=1).flatten(1)
        return self.out(torch.relu(self.hidden(x)))


REWARD_HEADS: dict[str, type[nn.Module]] = {"modified": MBARCRewardHead, "original": SimPLeRewardHead}


class NextFramePredictor(nn.Module):
    """The world model: next frame, reward class and value from `stacking` frames of `frame_shape` [C, H, W] and an
    action (module docstring). MB: frame_shape (3, 105, 80), stacking 4 (§1)."""

    def __init__(self, cfg: NextFrameConfig, num_actions: int, frame_shape: tuple[int, int, int] = (3, 105, 80),
                 stacking: int = 4):
        super().__init__()
        self.cfg, self.num_actions = cfg, num_actions
        self.frame_shape, self.stacking = tuple(frame_shape), stacking
        k = cfg.compress_steps
        if min(self.frame_shape[1:]) < 2 ** k:
            raise ValueError(f"frame {self.frame_shape} is too small for {k} compress steps")
        channels, sizes = [cfg.hidden_size], [self.frame_shape[1:]]
        for level in range(k):  # filters double in the first filter_double_steps levels (§2.1 "Encoder")
            channels.append(channels[-1] * 2 if level < cfg.filter_double_steps else channels[-1])
            sizes.append((sizes[-1][0] // 2, sizes[-1][1] // 2))  # conv 4×4 s2 p1 halves, rounding down
        self.level_channels, self.level_sizes = tuple(channels), tuple(sizes)
        mid, mid_size = channels[k], sizes[k]
        bottleneck_size = mid * mid_size[0] * mid_size[1]

        # One timing signal per level, shared by the encoder block reading that level and the decoder block
        # writing it (same channels and size); rebuilt, not saved.
        self._timing_names = [f"timing{level}" for level in range(k)]
        for name, c, (h, w) in zip(self._timing_names, channels, sizes):
            self.register_buffer(name, timing_signal(c, h, w), persistent=False)

        self.embed = nn.Conv2d(self.input_channels, cfg.hidden_size, 1)
        assert self.embed.bias is not None  # bias=True is Conv2d's default
        nn.init.normal_(self.embed.bias, std=0.01)  # §2.1 "Embedding": bias init N(0, 0.01)
        self.encoder = nn.ModuleList(nn.Conv2d(channels[i], channels[i + 1], 4, stride=2, padding=1) for i in range(k))
        self.encoder_norms = nn.ModuleList(nn.InstanceNorm2d(channels[i + 1], affine=True, eps=1e-6) for i in range(k))
        self.value_head = nn.Linear(bottleneck_size, 1)
        self.bottleneck_injector = ActionInjector(num_actions, mid)

        self.posterior = Posterior(cfg, num_actions, self.input_channels, self.frame_shape[0])
        self.prior = BitsPrior(cfg, bottleneck_size)
        self.bits_mul = nn.Linear(cfg.bottleneck_bits, mid)
        self.bits_add = nn.Linear(cfg.bottleneck_bits, mid)

        self.middle = nn.ModuleList(nn.Conv2d(mid, mid, 3, padding=1) for _ in range(cfg.hidden_layers))
        self.middle_norms = nn.ModuleList(nn.InstanceNorm2d(mid, affine=True, eps=1e-6)
                                          for _ in range(cfg.hidden_layers - 1))

        # Decoder blocks in execution order: level k-1 (just above the bottleneck) down to level 0.
        levels = list(reversed(range(k)))
        self.decoder_injectors = nn.ModuleList(ActionInjector(num_actions, channels[i + 1]) for i in levels)
        self.decoder = nn.ModuleList(
            nn.ConvTranspose2d(channels[i + 1], channels[i], 4, stride=2, padding=1,
                               output_padding=(sizes[i][0] - 2 * sizes[i + 1][0], sizes[i][1] - 2 * sizes[i + 1][1]))
            for i in levels)
        self.decoder_norms = nn.ModuleList(nn.InstanceNorm2d(channels[i], affine=True, eps=1e-6) for i in levels)
        # The 1×1 output conv (hidden -> 256·C per pixel) as a matmul on [B, hidden, H·W]: the same map, and on the
        # CPU (torch 2.13, 1 thread) forward takes 424 ms against 746 ms for Conv2d at the full size, batch 16.
        self.logits = nn.Linear(cfg.hidden_size, NUM_COLOURS * self.frame_shape[0])
        self.reward_head = REWARD_HEADS[cfg.reward_head](cfg, mid, mid_size)

    def forward(self, frames: torch.Tensor, actions: torch.Tensor, target_frame: torch.Tensor | None = None,
                mixing: LatentMixing | None = None, *, temperature: float = 1.0,
                generator: torch.Generator | None = None, frame_logits: bool = True) -> FramePrediction:
        """Training (and validation) pass. frames [B, S·C, H, W] uint8, actions [B] long, target_frame
        [B, C, H, W] uint8 or None. With a target, the posterior's bits are used, mixed as `mixing` says (required
        then: the caller schedules the warm-up, `latent_mixing`); without one, bits come from the LSTM prior.
        Dropout and the posterior's noise follow `self.training`. `generator` (on the model's device) drives the
        noise, the masks and the prior's samples; dropout uses torch's global generator. `frame_logits=False` skips
        the output layer (FramePrediction.frame_logits is None; 6.45 M floats per sample at 3×105×80) for callers
        that read only the reward head's inputs, the values or the bits."""
        if target_frame is not None and mixing is None:
            raise ValueError("forward with a target_frame needs `mixing` (LatentMixing: p_hard_bits, p_prior_bits, "
                             "p_latent), e.g. latent_mixing(step, cfg) or LatentMixing.hard_posterior()")
        return self._predict(frames, actions, target_frame, mixing, train=self.training, temperature=temperature,
                             generator=generator, bits=None, frame_logits=frame_logits)

    @torch.no_grad()
    def simulate(self, frames: torch.Tensor, actions: torch.Tensor, *, temperature: float = 1.0,
                 generator: torch.Generator | None = None, bits: torch.Tensor | None = None) -> SimulatedStep:
        """One simulated step: bits from the LSTM prior at `temperature` (or `bits` [B, bottleneck_bits] ±1 when
        given), next frame = argmax colour. Never applies dropout, whatever `self.training` (MB did, §6 item 3).
        No host round trip: every result stays a tensor on the model's device. Under `no_grad`, not
        `inference_mode`, so the frames can be stored and fed to a policy that is being trained."""
        out = self._predict(frames, actions, None, None, train=False, temperature=temperature, generator=generator,
                            bits=bits, frame_logits=False)
        return SimulatedStep(self._next_frame(out.reward_inputs[1]), out.reward_logits.argmax(1), out.values, out.bits)

    @property
    def input_channels(self) -> int:
        return self.stacking * self.frame_shape[0]

    def _timing(self, level: int) -> torch.Tensor:
        return self.get_buffer(self._timing_names[level])

    def _check(self, frames, actions, target_frame) -> None:
        shape = (self.input_channels, *self.frame_shape[1:])
        if frames.dtype != torch.uint8 or frames.ndim != 4 or tuple(frames.shape[1:]) != shape:
            raise ValueError(f"frames must be uint8 [B, {', '.join(map(str, shape))}], got {frames.dtype} "
                             f"{tuple(frames.shape)}")
        if actions.dtype != torch.long or tuple(actions.shape) != frames.shape[:1]:
            raise ValueError(f"actions must be long [{frames.shape[0]}], got {actions.dtype} {tuple(actions.shape)}")
        if target_frame is not None and (target_frame.dtype != torch.uint8
                                         or tuple(target_frame.shape) != (frames.shape[0], *self.frame_shape)):
            raise ValueError(f"target_frame must be uint8 [{frames.shape[0]}, "
                             f"{', '.join(map(str, self.frame_shape))}], got {target_frame.dtype} "
                             f"{tuple(target_frame.shape)}")

    def _inject_bits(self, x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
        """bottleneck·σ(W·bits) + W'·bits (§2.2 "Injection", T2T `complex_addn`)."""
        return x * torch.sigmoid(self.bits_mul(bits))[:, :, None, None] + self.bits_add(bits)[:, :, None, None]

    def _posterior_bits(self, x, inputs, target_frame, onehot, mixing: LatentMixing, train: bool,
                        temperature: float, generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(bits [B, N], bit loss, use-latent mask [B] bool) of the training path (§2.2)."""
        cfg = self.cfg

        def chance(p: float, shape) -> torch.Tensor:
            return torch.rand(shape, generator=generator, device=x.device, dtype=torch.float32) < p

        logits = self.posterior(inputs, standardise(target_frame, x.dtype), onehot, self._timing(0))
        clean = torch.where(logits > 0, 1.0, -1.0).to(x.dtype)  # the prior's targets; no gradient
        if train:
            sigma = cfg.latent_noise_std
            noise = nn.init.trunc_normal_(torch.empty_like(logits), std=sigma, a=-2 * sigma, b=2 * sigma,
                                          generator=generator)
            logits = logits + noise
        codes = torch.tanh(logits)
        bits = codes + (torch.where(codes > 0, 1.0, -1.0).to(x.dtype) - codes).detach()  # straight through
        if train and cfg.bottleneck_noise > 0:
            bits = torch.where(chance(cfg.bottleneck_noise, bits.shape), -bits, bits)
        if mixing.p_hard_bits < 1:
            bits = torch.where(chance(mixing.p_hard_bits, bits.shape), bits, codes)
        bit_loss = self.prior.loss(x, clean, train)
        if mixing.p_prior_bits > 0:
            with torch.no_grad():
                sampled = self.prior.sample(x, temperature, generator)
            bits = torch.where(chance(mixing.p_prior_bits, bits.shape), sampled, bits)
        return bits, bit_loss, chance(mixing.p_latent, bits.shape[:1])

    def _frame_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The output layer: the decoder's output x [B, hidden, H, W] -> frame logits [B, 256, C, H, W]."""
        weight = self.logits.weight.expand(x.shape[0], -1, -1)  # [B, 256·C, hidden]
        frame_logits = torch.baddbmm(self.logits.bias[:, None], weight, x.flatten(2))
        return frame_logits.view(x.shape[0], NUM_COLOURS, *self.frame_shape)

    def _next_frame(self, x: torch.Tensor) -> torch.Tensor:
        """`self._frame_logits(x).argmax(1)` as uint8 [B, C, H, W], bit for bit. On the CPU without materialising the
        logits (§7 "Floor at small widths": 6.45 M floats per sample at 3×105×80): blocks of pixels of one sample go
        through the same matmul (a slice of the batched one's columns) and `_first_max` while in cache. Elsewhere
        (CUDA) the full logits and torch.argmax: no host sync, and the same kernels as the training path."""
        if x.device.type != "cpu":
            return self._frame_logits(x).argmax(1).to(torch.uint8)
        flat, weight, bias = x.flatten(2), self.logits.weight, self.logits.bias[:, None]
        channels = self.frame_shape[0]
        index = _argmax_blocks(lambda i, where: torch.addmm(bias, weight, flat[i, :, where]).view(
            NUM_COLOURS, channels, -1), x.shape[0], channels, flat.shape[2], x.device)
        if index is None:  # a logit that is not finite (a diverged model): torch.argmax's answer
            return self._frame_logits(x).argmax(1).to(torch.uint8)
        return index.view(x.shape[0], *self.frame_shape)

    def _predict(self, frames, actions, target_frame, mixing, *, train: bool, temperature: float, generator,
                 bits, frame_logits: bool = True) -> FramePrediction:
        """The network (module docstring). `frame_logits=False` leaves out the output layer (`simulate` runs its own):
        FramePrediction.frame_logits is None then."""
        cfg = self.cfg
        self._check(frames, actions, target_frame)
        dtype = self.embed.weight.dtype
        onehot = dists.one_hot(actions, self.num_actions, dtype)  # (F.one_hot reads the indices on the host)
        inputs = standardise(frames, dtype)
        x = self.embed(inputs) + self._timing(0)
        skips = []
        for level, (conv, norm) in enumerate(zip(self.encoder, self.encoder_norms)):
            skips.append(x)
            x = norm(torch.relu(conv(F.dropout(x, cfg.dropout, train) + self._timing(level))))
        values = self.value_head(x.flatten(1)).squeeze(1)  # before the action (§2.1 "Value head")
        x = self.bottleneck_injector(x, onehot)

        if target_frame is None:
            bit_loss = x.new_zeros(())
            if bits is None:
                bits = self.prior.sample(x, temperature, generator)
            x = self._inject_bits(x, bits.to(dtype))
        else:
            bits, bit_loss, use = self._posterior_bits(x, inputs, target_frame, onehot, mixing, train, temperature,
                                                       generator)
            x = torch.where(use[:, None, None, None], self._inject_bits(x, bits), x)
        mid = x

        for i, conv in enumerate(self.middle):
            y = torch.relu(conv(F.dropout(x, cfg.residual_dropout, train)))
            x = y if i == 0 else self.middle_norms[i - 1](x + y)

        for i, (inject, conv, norm) in enumerate(zip(self.decoder_injectors, self.decoder, self.decoder_norms)):
            level = cfg.compress_steps - 1 - i
            x = norm(torch.relu(conv(inject(F.dropout(x, cfg.dropout, train), onehot))) + skips[level])
            x = x + self._timing(level)

        reward_logits = self.reward_head(mid, x, train)
        logits = self._frame_logits(x) if frame_logits else None
        return FramePrediction(logits, reward_logits, values, bit_loss, bits, (mid, x))
