"""`record_episode`: each step's action is `policy.act`'s, and its distribution, value and memory norm are what the
agent's networks give when called directly on that step's normalised observation; the return-to-go matches a
reference loop; the CSV reads back and the mp4 has every frame.

Policies are freshly initialised agents (seeded), not trained runs: the inspector must report any weights
faithfully, and building one takes a fraction of a second.
"""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest
import torch

from rlfoundry import envs as envs_lib
from rlfoundry.algos import Runtime, algorithm
from rlfoundry.envs import env_seed
from rlfoundry.experiment.load import load_config
from rlfoundry.inspect.episode import read_csv, record_episode, write_csv, write_mp4
from rlfoundry.run.video import offscreen, video_frame
from rlfoundry.trained.policy import Policy

SEED = 4


def fresh_policy(spec: str, *overrides: str, obs_stats=None) -> Policy:
    cfg = load_config(spec, ["train.device=cpu", "train.precision=fp32", *overrides])
    envs, env_spec = envs_lib.build(cfg.env, 1, evaluation=True)
    envs.close()
    torch.manual_seed(0)
    agent = algorithm(cfg.algo.name)(cfg, env_spec, Runtime.of(cfg.train))
    return Policy(cfg, agent, env_spec, obs_stats, 0, "fresh")


def replay(policy: Policy, seed: int, steps: int):
    """(observation, state before, action, state after) of each step, acting as `play` does."""
    env = policy.make_env()
    obs, _ = env.reset(seed=env_seed(seed))
    state, rows = None, []
    for _ in range(steps):
        action, new_state = policy.act(obs, state, deterministic=True)
        rows.append((obs, state, action, new_state))
        obs, _, terminated, truncated, _ = env.step(action)
        state = new_state
        if terminated or truncated:
            break
    env.close()
    return rows


def net_input(policy: Policy, obs: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(policy.normalize(obs[None]), dtype=np.float32))


def reference_return_to_go(rewards, gamma: float) -> list[float]:
    out, running = [], 0.0
    for reward in reversed(rewards):
        running = reward + gamma * running
        out.append(running)
    return out[::-1]


def test_actor_critic_steps_match_direct_network_calls(one_thread):
    stats = (np.array([0.1, -0.2, 0.05, 0.3]), np.array([0.5, 2.0, 0.1, 1.5]), 100.0)
    policy = fresh_policy("CartPole-v1:ppo", "env.normalize_obs=true", obs_stats=stats)
    episode = record_episode(policy, seed=SEED, max_steps=60)
    rows = replay(policy, SEED, 60)
    assert episode.length == len(rows) > 5
    net = policy.agent.policy
    for t, (obs, _, action, _) in enumerate(rows):
        np.testing.assert_array_equal(episode.observations[t], obs)
        assert episode.actions[t] == action
        with torch.no_grad():
            x = net_input(policy, obs)
            probs = net.action_logprobs(x)[0].exp().numpy()
            value = float(net.value(x)[0])
        np.testing.assert_allclose(episode.probs[t], probs, rtol=1e-6)
        assert episode.values[t] == pytest.approx(value, rel=1e-6)
        assert int(np.argmax(episode.probs[t])) == action
    np.testing.assert_allclose(episode.returns, reference_return_to_go(episode.rewards, policy.cfg.algo.gamma))
    np.testing.assert_allclose(episode.advantages, episode.returns - episode.values)
    assert episode.means is None and episode.q_values is None and episode.memory_norms is None
    assert episode.ended and episode.rewards.sum() == episode.length  # CartPole: +1 a step
    assert len(episode.frames) == episode.length + 1
    with offscreen():  # frames are stored losslessly: the reset frame comes back bit for bit
        env = policy.make_env("rgb_array")
        env.reset(seed=env_seed(SEED))
        np.testing.assert_array_equal(episode.frame(0), video_frame(env.render(), "CartPole-v1"))
        env.close()
    assert episode.obs_labels()[2] == "obs[2] pole angle"


def test_memory_core_value_and_memory_norm(one_thread):
    policy = fresh_policy("CartPole-v1:ppo", "network.core=lstm")
    episode = record_episode(policy, seed=SEED, max_steps=15, frames=False)
    rows = replay(policy, SEED, 15)
    net = policy.agent.policy
    assert episode.frames is None and episode.length == len(rows)
    for t, (obs, before, action, after) in enumerate(rows):
        state = before if before is not None else net.initial_state(1)
        with torch.no_grad():
            value = float(net.value(net_input(policy, obs), state)[0])
        memory = torch.cat([tensor.ravel() for trunk in after for tensor in trunk])  # (h, c) of each trunk
        assert len(after) == 2  # the preset's separate actor and critic trunks, each with its LSTM
        assert episode.actions[t] == action
        assert episode.values[t] == pytest.approx(value, rel=1e-6)
        assert episode.memory_norms[t] == pytest.approx(float(memory.norm()), rel=1e-5)


def test_dqn_shows_q_values(one_thread):
    policy = fresh_policy("CartPole-v1:dqn")
    episode = record_episode(policy, seed=SEED, max_steps=20, frames=False)
    for t, (obs, _, action, _) in enumerate(replay(policy, SEED, 20)):
        with torch.no_grad():
            q = policy.agent.q(net_input(policy, obs))[0].numpy()
        np.testing.assert_allclose(episode.q_values[t], q, rtol=1e-6)
        assert episode.actions[t] == action == int(np.argmax(q))
        assert episode.values[t] == pytest.approx(float(q[action]), rel=1e-6)
    assert episode.probs is None and episode.memory_norms is None
    np.testing.assert_allclose(episode.returns, reference_return_to_go(episode.rewards, policy.cfg.algo.gamma))


def test_sac_shows_the_gaussian_and_the_twin_q_of_the_action(one_thread):
    policy = fresh_policy("Pendulum-v1:sac")
    episode = record_episode(policy, seed=SEED, max_steps=12, frames=False)
    actor, critic = policy.agent.actor, policy.agent.critic
    rows = replay(policy, SEED, 12)
    assert episode.length == len(rows) == 12 and not episode.ended  # cut by max_steps
    for t, (obs, _, action, _) in enumerate(rows):
        x = net_input(policy, obs)
        with torch.no_grad():
            features = actor.encoder(x).squeeze(0)
            mean, log_std = actor.mean(features), actor.log_std(features).clamp(-20, 2)
            q = critic(x, torch.as_tensor(action[None], dtype=torch.float32)).min(0).values
        np.testing.assert_allclose(episode.actions[t], action)
        np.testing.assert_allclose(episode.means[t], mean[0].numpy(), rtol=1e-5)
        np.testing.assert_allclose(episode.stds[t], log_std[0].exp().numpy(), rtol=1e-5)
        np.testing.assert_allclose(np.tanh(episode.means[t]) * 2.0, action, rtol=1e-5)  # Pendulum: bounds ±2
        assert episode.values[t] == pytest.approx(float(q[0]), rel=1e-5)


@pytest.mark.parametrize("name", ["td3", "ddpg"])
def test_td3_and_ddpg_show_the_action_and_the_smaller_q_of_it(one_thread, name):
    policy = fresh_policy(f"Pendulum-v1:{name}", "network.hidden_sizes=[32,32]")
    episode = record_episode(policy, seed=SEED, max_steps=8, frames=False)
    rows = replay(policy, SEED, 8)
    for t, (obs, _, action, _) in enumerate(rows):
        x = net_input(policy, obs)
        with torch.no_grad():
            q = policy.agent.critic(x, torch.as_tensor(action[None], dtype=torch.float32)).min(0).values
        np.testing.assert_allclose(episode.means[t], action, rtol=1e-6)  # a deterministic actor: its mean acts
        assert episode.values[t] == pytest.approx(float(q[0]), rel=1e-5)
    assert episode.probs is None and episode.stds is None and episode.gamma == policy.cfg.algo.gamma


def test_csv_reads_back_and_mp4_has_every_frame(one_thread, tmp_path):
    policy = fresh_policy("CartPole-v1:ppo")
    episode = record_episode(policy, seed=SEED, max_steps=25)
    back = read_csv(write_csv(episode, tmp_path / "episode.csv"), "CartPole-v1")
    for name in ("observations", "actions", "rewards", "returns", "values", "advantages", "probs"):
        np.testing.assert_array_equal(getattr(back, name), getattr(episode, name), err_msg=name)
    assert back.means is None and back.frames is None and back.length == episode.length
    header = (tmp_path / "episode.csv").read_text().splitlines()[0]
    assert header == "step,obs_0,obs_1,obs_2,obs_3,action,prob_0,prob_1,value,reward,return_to_go,advantage"
    with imageio.get_reader(write_mp4(episode, tmp_path / "episode.mp4"), format="FFMPEG") as reader:
        assert sum(1 for _ in reader) == episode.length + 1
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an episode CSV"):
        read_csv(tmp_path / "bad.csv")
