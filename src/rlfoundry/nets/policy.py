"""The actor-critic: encoder → core → heads, with one trunk shared or one trunk per head."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from rlfoundry.envs import EnvSpec
from rlfoundry.nets.cores import CORES
from rlfoundry.nets.encoders import ENCODERS
from rlfoundry.nets.heads import CategoricalHead, GaussianHead, ValueHead


class Trunk(nn.Module):
    """encoder → core. Feed-forward use passes [N, ...] observations; the core sees them as T=1."""

    def __init__(self, spec: EnvSpec, net_cfg):
        super().__init__()
        self.encoder = ENCODERS[net_cfg.encoder](
            spec.obs_shape, net_cfg.hidden_sizes, net_cfg.activation, net_cfg.ortho_init
        )
        self.core = CORES[net_cfg.core](self.encoder.out_features)
        self.out_features = self.core.out_features

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features, _ = self.core(self.encoder(obs).unsqueeze(0), None, None)
        return features.squeeze(0)


class PolicyOutput(NamedTuple):
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor


class ActorCritic(nn.Module):
    def __init__(self, spec: EnvSpec, net_cfg):
        super().__init__()
        self.actor_trunk = Trunk(spec, net_cfg)
        self.critic_trunk = self.actor_trunk if net_cfg.shared else Trunk(spec, net_cfg)
        width = self.actor_trunk.out_features
        if spec.discrete:
            self.pi: CategoricalHead | GaussianHead = CategoricalHead(width, int(spec.action_space.n), net_cfg.ortho_init)
        else:
            action_dim = int(spec.action_space.shape[0])
            self.pi = GaussianHead(width, action_dim, net_cfg.ortho_init, net_cfg.log_std_init)
        self.v = ValueHead(width, net_cfg.ortho_init)
        self.shared = net_cfg.shared

    def _features(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        actor = self.actor_trunk(obs)
        critic = actor if self.shared else self.critic_trunk(obs)
        return actor, critic

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> PolicyOutput:
        actor, critic = self._features(obs)
        dist = self.pi(actor)
        actions = self.pi.sample(dist, deterministic)
        return PolicyOutput(actions, self.pi.log_prob(dist, actions), self.v(critic))

    def predict(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Actions only (evaluation, play)."""
        return self.pi.sample(self.pi(self.actor_trunk(obs)), deterministic)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self.critic_trunk(obs))

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-probabilities of `actions`, entropies, values) with gradients, for the update."""
        actor, critic = self._features(obs)
        dist = self.pi(actor)
        return self.pi.log_prob(dist, actions), self.pi.entropy(dist), self.v(critic)


def build_actor_critic(spec: EnvSpec, net_cfg) -> ActorCritic:
    return ActorCritic(spec, net_cfg)
