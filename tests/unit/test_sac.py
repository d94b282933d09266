"""SAC pieces: the losses by hand (sampled and discrete actions), the squashed Gaussian's bounds and log-probabilities,
twin critics, the categorical actor, and the replay continuing after the envs restart."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlfoundry.algos import Runtime
from rlfoundry.algos.sac import (
    sac_actor_loss,
    sac_alpha_loss,
    sac_critic_loss,
    sac_soft_value,
)
from rlfoundry.envs import EnvInfo
from rlfoundry.nets.policy import (
    CategoricalActor,
    SquashedGaussianActor,
    TwinQ,
    TwinQDiscrete,
)

SPEC = EnvInfo("test", 1, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2.0, 1.0, (2,), np.float32), "sync")
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
    features = actor.encoder(obs).squeeze(0)
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


# ---------------------------------------------------------------- discrete actions (Christodoulou 2019)

DISCRETE = EnvInfo("test", 1, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), "sync")


def test_discrete_losses_by_hand():
    # two states, two actions; critic 1 and 2 disagree, the losses use their minimum per action
    q = torch.tensor([[[1.0, 3.0], [0.0, -1.0]], [[2.0, 0.0], [4.0, 2.0]]])  # [2 critics, N = 2, A = 2]
    min_q = [[1.0, 0.0], [0.0, -1.0]]
    pi = [[0.25, 0.75], [0.5, 0.5]]
    probs = torch.tensor(pi)
    logp = probs.log()
    alpha = torch.tensor(0.5)
    value = [sum(p * (mq - 0.5 * np.log(p)) for p, mq in zip(pi[n], min_q[n])) for n in range(2)]
    torch.testing.assert_close(sac_soft_value(q, logp, alpha, probs), torch.tensor(value, dtype=torch.float32))
    # the actor minimises the negative soft value of its own policy, the exact expectation over actions
    assert sac_actor_loss(alpha, logp, q, probs).item() == pytest.approx(-np.mean(value), rel=1e-6)
    log_alpha, target = torch.tensor(0.3), 0.89 * np.log(2)
    expected_logp = [sum(p * np.log(p) for p in pi[n]) for n in range(2)]
    assert sac_alpha_loss(log_alpha, logp, target, probs).item() == pytest.approx(
        -0.3 * np.mean([e + target for e in expected_logp]), rel=1e-6)
    # the sampled-action forms are the same functions without `probs`
    torch.testing.assert_close(sac_soft_value(q[:, :, 0], logp[:, 0], alpha), torch.tensor(min_q)[:, 0] - 0.5 * logp[:, 0])


def test_discrete_actor_loss_gradient_reaches_only_the_policy():
    probs_logits = torch.tensor([[0.3, -0.2, 0.1]], requires_grad=True)
    logp = probs_logits.log_softmax(-1)
    q = torch.tensor([[[1.0, 2.0, 0.5]], [[1.5, 1.0, 0.0]]], requires_grad=True)
    sac_actor_loss(torch.tensor(0.2), logp, q.detach(), logp.exp()).backward()
    # d/dlogits of Σ π (α log π − Q): moves probability towards the action with the largest soft advantage
    assert probs_logits.grad.argmin().item() == 0 and q.grad is None


def test_categorical_actor_and_discrete_twin_critics():
    torch.manual_seed(0)
    actor, critic = CategoricalActor(DISCRETE, NET), TwinQDiscrete(DISCRETE, NET)
    obs = torch.randn(7, 3)
    logp = actor(obs)
    assert logp.shape == (7, 2)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(7))
    q = critic(obs)
    assert q.shape == (2, 7, 2) and not torch.allclose(q[0], q[1])  # two independent critics in one network


def test_discrete_sac_agent_learns_one_step(tmp_path):
    from rlfoundry.algos.sac import SAC
    from rlfoundry.experiment.load import load_config

    cfg = load_config("CartPole-v1:sac", ["algo.learning_starts=0", "algo.batch_size=8", "train.device=cpu"])
    spec = EnvInfo("CartPole-v1", 1, gym.spaces.Box(-5, 5, (4,), np.float32), gym.spaces.Discrete(2), "sync")
    agent = SAC(cfg, spec, Runtime.of(cfg.train))
    assert agent.target_entropy == pytest.approx(cfg.algo.target_entropy_scale * np.log(2))
    envs = gym.make_vec("CartPole-v1", 1, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP})
    before = agent.actor_opt.flat.detach().clone()
    for _ in range(12):
        result = agent.iterate(envs, 0.0)
    assert np.isfinite(result.metrics["loss/critic"]) and 0 < result.metrics["diag/entropy"] <= np.log(2)
    assert not torch.equal(before, agent.actor_opt.flat)
    assert agent.predict(np.zeros((3, 4), np.float32)).dtype == np.int64
    envs.close()


# ---------------------------------------------------------------- the replay continues after the envs restart


def test_replay_restart_ends_episodes_as_truncations_and_never_samples_across_the_gap():
    from rlfoundry.buffers.replay import PrioritizedReplayBuffer, ReplayBuffer

    for cls in (ReplayBuffer, PrioritizedReplayBuffer):
        buffer = cls(40, 1, (1,), np.float32, (), np.int64, n_step=2, gamma=0.5)
        obs = lambda v: np.array([[v]], np.float32)
        no = np.zeros(1, bool)
        for t in range(4):  # rewards 1..4, no episode end; row 4 (obs 4) is pending
            buffer.add(obs(t), np.array([t]), np.array([t + 1.0]), no, no, obs(t + 1))
        buffer.restart(obs(100))  # the envs were reset: obs 100 starts a new episode
        buffer.add(obs(100), np.array([5]), np.array([7.0]), no, no, obs(101))
        buffer.add(obs(101), np.array([6]), np.array([8.0]), no, no, obs(102))
        expected = {  # obs: (n-step return, discount, next obs)
            0: (1 + 0.5 * 2, 0.25, 2), 1: (2 + 0.5 * 3, 0.25, 3), 2: (3 + 0.5 * 4, 0.25, 4),
            3: (4, 0.5, 4),  # truncated by the restart: bootstraps from its true next observation
            100: (7 + 0.5 * 8, 0.25, 102),
        }  # never obs 4 (the reset row) nor 101 (its window is still open)
        assert len(buffer) == len(expected)
        batch = buffer.sample(2000, np.random.default_rng(0))
        got = {(float(o), float(r), float(d), float(n)) for o, r, d, n in
               zip(batch.obs[:, 0], batch.rewards, batch.discounts, batch.next_obs[:, 0])}
        assert got == {(float(o), r, d, float(n)) for o, (r, d, n) in expected.items()}
