"""Returns of imagined and replayed trajectories, and their scale (DreamerV3, paper v2 / reference code HEAD,
`agent.py` `lambda_return`, `imag_loss`, `repl_loss`; `utils.Normalize`).

λ-returns, time-major over the states s_0 .. s_T of a trajectory:

    R_T = boot_T
    R_t = r_{t+1} + live_{t+1} · ((1 - λ_{t+1}) · boot_{t+1} + λ_{t+1} · R_{t+1})       t = T-1 .. 0

with r_{t+1} the reward on arriving at s_{t+1}, live_{t+1} its discount (imagination: the continue head's
probability, which carries γ = 1 - 1/333 since the continue target does; replay: γ · (1 - terminal_{t+1})) and λ_{t+1}
the mixing (imagination: 0.95; replay: 0.95 · (1 - last_{t+1}), so a return never reaches past an episode's last
step). boot is the critic's value in imagination and the imagined return from each replayed state on replay.

The scale of returns (`PercentileScale`): exponential moving averages of the 5th and 95th percentiles of the batch's
returns, updated before they are read, starting at 0 without bias correction; the scale is max(1, P95 - P5), so
returns are divided down only when their spread exceeds 1 (DreamerV3 §3, "return normalization";
docs/world-models/dreamer-planet.md §4).
"""

from __future__ import annotations

import torch


def lambda_returns(rewards: torch.Tensor, live: torch.Tensor, boot: torch.Tensor, lam: torch.Tensor | float) -> torch.Tensor:
    """[T+1, N] rewards, live, boot (and lam, or a float), indexed by the state they arrive at -> [T, N] returns of
    the states 0 .. T-1."""
    lam = torch.as_tensor(lam, dtype=boot.dtype, device=boot.device).expand_as(boot)
    out = torch.empty_like(boot[:-1])
    ret = boot[-1]
    for t in range(boot.shape[0] - 2, -1, -1):
        ret = rewards[t + 1] + live[t + 1] * ((1 - lam[t + 1]) * boot[t + 1] + lam[t + 1] * ret)
        out[t] = ret
    return out


class PercentileScale:
    """max(limit, EMA(P_high) - EMA(P_low)) of the returns seen so far; `state_dict` for exact resume. The averages
    stay tensors on the returns' device (no host read per update)."""

    def __init__(self, rate: float = 0.01, low: float = 5.0, high: float = 95.0, limit: float = 1.0):
        self.rate, self.limit = rate, limit
        self.quantiles = torch.tensor([low / 100, high / 100])
        self.averages = torch.zeros(2)  # EMA of the low and the high percentile

    def __call__(self, returns: torch.Tensor, update: bool = True) -> torch.Tensor:
        """Update the averages with `returns` (any shape), then the scale to divide advantages by (a 0-d tensor)."""
        if self.averages.device != returns.device:
            self.averages, self.quantiles = self.averages.to(returns.device), self.quantiles.to(returns.device)
        if update:
            found = torch.quantile(returns.detach().float().flatten(), self.quantiles)
            self.averages.mul_(1 - self.rate).add_(self.rate * found)  # in place: a CUDA graph updates this tensor
        return (self.averages[1] - self.averages[0]).clamp(min=self.limit)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"averages": self.averages.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.averages = state["averages"].to(self.averages.device, torch.float32).clone()
