"""The A2C loss against a hand computation, and the algo section choosing its config by name."""

import pytest
import torch

from rlfoundry.algos.a2c import A2CConfig, a2c_loss
from rlfoundry.algos.ppo import PPOConfig
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config


def test_a2c_loss_by_hand():
    logprobs = torch.tensor([-0.5, -1.0, -2.0])
    advantages = torch.tensor([1.0, -2.0, 0.5])
    values, returns = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 1.0, 0.0])
    entropy = torch.tensor([0.6, 0.7, 0.8])
    loss, stats = a2c_loss(logprobs, advantages, values, returns, entropy, vf_coef=0.5, ent_coef=0.1)
    policy = -(1.0 * -0.5 + -2.0 * -1.0 + 0.5 * -2.0) / 3  # -(0.5) / 3
    value = (1.0 + 0.0 + 4.0) / 3
    assert stats["loss/policy"].item() == pytest.approx(policy)
    assert stats["loss/value"].item() == pytest.approx(value)
    assert loss.item() == pytest.approx(policy + 0.5 * value - 0.1 * 0.7)


def test_algo_name_picks_the_config():
    assert isinstance(load_config("CartPole-v1:a2c").algo, A2CConfig)
    assert isinstance(load_config("CartPole-v1:ppo").algo, PPOConfig)
    assert isinstance(load_config("Acrobot-v1:a2c").algo, A2CConfig)  # no preset: defaults from the spaces


def test_keys_of_another_algorithm_are_unknown_keys_with_that_algorithms_suggestions():
    with pytest.raises(ConfigError) as err:
        load_config("CartPole-v1:a2c", ["algo.clip_coef=0.2"])
    assert "algo.clip_coef" in str(err.value) and "unknown key" in str(err.value) and "num_steps" in str(err.value)
    with pytest.raises(ConfigError, match="unknown algorithm; available: a2c, .*ppo, reinforce, sac"):
        load_config("CartPole-v1:ppo", ["algo.name=trpo"])
