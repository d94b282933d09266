"""One flat parameter buffer for a module: every parameter, and every gradient, becomes a view of one tensor.

The optimizer over it is `rlfoundry.algos.optim.FlatOptimizer`; asynchronous actors (`rlfoundry.buffers.actors`)
copy a learner's weights into their own copy of the policy through the same flat layout.
"""

from __future__ import annotations

import torch
from torch import nn


def flatten_parameters(module: nn.Module) -> nn.Parameter:
    """Move all of `module`'s parameters into one contiguous buffer (each becomes a view of it) and give
    them gradients that are views of one flat gradient buffer; returns the flat parameter."""
    params = [p for p in module.parameters() if p.requires_grad]
    flat = nn.Parameter(torch.cat([p.detach().flatten() for p in params]))
    flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        size = p.numel()
        p.data = flat.data[offset : offset + size].view_as(p)
        # With .grad already set, backward accumulates into it in place, i.e. into the flat buffer.
        p.grad = flat.grad[offset : offset + size].view_as(p)
        offset += size
    return flat
