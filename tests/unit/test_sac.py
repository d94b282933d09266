"""SAC pieces: the three losses by hand, the squashed Gaussian's bounds and log-probabilities, twin critics."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlfoundry.algos.sac import sac_actor_loss, sac_alpha_loss, sac_critic_loss
from rlfoundry.envs import EnvSpec
from rlfoundry.nets.policy import SquashedGaussianActor, TwinQ

SPEC = EnvSpec("test", 1, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2.0, 1.0, (2,), np.float32), "sync")
NET = SimpleNamespace(encoder="mlp", core="identity", hidden_sizes=[32, 32], activation="relu", ortho_init=False)


def test_losses_by_hand():
    q = torch.tensor([[1.0, 2.0], [0.0, 4.0]])  # [2 critics, N = 2]
    targets = torch.tensor([1.0, 3.0])
    assert sac_critic_loss(q, targets).item() == pytest.approx(0.5 * ((0 + 1) / 2 + (1 + 1) / 2))
    alpha, logp = torch.tensor(0.5), torch.tensor([-1.0, -2.0])
    assert sac_actor_loss(alpha, logp, q).item() == pytest.approx(((0.5 * -1.0 - 0.0) + (0.5 * -2.0 - 2.0)) / 2)
    log_alpha = torch.tensor(0.3)
    assert sac_alpha_loss(log_alpha, logp, -2.0).item() == pytest.approx(-0.3 * ((-1.0 - 2.0) + (-2.0 - 2.0)) / 2)


def test_squashed_actions_stay_in_bounds_and_log_probs_match_a_change_of_variables():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(SPEC, NET)
    obs = torch.randn(4096, 3)
    actions, logp = actor(obs)
    assert actions.shape == (4096, 2) and bool((actions >= -2).all() and (actions <= 1).all())
    # Reference: the density of u ~ N(mean, std), then a = tanh(u)·scale + offset.
    features = actor.core(actor.encoder(obs), None, None)[0].squeeze(0)
    mean, std = actor.mean(features), actor.log_std(features).clamp(-20, 2).exp()
    u = torch.atanh(((actions - actor.offset) / actor.scale).clamp(-1 + 1e-6, 1 - 1e-6))
    base = torch.distributions.Normal(mean, std).log_prob(u).sum(-1)
    expected = base - torch.log(actor.scale * (1 - torch.tanh(u) ** 2)).sum(-1)
    keep = (u.abs() < 5).all(-1)  # away from saturation, where atanh loses precision
    torch.testing.assert_close(logp[keep], expected[keep], atol=2e-3, rtol=1e-3)
    deterministic, _ = actor(obs[:3], deterministic=True)
    torch.testing.assert_close(deterministic, torch.tanh(mean[:3]) * actor.scale + actor.offset)


def test_twin_critics_are_independent_and_pass_gradients_to_the_actions():
    critic = TwinQ(SPEC, NET)
    obs, actions = torch.randn(5, 3), torch.randn(5, 2, requires_grad=True)
    q = critic(obs, actions)
    assert q.shape == (2, 5) and not torch.allclose(q[0], q[1])
    q[0].sum().backward()
    assert actions.grad is not None and actions.grad.abs().sum() > 0  # the actor learns through this
