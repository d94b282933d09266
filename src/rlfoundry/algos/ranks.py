"""The ranks an agent learns with when one run spans several processes (`rlfoundry train --nproc N`, torchrun).

Every rank holds the same parameters and steps its own envs; the ranks stay in lockstep by taking the same
number of updates, each with the gradient averaged over all of them (`average_gradient`), weighted by the samples
each rank's loss averaged. Outside a process group (one process, the usual case) every function here is a no-op.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> int:
    """How many processes learn together (1 outside a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def average_gradient(grad: torch.Tensor, buffer: torch.Tensor, weight: float) -> bool:
    """Replace this rank's `grad` by the sample-weighted mean over the ranks, in one all-reduce through `buffer`
    (one element longer than `grad`). `weight`: the samples this rank's loss averaged (0 for a rank without any,
    whose `grad` is then ignored). Returns False when no rank had a sample: then nobody steps."""
    buffer[:-1].copy_(grad).mul_(weight)
    buffer[-1] = weight
    dist.all_reduce(buffer)
    total = float(buffer[-1])
    if total > 0:
        grad.copy_(buffer[:-1]).div_(total)
    return total > 0


def agreed_min(value: int) -> int:
    """The smallest of the ranks' `value`s (e.g. a minibatch count, which must be the same everywhere)."""
    if world() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor)


def agreed_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean over the ranks of a scalar (e.g. PPO's approximate KL before its early stop)."""
    if world() == 1:
        return value
    tensor = value.detach().reshape(1).float().clone()
    dist.all_reduce(tensor)
    return tensor[0] / world()


def differing(flat: torch.Tensor) -> float:
    """The largest difference of `flat` (the parameters) between any two ranks: 0.0 when they are identical, as
    lockstep updates keep them."""
    if world() == 1:
        return 0.0
    high, low = flat.detach().clone(), flat.detach().clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return float((high - low).max()) if high.numel() else 0.0
