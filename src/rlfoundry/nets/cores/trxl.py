"""Transformer-XL core (Dai et al. 2019) and its gated form, GTrXL (Parisotto et al. 2019): attention over a
window of past steps kept as memory, masked at episode starts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlfoundry.nets.cores.base import Core, _last_start, _starts


class _GRUGate(nn.Module):
    """GTrXL's GRU-type gate g(x, y) (Parisotto et al. 2019, arXiv:1910.06764, eq. 7-10).

    z = sigmoid(W_z y + U_z x - b_g) with b_g = 2, so at init z is small and g(x, y) ~ x: the block
    starts close to the identity, which the paper credits for stable RL training.
    """

    def __init__(self, width: int, gate_bias: float = 2.0):
        super().__init__()
        self.w = nn.Linear(width, 3 * width, bias=False)  # W_r, W_z, W_g, applied to y
        self.u = nn.Linear(width, 2 * width, bias=False)  # U_r, U_z, applied to x
        self.u_g = nn.Linear(width, width, bias=False)
        self.gate_bias = nn.Parameter(torch.full((width,), gate_bias))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        w_r, w_z, w_g = self.w(y).chunk(3, -1)
        u_r, u_z = self.u(x).chunk(2, -1)
        r = torch.sigmoid(w_r + u_r)
        z = torch.sigmoid(w_z + u_z - self.gate_bias)
        return (1 - z) * x + z * torch.tanh(w_g + self.u_g(r * x))


class _TrXLBlock(nn.Module):
    """Pre-LN block: attention over [memory, sequence], then a position-wise MLP.

    Residual merge: x + y (TrXL-I), or the GRU gate with ReLU on the sub-layer output (GTrXL).
    """

    def __init__(self, width: int, heads: int, memory_length: int, gated: bool):
        super().__init__()
        self.heads = heads
        self.norm_attn, self.norm_mlp = nn.LayerNorm(width), nn.LayerNorm(width)
        self.query = nn.Linear(width, width)
        self.key_value = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)
        # A learned bias per head and relative distance 0..M (as in T5, Raffel et al. 2020) instead of
        # TrXL's sinusoidal R with u, v terms: the window is bounded, so M + 1 entries cover it.
        self.relative_bias = nn.Parameter(torch.zeros(heads, memory_length + 1))
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.gates = nn.ModuleList([_GRUGate(width), _GRUGate(width)]) if gated else None

    def _merge(self, i: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y if self.gates is None else self.gates[i](x, torch.relu(y))

    def forward(self, h, context, visible, distance):
        """h [T, B, D], context [M + T, B, D], visible [B, T, M + T] bool, distance [T, M + T]."""
        c = self.norm_attn(context)
        q = self.query(c[-len(h) :])
        k, v = self.key_value(c).chunk(2, -1)
        q, k, v = (z.unflatten(-1, (self.heads, -1)).permute(1, 2, 0, 3) for z in (q, k, v))  # [B, heads, T, d]
        bias = self.relative_bias[:, distance]  # [heads, T, M + T]
        mask = torch.where(visible[:, None], bias, float("-inf"))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h = self._merge(0, h, self.out(a.permute(2, 0, 1, 3).flatten(2)))
        return self._merge(1, h, self.mlp(self.norm_mlp(h)))


class TrXLCore(Core):
    """Transformer-XL memory (Dai et al. 2019) with pre-LN blocks (TrXL-I of Parisotto et al. 2019).

    Each layer attends, causally, over a window of the last M steps of that layer's inputs plus the
    current step. The window is the same whatever the call length, so step-by-step and whole-sequence
    calls agree exactly. A step sees only steps of its own episode: memory carries a per-env count
    `length` of its trailing entries that belong to the current episode (0 in the initial state, so
    the zero memory is never attended). Memory entries are stored detached (TrXL's stop-gradient).
    """

    gated = False

    def __init__(self, in_features: int, cfg):
        super().__init__()
        width = cfg.core_hidden
        assert width % cfg.num_heads == 0, "core_hidden must be divisible by num_heads"
        self.memory_length = cfg.memory_length
        self.proj = nn.Linear(in_features, width)
        self.blocks = nn.ModuleList(
            _TrXLBlock(width, cfg.num_heads, cfg.memory_length, self.gated) for _ in range(cfg.core_layers)
        )
        self.norm = nn.LayerNorm(width)
        self.out_features = width

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.proj.weight
        memory = w.new_zeros(self.memory_length, batch_size, len(self.blocks), self.out_features)
        return memory, w.new_zeros(1, batch_size)

    def forward(self, x, state, episode_starts, final_state: bool = True):
        memory, length = state
        T, M = len(x), self.memory_length
        last = _last_start(_starts(episode_starts, x))
        # Key j indexes [memory (M), sequence (T)]; query t sits at M + t. Visible: the window
        # t <= j <= M + t, and j at or after the start of t's episode.
        t = torch.arange(T, device=x.device)[:, None]
        j = torch.arange(M + T, device=x.device)
        first = torch.where(last >= 0, M + last, M - length.long())  # [T, B]
        visible = (j >= first[..., None]) & (j >= t[..., None]) & (j <= M + t[..., None])
        distance = (M + t - j).clamp(0, M)
        h, new_memory = self.proj(x), []
        for layer, block in enumerate(self.blocks):
            context = torch.cat([memory[:, :, layer], h])
            new_memory.append(context[-M:].detach())
            h = block(h, context, visible.transpose(0, 1), distance)
        new_length = torch.where(last[-1] >= 0, T - last[-1], length[0] + T).clamp(max=M)
        return self.norm(h), (torch.stack(new_memory, 2), new_length[None].to(length.dtype))


class GTrXLCore(TrXLCore):
    """Gated Transformer-XL (Parisotto et al. 2019): TrXLCore with GRU gates for the residuals."""

    gated = True
