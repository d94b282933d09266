"""Action-distribution and value heads.

The distributions are written as a few tensor operations instead of `torch.distributions` objects:
acting happens once per env step, and building a distribution object there (argument checks,
broadcasting, lazy properties) costs more than the network itself for small MLPs.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rlfoundry.nets.encoders import orthogonal_

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class CategoricalHead(nn.Module):
    """Logits for a Discrete action space."""

    def __init__(self, in_features: int, num_actions: int, ortho_init: bool):
        super().__init__()
        self.linear = nn.Linear(in_features, num_actions)
        if ortho_init:
            orthogonal_(self.linear, 0.01)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        # fp32 whatever the autocast precision: these feed the loss and the stored rollout
        return self.linear(features).float().log_softmax(-1)  # normalised log-probabilities [N, A]

    @staticmethod
    def sample(logp: torch.Tensor, deterministic: bool) -> torch.Tensor:
        if deterministic:
            return logp.argmax(-1)
        # Gumbel-max: argmax(logp + Gumbel noise) is a sample; -log(Exp(1)) is Gumbel(0, 1).
        return (logp - torch.empty_like(logp).exponential_().log()).argmax(-1)

    @staticmethod
    def log_prob(logp: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def entropy(logp: torch.Tensor) -> torch.Tensor:
        return -(logp.exp() * logp).sum(-1)


class MultiCategoricalHead(nn.Module):
    """Logits for MultiDiscrete actions (and MultiBinary: each entry a choice of two): one categorical per entry,
    independent given the features, so an action's log-probability and the entropy are sums over the entries. The
    log-probabilities come as one row [N, sum(sizes)], each entry's normalised on its own."""

    offsets: torch.Tensor  # where each entry's logits start in the row

    def __init__(self, in_features: int, sizes: list[int], ortho_init: bool):
        super().__init__()
        self.sizes = [int(size) for size in sizes]
        self.linear = nn.Linear(in_features, sum(self.sizes))
        if ortho_init:
            orthogonal_(self.linear, 0.01)
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.register_buffer("offsets", torch.tensor(starts, dtype=torch.long), persistent=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        logits = self.linear(features).float()
        return torch.cat([chunk.log_softmax(-1) for chunk in logits.split(self.sizes, -1)], -1)  # [N, sum(sizes)]

    def sample(self, logp: torch.Tensor, deterministic: bool) -> torch.Tensor:
        if not deterministic:  # Gumbel-max per entry, as CategoricalHead
            logp = logp - torch.empty_like(logp).exponential_().log()
        return torch.stack([chunk.argmax(-1) for chunk in logp.split(self.sizes, -1)], -1)  # [N, D]

    def log_prob(self, logp: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return logp.gather(-1, actions.long() + self.offsets).sum(-1)

    @staticmethod
    def entropy(logp: torch.Tensor) -> torch.Tensor:
        return -(logp.exp() * logp).sum(-1)  # the entries' entropies, summed


class GaussianHead(nn.Module):
    """Diagonal Gaussian with a state-independent log std (PPO's usual choice for continuous control)."""

    def __init__(self, in_features: int, action_dim: int, ortho_init: bool, log_std_init: float):
        super().__init__()
        self.linear = nn.Linear(in_features, action_dim)
        if ortho_init:
            orthogonal_(self.linear, 0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features).float()  # the mean [N, A], fp32 under autocast too

    def sample(self, mean: torch.Tensor, deterministic: bool) -> torch.Tensor:
        if deterministic:
            return mean
        return mean + self.log_std.exp() * torch.randn_like(mean)

    def log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - LOG_SQRT_2PI).sum(-1)

    def entropy(self, mean: torch.Tensor) -> torch.Tensor:
        return (0.5 + LOG_SQRT_2PI + self.log_std).sum().expand(mean.shape[0])


class ValueHead(nn.Module):
    def __init__(self, in_features: int, ortho_init: bool):
        super().__init__()
        self.linear = nn.Linear(in_features, 1)
        if ortho_init:
            orthogonal_(self.linear, 1.0)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features).float().squeeze(-1)
