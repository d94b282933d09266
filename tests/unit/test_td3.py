"""TD3 and DDPG pieces: the losses and the target smoothing by hand, the delayed actor and target updates, DDPG's
settings (one critic, no smoothing, no delay), the deterministic actor's bounds, exploration within the bounds."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlfoundry.algos import Runtime
from rlfoundry.algos.td3 import DDPG, TD3, DeterministicActor, smoothed_targets, td3_actor_loss, td3_critic_loss
from rlfoundry.envs import EnvInfo
from rlfoundry.experiment.load import load_config

SPEC = EnvInfo("test", 1, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2.0, 1.0, (2,), np.float32), "sync")
NET = SimpleNamespace(encoder="mlp", core="identity", hidden_sizes=[32, 32], activation="relu", ortho_init=False)


def test_losses_by_hand():
    q = torch.tensor([[1.0, 2.0], [0.0, 4.0]])  # [2 critics, N = 2]
    targets = torch.tensor([1.0, 3.0])
    assert td3_critic_loss(q, targets).item() == pytest.approx((0 + 1) / 2 + (1 + 1) / 2)  # Σ_i MSE_i, as SB3
    assert td3_critic_loss(q[:1], targets).item() == pytest.approx(0.5)  # DDPG's one critic
    assert td3_actor_loss(torch.tensor([1.0, -3.0])).item() == pytest.approx(1.0)


def test_target_smoothing_clips_the_noise_then_the_action():
    scale = torch.tensor([1.5, 0.5])  # half the range of [-2, 1] and [0, 1]
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([1.0, 1.0])
    next_actions = torch.tensor([[0.0, 0.5], [0.9, 0.1]])
    noise = torch.tensor([[0.2, -3.0], [0.4, 0.1]])  # in units of half the range; clipped at 0.5
    expected = torch.tensor([[0.0 + 0.2 * 1.5, 0.5 - 0.5 * 0.5], [min(0.9 + 0.4 * 1.5, 1.0), 0.1 + 0.1 * 0.5]])
    torch.testing.assert_close(smoothed_targets(next_actions, noise, 0.5, scale, low, high), expected)


def test_the_deterministic_actor_stays_in_bounds():
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, NET)
    actions = actor(torch.randn(2048, 3) * 100)  # saturating inputs
    assert actions.shape == (2048, 2) and bool((actions >= -2).all() and (actions <= 1).all())


def agent(name: str, overrides: list[str] = ()):
    cfg = load_config(f"Pendulum-v1:{name}", ["algo.learning_starts=0", "algo.batch_size=8", "train.device=cpu",
                                             *overrides])
    spec = EnvInfo("Pendulum-v1", 1, gym.spaces.Box(-8, 8, (3,), np.float32),
                   gym.spaces.Box(-2.0, 2.0, (1,), np.float32), "sync")
    return (TD3 if name == "td3" else DDPG)(cfg, spec, Runtime.of(cfg.train))


def envs():
    return gym.make_vec("Pendulum-v1", 1, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP})


def test_the_actor_and_the_targets_move_on_every_policy_delay_th_step_only():
    td3 = agent("td3")
    assert td3.critic(torch.zeros(1, 3), torch.zeros(1, 1)).shape == (2, 1)  # twin critics
    vec = envs()
    for _ in range(10):  # the replay holds more than a batch
        td3.iterate(vec, 0.0)
    td3.updates = 0  # the next update is the first of a delay period
    actor, actor_target = td3.actor_opt.flat.detach().clone(), td3.actor_target_flat.detach().clone()
    critic, critic_target = td3.critic_opt.flat.detach().clone(), td3.critic_target_flat.detach().clone()
    step = td3.update(0.0)
    assert not torch.equal(critic, td3.critic_opt.flat)  # the critics step every time
    assert "loss/actor" not in step
    assert torch.equal(actor, td3.actor_opt.flat) and torch.equal(actor_target, td3.actor_target_flat)
    assert torch.equal(critic_target, td3.critic_target_flat)
    step = td3.update(0.0)
    assert "loss/actor" in step and np.isfinite(float(step["loss/actor"]))
    assert not torch.equal(actor, td3.actor_opt.flat) and not torch.equal(actor_target, td3.actor_target_flat)
    assert not torch.equal(critic_target, td3.critic_target_flat)
    vec.close()


def test_ddpg_is_td3_with_one_critic_no_smoothing_and_no_delay(monkeypatch):
    ddpg = agent("ddpg")
    algo = ddpg.algo
    assert (algo.name, algo.twin_critics, algo.policy_delay, algo.target_policy_noise) == ("ddpg", False, 1, 0.0)
    assert ddpg.critic(torch.zeros(4, 3), torch.zeros(4, 1)).shape == (1, 4)
    vec = envs()
    for _ in range(10):
        ddpg.iterate(vec, 0.0)
    monkeypatch.setattr(torch, "randn_like", lambda *a, **k: pytest.fail("DDPG draws no target smoothing noise"))
    assert "loss/actor" in ddpg.update(0.0) and "loss/actor" in ddpg.update(0.0)  # an actor step every update
    vec.close()


def test_exploration_stays_in_the_action_bounds_and_starts_uniform():
    td3 = agent("td3", ["algo.learning_starts=5", "algo.exploration_noise=10"])
    obs = np.zeros((1, 3), np.float32)
    random = td3.explore(obs)  # before learning starts: uniform over the box
    assert random.shape == (1, 1) and -2 <= random[0, 0] <= 2
    td3.env_steps = 5
    noisy = np.concatenate([td3.explore(obs) for _ in range(200)])
    assert noisy.min() >= -2 and noisy.max() <= 2 and len(np.unique(noisy)) > 2  # noise σ 10 half-ranges, clipped
    assert td3.predict(obs).shape == (1, 1)
    torch.testing.assert_close(torch.as_tensor(td3.predict(obs)), torch.as_tensor(td3.predict(obs)))
