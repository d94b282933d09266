"""GRU core: nn.GRU with LSTMCore's episode-start handling; training on CPU replays sequences through a hand-written
op (forward and backward over the whole sequence), since PyTorch has no oneDNN GRU."""

from __future__ import annotations

import torch
from torch import nn

from rlfoundry.nets.cores.base import _starts
from rlfoundry.nets.cores.lstm import LSTMCore


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

    def forward(self, x, state, episode_starts, final_state: bool = True):
        if (x.device.type != "cpu" or self.rnn.num_layers != 1 or len(x) == 1 or not torch.is_grad_enabled()
                or torch.is_autocast_enabled("cpu")):  # bf16 autocast: nn.GRU, which autocast knows
            return super().forward(x, state, episode_starts, final_state)
        keep = None if episode_starts is None else 1 - _starts(episode_starts, x)
        y = _GRUSequence.apply(x, state[0][0], *self._cell_weights(), keep)
        return y, (y[-1:],)
