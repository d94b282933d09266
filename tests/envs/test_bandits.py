"""`Bandit-*` ids: spaces, seeding, reward means over many pulls, regret info, registration and config path."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, register_optional_families
from rlfoundry.envs.bandits import BANDITS, BERNOULLI10_MEANS, GAUSSIAN10_MEANS, BanditEnv
from rlfoundry.experiment.load import load_config

register_optional_families()


def pull_each_arm(env: BanditEnv, pulls: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean reward and mean regret of `pulls` pulls of every arm (one episode of `pulls` steps per arm)."""
    rewards, regrets = np.zeros(env.arms), np.zeros(env.arms)
    for arm in range(env.arms):
        env.reset(seed=arm)
        for _ in range(pulls):
            _, reward, _, _, info = env.step(arm)
            rewards[arm] += reward
            regrets[arm] += info["regret"]
    return rewards / pulls, regrets / pulls


@pytest.mark.parametrize("env_id", list(BANDITS))
def test_registered_ids(env_id):
    env = gym.make(env_id)
    kwargs, threshold = BANDITS[env_id]
    assert gym.spec(env_id).reward_threshold == threshold
    assert isinstance(env.action_space, spaces.Discrete) and env.action_space.n == len(kwargs.get("means", [0] * 10))
    assert env.observation_space == spaces.Box(0.0, 1.0, (1,), np.float32)
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (1,) and env.observation_space.contains(obs)
    assert info["optimal_arm"] == int(np.argmax(env.unwrapped.means))
    horizon = kwargs.get("horizon", 1)
    for t in range(1, horizon + 1):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        np.testing.assert_array_equal(obs, [1.0])
        assert isinstance(reward, float) and not truncated
        assert terminated == (t == horizon)
    env.close()


def test_fixed_means_thresholds_sit_above_the_runner_up():
    for env_id, (kwargs, threshold) in BANDITS.items():
        if "means" in kwargs:
            best, runner_up = sorted(kwargs["means"])[-1:-3:-1]
            assert threshold == pytest.approx(0.9 * best) and threshold > runner_up, env_id


@pytest.mark.parametrize(
    ("distribution", "means", "tolerance"),
    [("bernoulli", BERNOULLI10_MEANS, 0.03), ("gaussian", GAUSSIAN10_MEANS, 0.06)],  # ≈ 4 standard errors
)
def test_rewards_have_the_arm_means(distribution, means, tolerance):
    env = BanditEnv(distribution=distribution, means=means, horizon=5000)
    rewards, regrets = pull_each_arm(env, 5000)
    np.testing.assert_allclose(rewards, means, atol=tolerance)
    np.testing.assert_allclose(regrets, max(means) - np.asarray(means))  # expected regret: exact


def test_regret_info():
    env = BanditEnv(means=[0.2, 0.8])
    _, info = env.reset(seed=0)
    assert info == {"optimal_arm": 1}
    _, _, terminated, _, info = env.step(0)
    assert terminated and info["optimal_arm"] == 1 and info["regret"] == pytest.approx(0.6)
    env.reset()
    assert env.step(1)[4]["regret"] == 0.0


def test_seeding_is_reproducible():
    def play(seed: int) -> tuple[np.ndarray, list[float]]:
        env = BanditEnv(arms=10, distribution="gaussian", horizon=20)
        env.reset(seed=seed)
        means = env.means.copy()
        return means, [env.step(t % 10)[1] for t in range(20)]

    means, rewards = play(3)
    again_means, again_rewards = play(3)
    np.testing.assert_array_equal(means, again_means)
    assert rewards == again_rewards
    other_means, other_rewards = play(4)
    assert not np.array_equal(means, other_means) and rewards != other_rewards


def test_random_means_are_redrawn_every_reset():
    env = BanditEnv(arms=10, distribution="bernoulli")
    env.reset(seed=0)
    first = env.means.copy()
    env.reset()
    assert not np.array_equal(first, env.means)
    assert np.all((env.means >= 0) & (env.means <= 1))
    fixed = BanditEnv(means=[0.1, 0.9])
    fixed.reset(seed=0)
    fixed.reset(seed=1)
    np.testing.assert_array_equal(fixed.means, [0.1, 0.9])


@pytest.mark.parametrize(
    "kwargs",
    [{"arms": 1}, {}, {"means": [0.5]}, {"means": [0.2, 1.5]}, {"arms": 3, "means": [0.1, 0.2]},
     {"arms": 2, "horizon": 0}, {"arms": 2, "distribution": "poisson"}],
)
def test_bad_kwargs(kwargs):
    with pytest.raises(ValueError):
        BanditEnv(**kwargs)


def test_vector_env_reports_regret_per_sub_env():
    envs, spec = build(EnvConfig(id="Bandit-Bernoulli10-v0", num_envs=3, vectorization="sync"))
    try:
        assert spec.discrete and spec.obs_shape == (1,)
        envs.reset(seed=0)
        _, _, terminated, _, info = envs.step(np.array([6, 2, 0]))  # arm 6 is the best (0.9)
        assert terminated.all()
        np.testing.assert_array_equal(info["optimal_arm"], [6, 6, 6])
        np.testing.assert_allclose(info["regret"], [0.0, 0.1, 0.4])
        np.testing.assert_array_equal(info["episode"]["l"], [1, 1, 1])
    finally:
        envs.close()


@pytest.mark.parametrize("spec", ["Bandit-Bernoulli10-v0:ppo", "Bandit-TwoArm-v0:ppo", "Bandit-Gaussian10Random-v0"])
def test_ids_load_through_the_normal_path(spec):
    cfg = load_config(spec)
    env_id = spec.split(":")[0]
    assert cfg.env.id == env_id
    assert cfg.threshold == gym.spec(env_id).reward_threshold
