"""DreamerV3's optimizer (reference code HEAD, `Agent._make_opt`, `embodied/jax/opt.py`): adaptive gradient
clipping, then LaProp (RMS normalisation before momentum), with a linear warm-up from 0.

Per parameter tensor θ with gradient g, at update t = 1, 2, ...:

    g ← g / max(1, ‖g‖ / (agc · max(pmin, ‖θ‖)))        AGC (Brock et al. 2021), Frobenius norms per tensor
    ν ← β2·ν + (1 - β2)·g²;   u = g / (√(ν / (1 - β2^t)) + eps)
    μ ← β1·μ + (1 - β1)·u;    θ ← θ - lr_t · μ / (1 - β1^t)
    lr_t = lr · min(t - 1, warmup) / warmup             (the first update moves nothing, as in the reference)

The state (`step`, `nu`, `mu`) round-trips through `state_dict`. The per-tensor loops are torch's foreach kernels.
`capturable`: the step count lives on the parameters' device and the learning rate and bias corrections are
computed there (in float64, then in the parameters' dtype), so a CUDA graph can replay the step.
"""

from __future__ import annotations

import torch


class LaProp(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 4e-5, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-20,
                 agc: float = 0.3, pmin: float = 1e-3, warmup: int = 1000, capturable: bool = False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, agc=agc, pmin=pmin, warmup=warmup,
                                      capturable=capturable))

    def load_state_dict(self, state_dict) -> None:
        """The saved state, computed from here on as this optimizer is set (`capturable` or not): a checkpoint from
        a run with or without CUDA graphs resumes in either."""
        capturable = [group["capturable"] for group in self.param_groups]
        super().load_state_dict(state_dict)
        for group, flag in zip(self.param_groups, capturable, strict=True):
            group["capturable"] = flag
            for p in group["params"]:
                if "step" in self.state.get(p, {}):
                    self.state[p]["step"] = self.state[p]["step"].to(p.device if flag else "cpu", torch.float32)

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
                    state["step"] = torch.zeros((), dtype=torch.float32,
                                                device=p.device if group["capturable"] else "cpu")
                    state["nu"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["mu"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            beta1, beta2 = group["betas"]
            if group["agc"]:
                grad_norms = torch.stack(torch._foreach_norm(grads))
                param_norms = torch.stack(torch._foreach_norm(params)).clamp(min=group["pmin"])
                factors = (grad_norms / (group["agc"] * param_norms)).clamp(min=1).reciprocal()
                grads = torch._foreach_mul(grads, list(factors.unbind()))
            steps = [self.state[p]["step"] for p in params]
            lr, warmup = group["lr"], group["warmup"]
            bias2: float | torch.Tensor  # 1 - β2^t, and the step size lr_t / (1 - β1^t)
            scale: float | torch.Tensor
            if group["capturable"]:  # on the device: float64, then the parameters' dtype
                torch._foreach_add_(steps, 1.0)
                t, dtype = steps[0].double(), params[0].dtype
                bias2 = (1 - beta2**t).to(dtype)
                scale = (lr * ((t - 1).clamp(max=warmup) / warmup if warmup else 1.0) / (1 - beta1**t)).to(dtype)
            else:  # on the host, in float64
                step = float(steps[0]) + 1
                for count in steps:
                    count.fill_(step)
                bias2 = 1 - beta2**step
                scale = lr * (min(step - 1, warmup) / warmup if warmup else 1.0) / (1 - beta1**step)
            nus = [self.state[p]["nu"] for p in params]
            mus = [self.state[p]["mu"] for p in params]
            torch._foreach_mul_(nus, beta2)
            torch._foreach_addcmul_(nus, grads, grads, value=1 - beta2)
            denom = torch._foreach_div(nus, bias2)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, group["eps"])
            updates = torch._foreach_div(grads, denom)
            torch._foreach_mul_(mus, beta1)
            torch._foreach_add_(mus, updates, alpha=1 - beta1)
            if isinstance(scale, torch.Tensor):
                torch._foreach_sub_(params, torch._foreach_mul(mus, scale))
            elif scale:
                torch._foreach_add_(params, mus, alpha=-scale)
        return loss
