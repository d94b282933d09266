"""LSTM core: nn.LSTM (cuDNN on GPU, oneDNN on CPU) over whole sequences, the state zeroed where episodes start."""

from __future__ import annotations

import functools
import itertools
from typing import cast

import torch
from torch import nn

from rlfoundry.nets.cores.base import Core, _starts


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
    skips the reset arithmetic too. When the caller needs no final state (`final_state=False`: a replay's
    target or trained unroll), the episodes' segments are instead packed side by side as a batch of their own,
    each from its own start state, and run in one call: a native call costs ~0.4 ms on a CPU whatever its
    length, and a batch of short windows crosses an episode start at most steps.
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

    def forward(self, x, state, episode_starts, final_state: bool = True):
        if len(x) == 1 and self.rnn.num_layers == 1:  # acting: one step through the cell op (no sequence set-up)
            state = tuple(s[0] for s in state)
            if episode_starts is not None:
                alive = 1 - _starts(episode_starts, x)[0, :, None]
                state = tuple(s * alive for s in state)
            if isinstance(self.rnn, nn.LSTM):
                state = torch.lstm_cell(x[0], state, *self._cell_weights())
            else:
                state = (torch.gru_cell(x[0], state[0], *self._cell_weights()),)
            return state[0].unsqueeze(0), tuple(s.unsqueeze(0) for s in state)
        if (torch.is_autocast_enabled("cpu") and x.device.type == "cpu" and isinstance(self.rnn, nn.LSTM)
                and not cpu_runs_bf16_lstm()):
            with torch.autocast("cpu", enabled=False):  # oneDNN has no bf16 LSTM here: the LSTM runs in float32
                return self.forward(x.float(), tuple(s.float() for s in state), episode_starts, final_state)
        cuts, keep = [0, len(x)], None  # no starts (sequences replayed in training): one native call
        if episode_starts is not None:
            keep = 1 - _starts(episode_starts, x)
            inside = keep[1:].lt(1).any(1).nonzero().flatten()
            if not final_state and len(inside):
                return self._segments(x, tuple(s * keep[0, :, None] for s in state), keep), None
            cuts[1:1] = (inside + 1).tolist()
        ys = []
        for t0, t1 in itertools.pairwise(cuts):
            if keep is not None:
                state = tuple(s * keep[t0, :, None] for s in state)
            y, state = self.rnn(x[t0:t1], state if len(state) == 2 else state[0])
            state = state if isinstance(state, tuple) else (state,)
            ys.append(y)
        return ys[0] if len(ys) == 1 else torch.cat(ys), state

    def _segments(self, x: torch.Tensor, state: tuple[torch.Tensor, ...], keep: torch.Tensor) -> torch.Tensor:
        """The outputs [T, B, H] of one native call over every episode segment of x [T, B, D]: segment k of env b
        (cut where keep [T, B] is 0 after t = 0) becomes batch entry offset[b] + k, padded at its end, the first
        starting from `state` and the others from zeros."""
        T, B = keep.shape
        begins = keep.lt(1)
        begins[0] = False
        segment = begins.long().cumsum(0)  # [T, B]: the segment of each step within its env
        counts = segment[-1] + 1
        offset = counts.cumsum(0) - counts
        column = offset + segment  # [T, B]: the segment's batch entry
        steps = torch.arange(T, device=x.device)[:, None].expand(T, B)
        row = steps - torch.where(begins, steps, 0).cummax(0).values  # [T, B]: the step within its segment
        size, length = (int(v) for v in torch.stack([counts.sum(), row.max() + 1]).tolist())
        packed = x.new_zeros(length, size, x.shape[-1]).index_put((row, column), x)
        starts = tuple(s.new_zeros(len(s), size, s.shape[-1]).index_copy(1, offset, s) for s in state)
        y, _ = self.rnn(packed, starts if len(starts) == 2 else starts[0])
        return y[row, column]
