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
