"""Forward + backward of Mamba's selective scan on CPU: the loop through autograd that `_selective_scan` used
before (exp, mul, baddbmm, bmm a step, each recorded) against rlfoundry's hand-written op
(`rlfoundry.nets.cores.mamba._SelectiveScan`, what MambaCore trains with on CPU).

dt, u [T, B, E], A [E, N], B, C [T, B, N], h0 = 0 [B, E, N] (a replayed sequence starts from zeroed memory), an
episode start in every env; T = 32, E = 128, N = 16 (core_hidden 64, mamba_expand 2), one torch thread. The loss
is y.sum(), gradients of dt, A, u, B and C. Reports the median of --repeats timings of --calls calls each, in ms
per call; the op's first calls fill its buffer pool, as the first updates of a run do.

    python benchmarks/mamba_scan_speed.py [--batches 8,16,64] [--repeats 7] [--calls 50]
"""

from __future__ import annotations

import argparse

import torch
from common import per_call_ms

from rlfoundry.nets.cores.mamba import _SelectiveScan
from rlfoundry.run.hardware import machine


def autograd_loop(dt, A, u, B, C, h0, starts):
    """The scan as `_selective_scan` ran it on CPU before `_SelectiveScan`."""
    keep, inner_starts = 1 - starts, bool(starts[1:].any())
    h, ys = h0 * keep[0, :, None, None], []
    for t, (dt_t, u_t, b_t, c_t) in enumerate(zip(*(v.unbind(0) for v in (dt, u, B, C)))):
        if inner_starts and t > 0:
            h = h * keep[t, :, None, None]
        h = torch.baddbmm(torch.exp(dt_t[:, :, None] * A) * h, u_t[:, :, None], b_t[:, None, :])
        ys.append(torch.bmm(h, c_t[:, :, None]))
    return torch.stack(ys).squeeze(-1), h


def scan_inputs(steps: int, batch: int, inner: int, state: int, generator: torch.Generator):
    dt = torch.nn.functional.softplus(torch.randn(steps, batch, inner, generator=generator) - 3)
    A = -torch.arange(1, state + 1, dtype=torch.float32).repeat(inner, 1)  # Mamba's initial A
    u = torch.randn(steps, batch, inner, generator=generator) * dt
    B, C = (torch.randn(steps, batch, state, generator=generator) for _ in range(2))
    starts = torch.zeros(steps, batch)
    starts[torch.randint(1, steps, (batch,), generator=generator), torch.arange(batch)] = 1
    return [v.requires_grad_() for v in (dt, A, u, B, C)], torch.zeros(batch, inner, state), starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--inner", type=int, default=128, help="E = mamba_expand * core_hidden")
    parser.add_argument("--state", type=int, default=16, help="N = mamba_state")
    parser.add_argument("--batches", default="8,16,64")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print(machine())
    print(f"forward + backward, T = {args.steps}, E = {args.inner}, N = {args.state}, 1 thread: ms per call\n")
    print("| B | autograd loop | _SelectiveScan | speed-up |")
    print("| ---: | ---: | ---: | ---: |")
    for batch in map(int, args.batches.split(",")):
        inputs, h0, starts = scan_inputs(args.steps, batch, args.inner, args.state, generator)
        calls = {
            "loop": lambda v=inputs, h0=h0, s=starts: autograd_loop(*v, h0, s)[0].sum().backward(),
            "op": lambda v=inputs, h0=h0, s=starts: _SelectiveScan.apply(*v, h0, 1 - s)[0].sum().backward(),
        }
        ms = {name: per_call_ms(call, args.calls, args.repeats) for name, call in calls.items()}
        print(f"| {batch} | {ms['loop']:.2f} | {ms['op']:.2f} | {ms['loop'] / ms['op']:.1f}× |", flush=True)


if __name__ == "__main__":
    main()
