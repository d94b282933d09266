"""DQN pieces: the weighted Huber loss by hand, the dueling head's identity, target updates."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlfoundry.algos.dqn import dqn_loss
from rlfoundry.envs import EnvInfo
from rlfoundry.nets.flat import flatten_parameters
from rlfoundry.nets.policy import QNetwork


def test_weighted_huber_loss_by_hand():
    q, targets, weights = torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0]), torch.tensor([1.0, 0.5])
    loss, stats = dqn_loss(q, targets, weights)
    # Huber (δ = 1): 0.5·0.5² = 0.125 inside, |3| − 0.5 = 2.5 outside
    assert loss.item() == pytest.approx((1.0 * 0.125 + 0.5 * 2.5) / 2)
    assert stats["diag/q_mean"].item() == pytest.approx(1.5)


def spec(num_actions: int = 3) -> EnvInfo:
    return EnvInfo("test", 1, gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(num_actions), "sync")


NET = SimpleNamespace(encoder="mlp", core="identity", hidden_sizes=[16], activation="relu", ortho_init=True)


def test_dueling_q_is_value_plus_centred_advantage():
    net = QNetwork(spec(), NET, dueling=True)
    obs = torch.randn(5, 4)
    q = net(obs)
    features = net.encoder(obs)[0]
    advantage, value = net.advantage(features), net.value(features)
    torch.testing.assert_close(q, value + advantage - advantage.mean(-1, keepdim=True))
    torch.testing.assert_close(q.mean(-1), value.squeeze(-1))  # the advantages are centred


def test_polyak_and_hard_target_updates_on_the_flat_buffers():
    online, target = QNetwork(spec(), NET, dueling=False), QNetwork(spec(), NET, dueling=False)
    online_flat, target_flat = flatten_parameters(online), flatten_parameters(target)
    before = target_flat.detach().clone()
    target_flat.data.lerp_(online_flat.data, 0.1)
    torch.testing.assert_close(target_flat.detach(), 0.9 * before + 0.1 * online_flat.detach())
    target_flat.data.lerp_(online_flat.data, 1.0)  # τ = 1: a copy, visible through the module's parameters
    for a, b in zip(online.parameters(), target.parameters()):
        assert torch.equal(a, b)
