"""One flat parameter buffer for a module: every parameter, and every gradient, becomes a view of one tensor.

The optimizer over it is `rlfoundry.algos.optim.FlatOptimizer`; asynchronous actors (`rlfoundry.buffers.actors`)
copy a learner's weights into their own copy of the policy through the same flat layout.
"""

from __future__ import annotations

import torch
from torch import nn


def _memory_order(p: torch.Tensor) -> tuple[int, ...]:
    """The dimension order of `p` in memory: (0, 2, 3, 1) for channels-last conv weights, else the logical order."""
    if p.dim() == 4 and not p.is_contiguous() and p.is_contiguous(memory_format=torch.channels_last):
        return (0, 2, 3, 1)
    return tuple(range(p.dim()))


def _view(buffer: torch.Tensor, p: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """`buffer` (p.numel() values in `order`) as a tensor shaped and strided like `p`."""
    inverse = tuple(order.index(d) for d in range(len(order)))
    return buffer.view([p.shape[d] for d in order]).permute(inverse)


def flatten_parameters(module: nn.Module) -> nn.Parameter:
    """Move all of `module`'s parameters into one contiguous buffer (each becomes a view of it, in its own memory
    layout: channels-last conv weights stay channels-last) and give them gradients that are views of one flat
    gradient buffer; returns the flat parameter."""
    params = [p for p in module.parameters() if p.requires_grad]
    orders = [_memory_order(p) for p in params]
    flat = nn.Parameter(torch.cat([p.detach().permute(order).flatten() for p, order in zip(params, orders)]))
    flat.grad = torch.zeros_like(flat)
    offset = 0
    for p, order in zip(params, orders):
        size = p.numel()
        p.data = _view(flat.data[offset : offset + size], p, order)
        # With .grad already set, backward accumulates into it in place, i.e. into the flat buffer.
        p.grad = _view(flat.grad[offset : offset + size], p, order)
        offset += size
    return flat
