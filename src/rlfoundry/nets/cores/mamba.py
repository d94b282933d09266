"""Mamba core (Gu & Dao 2023): selective state-space mixers in pre-norm residual blocks; the pieces Mamba-2 shares
(the causal convolution, the norm, the kernel check, the block stack)."""

from __future__ import annotations

import math
import threading
import weakref
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from rlfoundry.nets.cores.base import Core, _last_start, _starts

# Optional CUDA kernel from https://github.com/state-spaces/mamba, used where it imports: Mamba's selective scan is a
# compiled extension.
try:
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
except ImportError:
    selective_scan_fn = None


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
    if len(dt) > 1 or torch.is_grad_enabled():  # under bf16 autocast in float32, as the step below
        return _SelectiveScan.apply(dt, A, u, B, C, h0, 1 - starts if bool(starts.any()) else None)
    if torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            return _selective_scan(*(v.float() for v in (dt, A, u, B, C, h0, starts)))
    # acting: the state masked by multiplication, without looking for a start (no host read: a CUDA graph holds it)
    h = torch.mul(dt[0, :, :, None], A).exp_().mul_(h0 * (1 - starts[0, :, None, None]))
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


class Mixer(nn.Module):
    """A Mamba block's mixer: what its state holds per layer (the conv window's channels, the SSM state's shape)."""

    conv_channels: int
    state_shape: tuple[int, ...]


class _SelectiveSSM(Mixer):
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


class MambaCore(Core):
    """A stack of `core_layers` pre-norm residual Mamba blocks, h + mixer(RMSNorm(h)), after an input
    projection to core_hidden and before a final RMSNorm. On CUDA with mamba_ssm installed, calls
    without episode starts after t = 0 use its kernels; otherwise the pure-PyTorch scan.
    """

    mixer_type: type[Mixer] = _SelectiveSSM

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
        w, layers, mixer = self.proj.weight, len(self.mixers), cast(Mixer, self.mixers[0])
        conv = w.new_zeros(self.conv_width - 1, batch_size, layers, mixer.conv_channels)
        return conv, w.new_zeros(layers, batch_size, *mixer.state_shape)

    def forward(self, x, state, episode_starts, final_state: bool = True):
        windows, ssm = state
        starts = _starts(episode_starts, x)
        last = None  # no episode start in this call: nothing to mask
        if episode_starts is not None and len(x) == 1:  # acting: 0 at a start, else -1 (no host read)
            last = starts.long() - 1
        elif episode_starts is not None and bool(starts.any()):
            last = _last_start(starts)
        h, new_windows, new_ssm = self.proj(x), [], []
        for layer, (norm, mixer) in enumerate(zip(self.norms, self.mixers, strict=True)):
            y, window, s = mixer(norm(h), windows[:, :, layer], ssm[layer], starts, last)
            h = h + y
            new_windows.append(window)
            new_ssm.append(s)
        if len(self.mixers) == 1 and len(x) == 1:  # acting: no copy
            return self.norm(h), (new_windows[0].unsqueeze(2), new_ssm[0].unsqueeze(0))
        return self.norm(h), (torch.stack(new_windows, 2), torch.stack(new_ssm))
