"""DreamerV3's optimizer (reference code HEAD, `Agent._make_opt`, `embodied/jax/opt.py`): adaptive gradient
clipping, then LaProp (RMS normalisation before momentum), with a linear warm-up from 0.

Per parameter tensor θ with gradient g, at update t = 1, 2, ...:

    g ← g / max(1, ‖g‖ / (agc · max(pmin, ‖θ‖)))        AGC (Brock et al. 2021), Frobenius norms per tensor
    ν ← β2·ν + (1 - β2)·g²;   u = g / (√(ν / (1 - β2^t)) + eps)
    μ ← β1·μ + (1 - β1)·u;    θ ← θ - lr_t · μ / (1 - β1^t)
    lr_t = lr · min(t - 1, warmup) / warmup             (the first update moves nothing, as in the reference)

The state (`step`, `nu`, `mu`) round-trips through `state_dict`. The per-tensor loops are torch's foreach kernels.
"""

from __future__ import annotations

import torch


class LaProp(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 4e-5, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-20,
                 agc: float = 0.3, pmin: float = 1e-3, warmup: int = 1000):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, agc=agc, pmin=pmin, warmup=warmup))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["nu"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["mu"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            beta1, beta2 = group["betas"]
            if group["agc"]:
                grad_norms = torch.stack(torch._foreach_norm(grads))
                param_norms = torch.stack(torch._foreach_norm(params)).clamp(min=group["pmin"])
                factors = (grad_norms / (group["agc"] * param_norms)).clamp(min=1).reciprocal()
                grads = torch._foreach_mul(grads, list(factors.unbind()))
            step = float(self.state[params[0]]["step"]) + 1
            for p in params:
                self.state[p]["step"].fill_(step)
            nus = [self.state[p]["nu"] for p in params]
            mus = [self.state[p]["mu"] for p in params]
            torch._foreach_mul_(nus, beta2)
            torch._foreach_addcmul_(nus, grads, grads, value=1 - beta2)
            denom = torch._foreach_div(nus, 1 - beta2**step)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, group["eps"])
            updates = torch._foreach_div(grads, denom)
            torch._foreach_mul_(mus, beta1)
            torch._foreach_add_(mus, updates, alpha=1 - beta1)
            lr = group["lr"] * (min(step - 1, group["warmup"]) / group["warmup"] if group["warmup"] else 1.0)
            if lr:
                torch._foreach_add_(params, mus, alpha=-lr / (1 - beta1**step))
        return loss
