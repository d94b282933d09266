"""Planning in a learned latent space: the cross-entropy method of PlaNet (Hafner et al. 2019, arXiv:1811.04551
§3; google-research/planet `control/planning.py` `cross_entropy_method`; docs/world-models/dreamer-planet.md §7).

    mean, std = 0, 1                                  over [horizon, action_dim], per env
    repeat `iterations` times:
        draw `candidates` action sequences from N(mean, std), clipped to the action bounds
        score each by the model (PlaNet: the sum of predicted rewards along its imagined rollout)
        mean, std = the mean and standard deviation of the `top_k` best sequences
    execute mean[0], the first action of the final mean; plan again at the next step

Batched over envs and candidates: one `score` call per iteration evaluates every sequence of every env.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def cross_entropy_method(score: Callable[[torch.Tensor], torch.Tensor], batch: int, horizon: int, action_dim: int,
                         candidates: int, top_k: int, iterations: int, low: torch.Tensor | float = -1.0,
                         high: torch.Tensor | float = 1.0, generator: torch.Generator | None = None,
                         device: torch.device | str = "cpu") -> torch.Tensor:
    """-> [batch, action_dim] the first action of the final mean. `score(actions [batch, candidates, horizon, A])`
    returns [batch, candidates] (higher is better)."""
    if not 0 < top_k <= candidates:
        raise ValueError(f"top_k {top_k} must be in 1 .. candidates ({candidates})")
    mean = torch.zeros(batch, 1, horizon, action_dim, device=device)
    std = torch.ones(batch, 1, horizon, action_dim, device=device)
    # bounds made on the device (a copy from the host would stop a CUDA graph's capture)
    low, high = (torch.full((), float(b), device=device) if not isinstance(b, torch.Tensor)
                 else b.to(device, torch.float32) for b in (low, high))
    for _ in range(iterations):
        noise = torch.randn(batch, candidates, horizon, action_dim, generator=generator, device=device)
        actions = torch.maximum(torch.minimum(mean + std * noise, high), low)
        returns = score(actions)  # [batch, candidates]
        best = returns.topk(top_k, dim=1).indices
        elite = actions.gather(1, best[:, :, None, None].expand(-1, -1, horizon, action_dim))
        mean = elite.mean(1, keepdim=True)
        std = elite.std(1, unbiased=False, keepdim=True)
    return mean[:, 0, 0]
