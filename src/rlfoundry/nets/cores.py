"""Cores: where memory lives. One interface for all of them (DESIGN.md):

    initial_state(batch_size) -> state                      # a flat tuple of tensors, or None
    forward(x[T, B, D], state, episode_starts[T, B]) -> (y[T, B, H], new_state)

`episode_starts` (bool or 0/1 float; None = no starts) resets memory inside a sequence, so training
on stored sequences and acting step by step give the same outputs. The identity core is the
feed-forward case.

State layout: every state tensor has the env batch on axis 1, so `tuple(s[:, idx] for s in state)`
selects envs and a buffer can store each tensor per step. Zero state means "fresh episode".

    lstm    (h [L, B, H], c [L, B, H])                 gru: (h [L, B, H],)
    trxl    (memory [M, B, L, H], length [1, B])         gtrxl: same
    mamba   (conv [K-1, B, L, E], ssm [L, B, E, N])
    mamba2  (conv [K-1, B, L, E + 2N], ssm [L, B, E / P, P, N])

L = core_layers, H = core_hidden, M = memory_length, K = mamba_conv, N = mamba_state,
E = mamba_expand * H, P = mamba2_head_dim. All state tensors are floating point (TrXL's `length`,
the count of memory steps in the current episode, too). Only TrXL memory is stored detached.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
import weakref
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

# Optional CUDA kernels from https://github.com/state-spaces/mamba, each used where it imports: Mamba's selective
# scan is a compiled extension, Mamba-2's chunked scan is Triton code.
try:
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
except ImportError:
    selective_scan_fn = None
try:
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
except ImportError:
    mamba_chunk_scan_combined = None

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
SSD_CHUNK = 64  # Mamba-2 chunk length for the pure-PyTorch SSD


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

    def forward(self, x: torch.Tensor, state: None, episode_starts: torch.Tensor | None) -> tuple[torch.Tensor, None]:
        return x, None


@functools.cache
def cpu_runs_bf16_lstm() -> bool:
    """Whether oneDNN has a bfloat16 LSTM on this CPU: only with native bf16 arithmetic (AVX-512 BF16, AMX).
    Elsewhere (e.g. AVX2-only CPUs) nn.LSTM under bf16 autocast fails with "could not create a primitive
    descriptor for the LSTM forward propagation primitive"."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


class LSTMCore(Core):
    """torch.nn.LSTM (cuDNN on GPU), state zeroed at episode starts.

    The sequence is cut at every step where some env starts an episode; each piece is one native call
    after multiplying the state by (1 - start). With no starts after t = 0 that is a single call, and with
    none at all (training replays sequences that never reset inside, `buffers.rollout.minibatches`) it
    skips the reset arithmetic too.
    """

    rnn_type: type[nn.LSTM] | type[nn.GRU] = nn.LSTM

    def __init__(self, in_features: int, cfg):
        super().__init__()
        self.rnn = self.rnn_type(in_features, cfg.core_hidden, num_layers=cfg.core_layers)
        self.out_features = cfg.core_hidden

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        w = self._weight("weight_hh_l0")
        zeros = w.new_zeros(self.rnn.num_layers, batch_size, self.rnn.hidden_size)
        return (zeros, zeros.clone()) if isinstance(self.rnn, nn.LSTM) else (zeros,)

    def _weight(self, name: str) -> torch.Tensor:
        # RNNBase sets its parameters by name at run time: Module.__getattr__ types them Tensor | Module
        return cast(torch.Tensor, getattr(self.rnn, name))

    def _cell_weights(self) -> tuple[torch.Tensor, ...]:
        return (self._weight("weight_ih_l0"), self._weight("weight_hh_l0"), self._weight("bias_ih_l0"),
                self._weight("bias_hh_l0"))

    def forward(self, x, state, episode_starts):
        if len(x) == 1 and self.rnn.num_layers == 1:  # acting: one step through the cell op (no sequence set-up)
            state = tuple(s[0] for s in state)
            if episode_starts is not None:
                keep = 1 - _starts(episode_starts, x)[0, :, None]
                state = tuple(s * keep for s in state)
            if isinstance(self.rnn, nn.LSTM):
                state = torch.lstm_cell(x[0], state, *self._cell_weights())
            else:
                state = (torch.gru_cell(x[0], state[0], *self._cell_weights()),)
            return state[0].unsqueeze(0), tuple(s.unsqueeze(0) for s in state)
        if (torch.is_autocast_enabled("cpu") and x.device.type == "cpu" and isinstance(self.rnn, nn.LSTM)
                and not cpu_runs_bf16_lstm()):
            with torch.autocast("cpu", enabled=False):  # oneDNN has no bf16 LSTM here: the LSTM runs in float32
                return self.forward(x.float(), tuple(s.float() for s in state), episode_starts)
        cuts, keep = [0, len(x)], None  # no starts (sequences replayed in training): one native call
        if episode_starts is not None:
            keep = 1 - _starts(episode_starts, x)
            cuts[1:1] = (keep[1:].lt(1).any(1).nonzero().flatten() + 1).tolist()
        ys = []
        for t0, t1 in itertools.pairwise(cuts):
            if keep is not None:
                state = tuple(s * keep[t0, :, None] for s in state)
            y, state = self.rnn(x[t0:t1], state if len(state) == 2 else state[0])
            state = state if isinstance(state, tuple) else (state,)
            ys.append(y)
        return ys[0] if len(ys) == 1 else torch.cat(ys), state


class _GRUSequence(torch.autograd.Function):
    """One GRU layer over a whole sequence with a hand-written backward, for training on CPU.

    PyTorch has no oneDNN GRU, so on CPU nn.GRU's forward and backward run step by step through autograd, many
    small ops a step. Measured at x [32, 9, 64], hidden 64, one thread: nn.GRU forward + backward 3.0 ms, this op
    1.4 ms, nn.LSTM (oneDNN) 0.7 ms (benchmarks/gru_sequence_speed.py); GRU PPO on CartPole-v1:ppo-masked went
    from 0.24× to 0.39× the steps/s of feed-forward PPO. The input projection (forward) and the gradients of x
    and of all weights (backward) are one matmul each over all steps; only the h-dependent part loops over
    time: 5 ops a step forward, 3 backward, writing into preallocated buffers. Without gradients nn.GRU is as
    fast, so it stays for inference.

    nn.GRU's equations and weight layout (rows r, z, n):
        r = σ(W_ir x + b_ir + W_hr h + b_hr),  z = σ(W_iz x + b_iz + W_hz h + b_hz)
        n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),  h' = (1 − z) ⊙ n + z ⊙ h
    x [T, B, D], h0 [B, H] -> y [T, B, H] (the final state is y[-1]); `keep` [T, B] (None: no resets)
    multiplies h by keep[t] before step t, 1 - episode starts.
    """

    @staticmethod
    def forward(ctx, x, h0, w_ih, w_hh, b_ih, b_hh, keep=None):
        T, B, H = len(x), x.shape[1], len(w_hh) // 3
        # a[t] = [W_ir x + b_ir + b_hr, W_iz x + b_iz + b_hz, b_hn]; the loop adds W_hh h: then σ over the r, z part
        a = torch.addmm(b_ih, x.reshape(T * B, -1), w_ih.t()).view(T, B, 3 * H)
        gi_n = a[..., 2 * H :].clone()
        a[..., : 2 * H] += b_hh[: 2 * H]
        a[..., 2 * H :] = b_hh[2 * H :]
        n, y = x.new_empty(T, B, H), x.new_empty(T, B, H)
        w_hh_t, h = w_hh.t().contiguous(), h0
        keeps = [None] * T if keep is None else keep[:, :, None].unbind(0)
        steps = zip(a.unbind(0), a[..., : 2 * H].unbind(0), a[..., :H].unbind(0), a[..., H : 2 * H].unbind(0),
                    a[..., 2 * H :].unbind(0), gi_n.unbind(0), n.unbind(0), y.unbind(0), keeps)
        for a_t, rz, r, z, gh_n, gi_n_t, n_t, y_t, keep_t in steps:
            if keep_t is not None:
                h = h * keep_t
            a_t.addmm_(h, w_hh_t)
            rz.sigmoid_()
            torch.addcmul(gi_n_t, r, gh_n, out=n_t).tanh_()
            h = torch.lerp(n_t, h, z, out=y_t)
        ctx.save_for_backward(x, h0, w_ih, w_hh, keep, a, n, y)  # a now holds [r, z, W_hn h + b_hn]
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        x, h0, w_ih, w_hh, keep, a, n, y = ctx.saved_tensors
        T, B, H = y.shape
        h_prev = torch.cat([h0[None], y[:-1]])  # the h each step started from
        if keep is not None:
            h_prev *= keep[:, :, None]
        r, z, gh_n = a.split(H, 2)
        # Every pre-activation gradient of step t is dL/dh_t times a coefficient known from the forward pass:
        # g[t] = dh ⊙ coef[t], slots [dL/d(r pre-act), dL/d(z pre-act), dL/d(W_hn h + b_hn), dL/d(W_in x + b_in)].
        d_n = (1 - z) * (1 - n * n)
        coef = torch.stack([d_n * gh_n * r * (1 - r), (h_prev - n) * z * (1 - z), d_n * r, d_n], 2)
        g = torch.empty_like(coef)
        g_hh = g.view(T, B, 4 * H)[..., : 3 * H]  # the hh pre-activation gradients [r, z, n] of each step
        grad_y = grad_y.contiguous()
        dh, carry = grad_y[-1].clone(), torch.empty_like(grad_y[-1])  # dh: dL/dh_t, carried back in time
        dh_slots = dh[:, None]
        keeps = [None] * T if keep is None else keep[:, :, None].unbind(0)
        steps = list(zip(coef.unbind(0), g.unbind(0), g_hh.unbind(0), z.unbind(0), keeps))
        grad_h0 = None
        for t in range(T - 1, -1, -1):
            coef_t, g_t, g_hh_t, z_t, keep_t = steps[t]
            torch.mul(dh_slots, coef_t, out=g_t)
            if t == 0 and not ctx.needs_input_grad[1]:
                break
            # dL/dh_{t-1} = grad_y[t - 1] + keep[t] ⊙ (dh ⊙ z + g_hh W_hh)
            if keep_t is None and t > 0:
                torch.addcmul(grad_y[t - 1], dh, z_t, out=carry)
                torch.addmm(carry, g_hh_t, w_hh, out=dh)
                continue
            carry = torch.addmm(dh * z_t, g_hh_t, w_hh)
            if keep_t is not None:
                carry *= keep_t
            if t == 0:
                grad_h0 = carry
            else:
                torch.add(grad_y[t - 1], carry, out=dh)
        g_hh = g_hh.reshape(T * B, 3 * H)
        g_ih = torch.cat([g[:, :, :2], g[:, :, 3:]], 2).view(T * B, 3 * H)
        needs = ctx.needs_input_grad
        return (g_ih.mm(w_ih).view_as(x) if needs[0] else None, grad_h0,
                g_ih.t().mm(x.reshape(T * B, -1)) if needs[2] else None,
                g_hh.t().mm(h_prev.view(T * B, H)) if needs[3] else None,
                g_ih.sum(0) if needs[4] else None, g_hh.sum(0) if needs[5] else None, None)


class GRUCore(LSTMCore):
    """torch.nn.GRU with the same episode-start handling as LSTMCore. Training on CPU (one layer, several steps,
    gradients on) replays sequences through `_GRUSequence` instead, episode starts as a per-step mask; nn.GRU
    still holds the parameters."""

    rnn_type = nn.GRU

    def forward(self, x, state, episode_starts):
        if (x.device.type != "cpu" or self.rnn.num_layers != 1 or len(x) == 1 or not torch.is_grad_enabled()
                or torch.is_autocast_enabled("cpu")):  # bf16 autocast: nn.GRU, which autocast knows
            return super().forward(x, state, episode_starts)
        keep = None if episode_starts is None else 1 - _starts(episode_starts, x)
        y = _GRUSequence.apply(x, state[0][0], *self._cell_weights(), keep)
        return y, (y[-1:],)


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

    def forward(self, x, state, episode_starts):
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


def _causal_conv(x, window, weight, bias, last):
    """Depthwise causal conv over [window (K-1 past inputs), x[T, B, C]] with weight [C, K].

    Inputs from before each step's episode start are masked, as zeros are what a fresh episode sees.
    The returned window (last K-1 inputs) is masked for the episode of the final step, so a later
    call can use it as is. `last` is `_last_start`'s [T, B], or None where this call has no episode start.

    One multiply-add a tap over all steps (shifted views of the padded inputs): at T = 32, B = 13, C = 128,
    K = 4, one thread, forward and backward take 0.43 ms against 1.8 ms for an einsum over the unfolded inputs.
    """
    T, K = len(x), weight.shape[-1]
    if last is not None and T == 1:  # acting: an episode start hides the whole window
        window, last = window * (last[0] < 0)[:, None], None
    padded = torch.cat([window, x])  # [K-1+T, B, C]: tap k of step t is padded[t + k]
    keep = None
    if last is not None:
        first = torch.where(last >= 0, K - 1 + last, 0)  # [T, B] first padded index in t's episode
        taps = torch.arange(T, device=x.device)[:, None, None] + torch.arange(K, device=x.device)
        keep = (taps >= first[..., None]).to(x.dtype)  # [T, B, K]
    out = torch.addcmul(bias, x, weight[:, K - 1])  # the last tap, the step's own input, is never masked
    for k in range(K - 1):
        tap = padded[k : k + T] if keep is None else padded[k : k + T] * keep[:, :, k, None]
        out = torch.addcmul(out, tap, weight[:, k])
    return out, padded[T:] if keep is None else padded[T:] * keep[-1, :, 1:].T[..., None]


class _BufferPool:
    """Reused flat CPU buffers for `_SelectiveScan`'s [T, B, E, N] tensors.

    A fresh multi-MB tensor can cost more than the arithmetic on it: freed blocks that big go back to the OS
    (glibc's mmap and trim thresholds), so every new one page-faults. In a PPO update at T = 32, B = 13, E = 128,
    N = 16, each 3.4 MB product took 1.2 ms into a fresh tensor and under 0.1 ms into a reused one.
    `take` returns a view of the smallest free buffer that is big enough, else a new tensor; `give` hands
    buffers back: a scan's saved decays and states when its autograd node is freed (a retained graph keeps
    them), its backward's work buffers when the backward ends. `give` may run from a finalizer at any point,
    so it only appends to `returned`, which `take` moves to `free` under the lock. Inference tensors are never
    pooled (they could not be written or saved outside inference mode).
    """

    def __init__(self, max_buffers: int = 8, max_bytes: int = 64 << 20):
        self.free: list[torch.Tensor] = []  # flat, biggest first
        self.returned: list[torch.Tensor] = []
        self.max_buffers, self.max_bytes = max_buffers, max_bytes
        self.lock = threading.Lock()

    def take(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        n = math.prod(shape)
        with self.lock:
            while self.returned:
                t = self.returned.pop()
                self.free.append((t if t._base is None else t._base).view(-1))
            self.free.sort(key=torch.Tensor.numel, reverse=True)  # within the limits, keep the biggest
            while len(self.free) > self.max_buffers or sum(b.nbytes for b in self.free) > self.max_bytes:
                self.free.pop()
            if not torch.is_inference_mode_enabled():
                for i in range(len(self.free) - 1, -1, -1):
                    if self.free[i].numel() >= n and self.free[i].dtype == like.dtype:
                        return self.free.pop(i)[:n].view(shape)
        return like.new_empty(shape)

    def give(self, *tensors: torch.Tensor) -> None:
        self.returned.extend(t for t in tensors if not t.is_inference())


_SCAN_BUFFERS = _BufferPool()


class _SelectiveScan(torch.autograd.Function):
    """`_selective_scan` on CPU with a hand-written backward, for training (see `_selective_scan` for why).

    Forward: the decays exp(dt A) ⊙ keep and the inputs u ⊗ B of all steps at once ([T, B, E, N] each), then
    one op a step, h_t = decay_t ⊙ h_{t-1} + input_t written over input_t (so the inputs become the states),
    then y_t = h_t C_t for all steps in one bmm. Backward: dL/dh_t = dy_t ⊗ C_t + decay_{t+1} ⊙ dL/dh_{t+1},
    one op a step written over the precomputed dy ⊗ C, then each gradient in one batched op over all steps.
    The decay of step t holds keep[t] = 1 - starts[t] (None: no resets), so a reset is exact and the chain
    rule through it needs nothing more: dL/d(dt_t A) = dL/dh_t ⊙ decay_t ⊙ h_{t-1}. The [T, B, E, N] tensors
    come from `_SCAN_BUFFERS`.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)  # bf16 autocast: the scan in float32
    def forward(ctx, dt, A, u, B, C, h0, keep=None):
        (T, Bn, E), N = dt.shape, A.shape[1]
        decay, hs = (_SCAN_BUFFERS.take((T, Bn, E, N), dt) for _ in range(2))
        torch.mul(dt[..., None], A, out=decay).exp_()
        if keep is not None:
            decay.mul_(keep[..., None, None])
        torch.mul(u[..., None], B[:, :, None], out=hs)  # the inputs u_t B_t^T, made the states h_t in place
        h = h0
        for decay_t, h_t in zip(decay.unbind(0), hs.unbind(0)):
            h = h_t.addcmul_(decay_t, h)
        # y_t = C_t^T h_t^T, a batch of (row vector x matrix) products: MKL's batched matrix x vector is slower
        y = torch.bmm(C.reshape(T * Bn, 1, N), hs.view(T * Bn, E, N).transpose(1, 2)).view(T, Bn, E)
        ctx.save_for_backward(dt, A, u, B, C, h0, decay, hs)
        weakref.finalize(ctx, _SCAN_BUFFERS.give, decay, hs).atexit = False
        return y, hs[-1].clone()

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_h):
        dt, A, u, B, C, h0, decay, hs = ctx.saved_tensors
        (T, Bn, E, N), needs = hs.shape, ctx.needs_input_grad
        grad_y = grad_y.contiguous()
        dh = _SCAN_BUFFERS.take(hs.shape, hs)  # dy_t ⊗ C_t, made dL/dh_t in place, last step first
        torch.mul(grad_y[..., None], C[:, :, None], out=dh)
        dh[-1] += grad_h
        for t in range(T - 2, -1, -1):
            dh[t].addcmul_(decay[t + 1], dh[t + 1])
        flat = dh.view(T * Bn, E, N)
        grad_u = torch.bmm(B.reshape(T * Bn, 1, N), flat.transpose(1, 2)).view(T, Bn, E) if needs[2] else None
        grad_B = torch.bmm(u.reshape(T * Bn, 1, E), flat).view(T, Bn, N) if needs[3] else None
        grad_C = torch.bmm(grad_y.view(T * Bn, 1, E), hs.view(T * Bn, E, N)).view(T, Bn, N) if needs[4] else None
        grad_dt = grad_A = grad_h0 = None
        if needs[5]:
            grad_h0 = decay[0] * dh[0]
        if needs[0] or needs[1]:
            s = dh.mul_(decay)  # times h_{t-1}: dL/d(dt_t A)
            s[0] *= h0
            s[1:] *= hs[:-1]
            if needs[0]:
                scaled = torch.mul(s, A, out=_SCAN_BUFFERS.take(hs.shape, hs)).view(-1, N)
                grad_dt = torch.mv(scaled, A.new_ones(N)).view(T, Bn, E)  # the sum over N: 2× faster than sum(-1)
                _SCAN_BUFFERS.give(scaled)
            if needs[1]:
                grad_A = s.mul_(dt[..., None]).sum((0, 1))
        _SCAN_BUFFERS.give(dh)
        return grad_dt, grad_A, grad_u, grad_B, grad_C, grad_h0, None


def _selective_scan(dt, A, u, B, C, h0, starts) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba's scan: y_t = h_t C_t with h_t = exp(dt_t A) ⊙ h_{t-1} + u_t B_t^T, the state zeroed where
    starts[t]; dt and u [T, B, E], A [E, N], B and C [T, B, N], h0 [B, E, N], starts [T, B] (0/1). Returns
    (y [T, B, E], h_T).

    On a GPU, the log-depth parallel scan over the materialised [T, B, E, N] decays and inputs. On a CPU the
    parallel scan's O(T log T) work on such tensors is memory-bound, so a loop over time, `_SelectiveScan`: one op
    a step forward and one backward, everything else batched over all steps, a hand-written backward and reused
    buffers. The loop through autograd it replaces (exp, mul, baddbmm, bmm a step, all recorded, and their
    backward: thousands of small ops) took 6-7 ms forward + backward at T = 32, B = 8, E = 128, N = 16 on one
    thread, `_SelectiveScan` 1.8-2.3 ms; 33 against 17 ms at B = 64 (benchmarks/mamba_scan_speed.py). With it
    (and `_causal_conv`'s taps), Mamba PPO on CartPole-v1:ppo-masked went from 0.09× to 0.16-0.18× the steps/s of
    feed-forward PPO. Acting (T = 1, no gradients) is the plain recurrent step, in place.
    """
    if dt.is_cuda:
        decay = torch.exp(dt[..., None] * A) * (1 - starts)[..., None, None]
        hs = _parallel_scan(decay, u[..., None] * B[:, :, None], h0)
        return torch.einsum("tben,tbn->tbe", hs, C), hs[-1]
    resets = bool(starts.any())
    if len(dt) > 1 or torch.is_grad_enabled():  # under bf16 autocast in float32, as the step below
        return _SelectiveScan.apply(dt, A, u, B, C, h0, 1 - starts if resets else None)
    if torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            return _selective_scan(*(v.float() for v in (dt, A, u, B, C, h0, starts)))
    h = torch.mul(dt[0, :, :, None], A).exp_().mul_(h0 * (1 - starts[0, :, None, None]) if resets else h0)
    h.baddbmm_(u[0, :, :, None], B[0, :, None, :])  # h = exp(dt A) ⊙ h0 + u B^T
    return torch.bmm(C[0, :, None, :], h.transpose(1, 2)).transpose(0, 1), h


def _parallel_scan(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """Hillis & Steele's (1986) parallel prefix: ceil(log2 T) vectorised steps, composing
    (a1, b1) then (a2, b2) into (a2 a1, a2 b1 + b2). Products only, no logs, so a_t = 0 (a reset)
    is exact. With T = 1 it is the recurrent step.
    """
    b = torch.cat([a[:1] * h0 + b[:1], b[1:]])
    step = 1
    while step < len(a):
        b = torch.cat([b[:step], a[step:] * b[:-step] + b[step:]])
        a = torch.cat([a[:step], a[step:] * a[:-step]])
        step *= 2
    return b


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


def _kernel_ok(kernel, x: torch.Tensor, starts: torch.Tensor) -> bool:
    """mamba_ssm kernels take no per-step resets, so use them only without starts after t = 0;
    acting (T = 1) is cheaper as the plain recurrent step."""
    return kernel is not None and x.is_cuda and len(x) > 1 and not bool(starts[1:].any())


class _RMSNorm(nn.RMSNorm):
    """nn.RMSNorm that normalises in its weight's dtype: under bf16 autocast its input is bf16 (from the
    autocast matmuls), which torch's fused kernel refuses with a warning, falling back to the slow path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(self.weight.dtype))


def _dt_bias(size: int, dt_min: float = 1e-3, dt_max: float = 0.1) -> torch.Tensor:
    """Inverse softplus of dt ~ log-uniform[dt_min, dt_max], Mamba's dt initialisation."""
    dt = torch.exp(torch.rand(size) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return dt + torch.log(-torch.expm1(-dt))


class _SelectiveSSM(nn.Module):
    """The Mamba mixer (Gu & Dao 2023, arXiv:2312.00752, sec. 3 and fig. 3), pure PyTorch.

    in_proj -> (x, z); x -> causal depthwise conv -> SiLU -> x_proj -> (dt, B, C);
    dt = softplus(dt_proj(dt)); h_t = exp(dt A) h_{t-1} + dt B_t x_t with A = -exp(A_log) (S4D-real);
    y = (C_t h_t + D x) * SiLU(z) -> out_proj. Episode starts set the decay exp(dt A) to 0.
    """

    def __init__(self, width: int, cfg):
        super().__init__()
        inner, n = cfg.mamba_expand * width, cfg.mamba_state
        self.dt_rank = math.ceil(width / 16)  # the paper's default rank for dt
        self.in_proj = nn.Linear(width, 2 * inner, bias=False)
        self.conv = nn.Conv1d(inner, inner, cfg.mamba_conv, groups=inner)
        self.x_proj = nn.Linear(inner, self.dt_rank + 2 * n, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, inner)
        with torch.no_grad():
            self.dt_proj.bias.copy_(_dt_bias(inner))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(inner, 1))
        self.skip = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, width, bias=False)
        self.conv_channels, self.state_shape = inner, (inner, n)

    def forward(self, u, window, h0, starts, last):
        """u [T, B, D], window [K-1, B, E], h0 [B, E, N] -> (y [T, B, D], window, h_T)."""
        x, z = self.in_proj(u).chunk(2, -1)
        x, window = _causal_conv(x, window, self.conv.weight[:, 0], self.conv.bias, last)
        x = F.silu(x)
        dt, B, C = self.x_proj(x).split([self.dt_rank, self.A_log.shape[1], self.A_log.shape[1]], -1)
        dt = F.softplus(self.dt_proj(dt))  # [T, B, E]
        A = -torch.exp(self.A_log)  # [E, N]
        if _kernel_ok(selective_scan_fn, x, starts):
            y, h = self._kernel_scan(x, dt, A, B, C, h0 * (1 - starts[0, :, None, None]))
        else:
            y, h = _selective_scan(dt, A, dt * x, B, C, h0, starts)
        return self.out_proj((y + self.skip * x) * F.silu(z)), window, h

    @staticmethod
    def _kernel_scan(x, dt, A, B, C, h0):
        """selective_scan_fn starts from h = 0; h0's part, decayed by exp(A cumsum dt), is added after."""
        y, h = selective_scan_fn(*(v.permute(1, 2, 0).contiguous() for v in (x, dt)), A.contiguous(),
                                 *(v.permute(1, 2, 0).contiguous() for v in (B, C)), return_last_state=True)
        carried = torch.exp(dt.cumsum(0)[..., None] * A) * h0  # [T, B, E, N]
        return y.permute(2, 0, 1) + torch.einsum("tben,tbn->tbe", carried, C), h + carried[-1]


class _SSD(nn.Module):
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


class MambaCore(Core):
    """A stack of `core_layers` pre-norm residual Mamba blocks, h + mixer(RMSNorm(h)), after an input
    projection to core_hidden and before a final RMSNorm. On CUDA with mamba_ssm installed, calls
    without episode starts after t = 0 use its kernels; otherwise the pure-PyTorch scan.
    """

    mixer_type: type[_SelectiveSSM] | type[_SSD] = _SelectiveSSM

    def __init__(self, in_features: int, cfg):
        super().__init__()
        width = cfg.core_hidden
        self.conv_width = cfg.mamba_conv
        self.proj = nn.Linear(in_features, width)
        self.norms = nn.ModuleList(_RMSNorm(width) for _ in range(cfg.core_layers))
        self.mixers = nn.ModuleList(self.mixer_type(width, cfg) for _ in range(cfg.core_layers))
        self.norm = _RMSNorm(width)
        self.out_features = width

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        # nn.ModuleList types its items Module; these are mixer_type's
        w, layers, mixer = self.proj.weight, len(self.mixers), cast("_SelectiveSSM | _SSD", self.mixers[0])
        conv = w.new_zeros(self.conv_width - 1, batch_size, layers, mixer.conv_channels)
        return conv, w.new_zeros(layers, batch_size, *mixer.state_shape)

    def forward(self, x, state, episode_starts):
        windows, ssm = state
        starts = _starts(episode_starts, x)
        last = None  # no episode start in this call: nothing to mask
        if episode_starts is not None and bool(starts.any()):
            last = _last_start(starts) if len(x) > 1 else starts.long() - 1  # T = 1: 0 at a start, else -1
        h, new_windows, new_ssm = self.proj(x), [], []
        for layer, (norm, mixer) in enumerate(zip(self.norms, self.mixers, strict=True)):
            y, window, s = mixer(norm(h), windows[:, :, layer], ssm[layer], starts, last)
            h = h + y
            new_windows.append(window)
            new_ssm.append(s)
        if len(self.mixers) == 1 and len(x) == 1:  # acting: no copy
            return self.norm(h), (new_windows[0].unsqueeze(2), new_ssm[0].unsqueeze(0))
        return self.norm(h), (torch.stack(new_windows, 2), torch.stack(new_ssm))


class Mamba2Core(MambaCore):
    """MambaCore with the Mamba-2 (SSD) mixer."""

    mixer_type = _SSD


CORES: dict[str, type[Core]] = {
    "identity": IdentityCore,
    "lstm": LSTMCore,
    "gru": GRUCore,
    "trxl": TrXLCore,
    "gtrxl": GTrXLCore,
    "mamba": MambaCore,
    "mamba2": Mamba2Core,
}
