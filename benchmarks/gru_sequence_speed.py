"""Forward + backward of one GRU layer over a sequence on CPU: torch.nn.GRU against rlfoundry's hand-written
op (`rlfoundry.nets.cores.gru._GRUSequence`, what GRUCore trains with on CPU), nn.LSTM (oneDNN) for reference.

x [T, B, D] with T = 32, D = hidden = 64, one torch thread; the loss is y.sum(), gradients of x and the
parameters. Reports the median of --repeats timings of --calls calls each, in ms per call.

    python benchmarks/gru_sequence_speed.py [--batches 8,9,16,64] [--repeats 7] [--calls 100]
"""

from __future__ import annotations

import argparse

import torch
from common import per_call_ms
from torch import nn

from rlfoundry.nets.cores.gru import _GRUSequence
from rlfoundry.run.hardware import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batches", default="8,9,16,64")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gru, lstm = nn.GRU(args.width, args.width), nn.LSTM(args.width, args.width)
    weights = (gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0)
    print(machine())
    print(f"forward + backward, x [{args.steps}, B, {args.width}], hidden {args.width}, 1 thread: ms per call\n")
    print("| B | nn.GRU | _GRUSequence | speed-up | nn.LSTM |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for batch in map(int, args.batches.split(",")):
        x = torch.randn(args.steps, batch, args.width, requires_grad=True)
        h0 = torch.zeros(1, batch, args.width)
        calls = {
            "nn.GRU": lambda x=x, h0=h0: gru(x, h0)[0].sum().backward(),
            "op": lambda x=x, h0=h0: _GRUSequence.apply(x, h0[0], *weights).sum().backward(),
            "nn.LSTM": lambda x=x, h0=h0: lstm(x, (h0, h0))[0].sum().backward(),
        }
        ms = {name: per_call_ms(call, args.calls, args.repeats) for name, call in calls.items()}
        speedup = ms["nn.GRU"] / ms["op"]
        print(f"| {batch} | {ms['nn.GRU']:.2f} | {ms['op']:.2f} | {speedup:.1f}× | {ms['nn.LSTM']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
