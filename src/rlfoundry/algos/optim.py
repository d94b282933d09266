"""An optimizer (Adam or RMSprop) over one flat parameter buffer, with global gradient-norm clipping.

All of a module's parameters are moved into one contiguous tensor (each parameter becomes a view
of it), and so are their gradients. Clearing, clipping and the Adam step then each cost one
operation instead of one per parameter tensor: on the small networks of classic control that
per-tensor cost was a quarter of an update step (measured on CartPole PPO with Adam: 170 µs → 45 µs).

Build it after the module has reached its device: moving the module afterwards would replace the
views. Loading a module state dict copies into the views, so it stays consistent.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlfoundry.nets.flat import flatten_parameters


class FlatOptimizer:
    def __init__(self, module: nn.Module, lr: float, eps: float, max_grad_norm: float | None, kind: str = "adam",
                 rmsprop_alpha: float = 0.99):
        self.flat = flatten_parameters(module)
        self.max_grad_norm = max_grad_norm
        if kind == "adam":
            fused = self.flat.device.type in ("cpu", "cuda")
            self.optimizer: torch.optim.Optimizer = torch.optim.Adam([self.flat], lr=lr, eps=eps, fused=fused)
        elif kind == "rmsprop":  # A2C's usual optimizer (Mnih et al. 2016; SB3: alpha 0.99, eps 1e-5)
            self.optimizer = torch.optim.RMSprop([self.flat], lr=lr, eps=eps, alpha=rmsprop_alpha)
        else:
            raise ValueError(f"unknown optimizer {kind!r}; allowed: adam, rmsprop")

    def set_lr(self, lr: float) -> None:
        self.optimizer.param_groups[0]["lr"] = lr

    def update(self, loss: torch.Tensor) -> torch.Tensor:
        """One step on `loss`: clear, backward, clip the global norm, Adam. Returns the norm before clipping."""
        grad = self.flat.grad
        grad.zero_()
        loss.backward()
        norm = torch.linalg.vector_norm(grad)
        if self.max_grad_norm is not None:
            grad.mul_((self.max_grad_norm / (norm + 1e-6)).clamp_(max=1.0))
        self.optimizer.step()
        return norm

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)
