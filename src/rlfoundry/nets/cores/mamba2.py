"""Mamba-2 core (Dao & Gu 2024): MambaCore's blocks with the state-space duality (SSD) mixer, scalar decays per head
computed chunk by chunk."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlfoundry.nets.cores.mamba import MambaCore, Mixer, _causal_conv, _dt_bias, _kernel_ok, _RMSNorm

# Optional CUDA kernel from https://github.com/state-spaces/mamba, used where it imports: Mamba-2's chunked scan is
# Triton code.
try:
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
except ImportError:
    mamba_chunk_scan_combined = None

SSD_CHUNK = 64  # Mamba-2 chunk length for the pure-PyTorch SSD



def _segment_sums(log_a: torch.Tensor) -> torch.Tensor:
    """[..., Q] -> [..., Q, Q]: S[t, s] = sum of log_a over (s, t], -inf for s > t.

    Built by a masked cumsum, never as a difference of cumsums, so a -inf (reset) gives exp(S) = 0
    instead of nan.
    """
    Q = log_a.shape[-1]
    ones = torch.ones(Q, Q, dtype=torch.bool, device=log_a.device)
    sums = log_a[..., :, None].expand(*log_a.shape, Q).masked_fill(~ones.tril(-1), 0).cumsum(-2)
    return sums.masked_fill(~ones.tril(), float("-inf"))


def _ssd(x, log_a, B, C, h0, chunk: int):
    """Chunked SSD (Dao & Gu 2024, arXiv:2405.21060, sec. 6) for h_t = a_t h_{t-1} + x_t B_t^T, y_t = h_t C_t.

    x [T, B, H, P] (already times dt), log_a [T, B, H] (-inf at resets), B and C [T, B, N],
    h0 [B, H, P, N]. Inside a chunk the quadratic (attention-like) form gives the outputs; the
    chunks' states are passed on in a loop over chunks. Returns (y [T, B, H, P], h_T).
    """
    T = len(x)
    Q = min(chunk, T)
    pad = -T % Q
    x, log_a, B, C = (torch.cat([v, v.new_zeros(pad, *v.shape[1:])]).unflatten(0, (-1, Q)) for v in (x, log_a, B, C))
    log_a = log_a.permute(0, 2, 3, 1)  # [c, B, H, Q]; padding has a = 1 and x = 0: state unchanged
    decay = torch.exp(_segment_sums(log_a))  # [c, B, H, Q(t), Q(s)]
    y = torch.einsum("cqbn,csbn,cbhqs,csbhp->cqbhp", C, B, decay, x)
    chunk_states = torch.einsum("cbhs,csbn,csbhp->cbhpn", decay[..., -1, :], B, x)
    from_start = torch.exp(log_a.cumsum(-1))  # [c, B, H, Q] decay from the chunk's start to t
    h, previous = h0, []
    for c in range(len(x)):
        previous.append(h)
        h = from_start[c, ..., -1, None, None] * h + chunk_states[c]
    y = y + torch.einsum("cqbn,cbhpn,cbhq->cqbhp", C, torch.stack(previous), from_start)
    return y.flatten(0, 1)[:T], h


class _SSD(Mixer):
    """The Mamba-2 mixer (Dao & Gu 2024, arXiv:2405.21060, fig. 6), pure PyTorch.

    in_proj -> (z, x, B, C, dt); (x, B, C) -> causal depthwise conv -> SiLU; per head a scalar decay
    a_t = exp(dt_t A) (A = -exp(A_log), one per head) and h_t = a_t h_t-1 + dt_t x_t B_t^T with heads of
    size P; y = C_t h_t + D x -> RMSNorm(y * SiLU(z)) -> out_proj. Episode starts set a_t to 0.
    """

    def __init__(self, width: int, cfg):
        super().__init__()
        inner, n, p = cfg.mamba_expand * width, cfg.mamba_state, cfg.mamba2_head_dim
        assert inner % p == 0, "mamba_expand * core_hidden must be divisible by mamba2_head_dim"
        heads = inner // p
        self.sizes = (inner, n, heads, p)
        self.in_proj = nn.Linear(width, 2 * inner + 2 * n + heads, bias=False)
        self.conv = nn.Conv1d(inner + 2 * n, inner + 2 * n, cfg.mamba_conv, groups=inner + 2 * n)
        self.dt_bias = nn.Parameter(_dt_bias(heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1, 16)))
        self.skip = nn.Parameter(torch.ones(heads))
        self.norm = _RMSNorm(inner)
        self.out_proj = nn.Linear(inner, width, bias=False)
        self.conv_channels, self.state_shape = inner + 2 * n, (heads, p, n)

    def forward(self, u, window, h0, starts, last):
        """u [T, B, D], window [K-1, B, E + 2N], h0 [B, heads, P, N] -> (y [T, B, D], window, h_T)."""
        inner, n, heads, p = self.sizes
        z, xbc, dt = self.in_proj(u).split([inner, inner + 2 * n, heads], -1)
        xbc, window = _causal_conv(xbc, window, self.conv.weight[:, 0], self.conv.bias, last)
        x, B, C = F.silu(xbc).split([inner, n, n], -1)
        x = x.unflatten(-1, (heads, p))  # [T, B, heads, P]
        dt = F.softplus(dt + self.dt_bias)  # [T, B, heads]
        A = -torch.exp(self.A_log)
        if len(u) == 1:  # acting: the recurrent step
            a = torch.exp(dt[0] * A) * (1 - starts[0, :, None])
            h = a[..., None, None] * h0 + (dt[0, ..., None] * x[0])[..., None] * B[0, :, None, None]
            y = torch.einsum("bhpn,bn->bhp", h, C[0])[None]
        elif _kernel_ok(mamba_chunk_scan_combined, u, starts):
            y, h = mamba_chunk_scan_combined(*(v.transpose(0, 1).contiguous() for v in (x, dt)), A,
                                             *(v.transpose(0, 1)[:, :, None].contiguous() for v in (B, C)),
                                             SSD_CHUNK, initial_states=h0 * (1 - starts[0, :, None, None, None]),
                                             return_final_states=True)
            y = y.transpose(0, 1)
        else:
            log_a = (dt * A).masked_fill(starts[..., None] > 0, float("-inf"))
            y, h = _ssd(x * dt[..., None], log_a, B, C, h0, SSD_CHUNK)
        y = (y + self.skip[:, None] * x).flatten(-2)
        return self.out_proj(self.norm(y * F.silu(z))), window, h


class Mamba2Core(MambaCore):
    """MambaCore with the Mamba-2 (SSD) mixer."""

    mixer_type = _SSD
