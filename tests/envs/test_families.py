"""`rlfoundry.envs.make` for each env family: spaces, step contract, episode statistics, seeding, normalisation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import vector as vw
from rollouts import rollout  # tests/envs/rollouts.py

from rlfoundry.config import cores as cores_module
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import EnvInfo, copy_obs_stats, find_wrapper
from rlfoundry.envs import build as build_envs
from rlfoundry.envs import factory as envs_module

NUM_ENVS = 2
STEPS = 50

FAMILIES = [
    # (id, vectorization, discrete)
    ("CartPole-v1", "vector_entry_point", True),
    ("Pendulum-v1", "auto", False),
    ("Acrobot-v1", "sync", True),
    ("LunarLander-v3", "auto", True),
    ("BipedalWalker-v3", "auto", False),
    ("HalfCheetah-v5", "sync", False),
    ("Hopper-v5", "sync", False),
    ("Hopper-v5", "async", False),
]


@pytest.fixture
def build(tmp_path, monkeypatch):
    """build_envs(), closing every env the test built."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory
    built = []

    def _build(env_id: str, evaluation: bool = False, num_envs: int = NUM_ENVS, **cfg_kwargs):
        envs, spec = build_envs(EnvConfig(id=env_id, num_envs=num_envs, **cfg_kwargs), evaluation=evaluation)
        built.append(envs)
        return envs, spec

    yield _build
    for envs in built:
        envs.close()


@pytest.mark.parametrize(("env_id", "vectorization", "discrete"), FAMILIES, ids=[f"{e}-{v}" for e, v, _ in FAMILIES])
def test_family_step_contract(build, env_id, vectorization, discrete):
    envs, spec = build(env_id, vectorization=vectorization)
    assert isinstance(spec, EnvInfo)
    assert spec.id == env_id and spec.num_envs == NUM_ENVS == envs.num_envs
    if vectorization != "auto":
        assert spec.vectorization == vectorization
    else:
        assert spec.vectorization in ("sync", "async")  # these ids have no vector entry point
    assert spec.discrete is discrete
    assert isinstance(spec.action_space, spaces.Discrete if discrete else spaces.Box)
    assert spec.observation_space == envs.single_observation_space
    assert spec.action_space == envs.single_action_space
    assert spec.obs_shape == tuple(envs.single_observation_space.shape)

    obs, info = envs.reset(seed=123)
    assert isinstance(info, dict)
    assert obs.shape == (NUM_ENVS, *spec.obs_shape)
    assert obs.dtype == spec.observation_space.dtype
    envs.action_space.seed(0)
    for _ in range(STEPS):
        actions = envs.action_space.sample()
        assert actions.shape[0] == NUM_ENVS
        obs, rewards, terminated, truncated, info = envs.step(actions)
        assert obs.shape == (NUM_ENVS, *spec.obs_shape)
        assert obs.dtype == spec.observation_space.dtype
        assert np.all(np.isfinite(obs))
        for array in (rewards, terminated, truncated):
            assert isinstance(array, np.ndarray) and array.shape == (NUM_ENVS,)
        assert np.issubdtype(rewards.dtype, np.floating)
        assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_
        assert isinstance(info, dict)


def test_auto_picks_the_vector_entry_point(build):
    _, spec = build("CartPole-v1")
    assert spec.vectorization == "vector_entry_point"


@pytest.mark.parametrize("cores, share, expected", [(2, "1", "async"), (2, "2", "sync"), (1, "1", "sync"),
                                                    (8, "2", "async")])
def test_auto_puts_costly_envs_in_processes_only_on_cores_of_the_runs_own(monkeypatch, cores, share, expected):
    # Under `trials` on 2 cores each run has one: 32 envs stepping in processes there only take turns on it.
    monkeypatch.setattr(cores_module, "usable_cores", lambda: cores)
    monkeypatch.setenv(cores_module.SHARE_VARIABLE, share)
    monkeypatch.setattr(envs_module, "_step_seconds", lambda make_env: 1e-3)  # x 4 envs: above ASYNC_STEP_SECONDS
    assert envs_module.choose_vectorization(EnvConfig(id="Pendulum-v1", num_envs=4), 4) == expected
    assert envs_module.choose_vectorization(EnvConfig(id="Pendulum-v1", num_envs=1), 1) == "sync"


def test_vector_entry_point_without_one_is_a_config_error(build):
    with pytest.raises(ConfigError, match="vector_entry_point"):
        build("Pendulum-v1", vectorization="vector_entry_point")


def test_num_envs_argument_overrides_config():
    envs, spec = build_envs(EnvConfig(id="Acrobot-v1", num_envs=4, vectorization="sync"), num_envs=3)
    try:
        assert spec.num_envs == envs.num_envs == 3
        assert envs.reset(seed=0)[0].shape == (3, 6)
    finally:
        envs.close()


# ---------------------------------------------------------------- episode statistics under NEXT_STEP autoreset


def check_episode_statistics(envs, steps: int = 400, min_episodes: int = 4, raw_reward_one: bool = False) -> int:
    """Step with random actions and check every reported episode against the rewards seen.

    NEXT_STEP autoreset: the step after a done resets that sub-env, with reward 0 and no done flag;
    it belongs to no episode. With `raw_reward_one` (CartPole under reward normalisation) the true
    return is the episode length, whatever reward the wrapper returned.
    """
    n = envs.num_envs
    envs.reset(seed=7)
    envs.action_space.seed(7)
    returns, lengths = np.zeros(n), np.zeros(n, dtype=int)
    resetting = np.zeros(n, dtype=bool)
    episodes = 0
    for _ in range(steps):
        _, rewards, terminated, truncated, info = envs.step(envs.action_space.sample())
        done = terminated | truncated
        if resetting.any():
            assert np.all(rewards[resetting] == 0.0)
            assert not done[resetting].any()
        active = ~resetting
        returns[active] += 1.0 if raw_reward_one else rewards[active]
        lengths[active] += 1
        if done.any():
            assert "episode" in info and "_episode" in info
            np.testing.assert_array_equal(info["_episode"], done)
            for i in np.flatnonzero(done):
                assert info["episode"]["r"][i] == pytest.approx(returns[i], rel=1e-5)
                assert info["episode"]["l"][i] == lengths[i]
            episodes += int(done.sum())
            returns[done], lengths[done] = 0.0, 0
        else:
            assert not np.any(info.get("_episode", False))
        resetting = done
    assert episodes >= min_episodes
    return episodes


@pytest.mark.parametrize("vectorization", ["vector_entry_point", "sync", "async"])
def test_episode_statistics_match_rewards(build, vectorization):
    envs, _ = build("CartPole-v1", vectorization=vectorization)
    check_episode_statistics(envs)


def test_episode_statistics_report_true_returns_under_reward_normalisation(build):
    envs, _ = build("CartPole-v1", vectorization="vector_entry_point", normalize_reward=True)
    assert find_wrapper(envs, vw.NormalizeReward) is not None
    # Normalised rewards are not 1, but the reported return is the raw one: the episode length.
    check_episode_statistics(envs, raw_reward_one=True)
    _, rewards, *_ = envs.step(envs.action_space.sample())
    assert not np.allclose(rewards[rewards != 0], 1.0)


def test_evaluation_envs_do_not_normalise_rewards(build):
    envs, _ = build("CartPole-v1", normalize_reward=True, evaluation=True)
    assert find_wrapper(envs, vw.NormalizeReward) is None
    check_episode_statistics(envs)


# ---------------------------------------------------------------- seeding


@pytest.mark.parametrize(
    ("env_id", "vectorization"),
    [("CartPole-v1", "vector_entry_point"), ("Pendulum-v1", "sync"), ("LunarLander-v3", "sync"), ("Hopper-v5", "sync")],
)
def test_same_seed_same_observations(build, env_id, vectorization):
    first, _ = build(env_id, vectorization=vectorization)
    second, _ = build(env_id, vectorization=vectorization)
    a, b = rollout(first, seed=42, steps=STEPS, action_seed=0), rollout(second, seed=42, steps=STEPS, action_seed=0)
    np.testing.assert_array_equal(a, b)
    third, _ = build(env_id, vectorization=vectorization)
    assert not np.array_equal(rollout(third, seed=43, steps=STEPS, action_seed=0), a)


def test_sub_env_i_is_seeded_with_seed_plus_i(build):
    envs, _ = build("Pendulum-v1", vectorization="sync", num_envs=3)
    obs, _ = envs.reset(seed=5)
    for i in range(3):
        single = gym.make("Pendulum-v1")
        expected, _ = single.reset(seed=5 + i)
        single.close()
        np.testing.assert_array_equal(obs[i], expected)


# ---------------------------------------------------------------- observation normalisation


@pytest.mark.parametrize(("env_id", "vectorization"), [("Hopper-v5", "sync"), ("CartPole-v1", "vector_entry_point")])
def test_normalized_observations_are_float32_and_clipped(build, env_id, vectorization):
    clip = 0.5
    envs, spec = build(env_id, vectorization=vectorization, normalize_obs=True, clip_obs=clip)
    assert spec.observation_space.dtype == np.float32
    seen = rollout(envs, seed=0, steps=STEPS, action_seed=0)
    assert seen.dtype == np.float32
    assert np.all(np.abs(seen) <= clip)
    assert np.isclose(np.abs(seen).max(), clip)  # clipping was actually needed
    rms = find_wrapper(envs, vw.NormalizeObservation).obs_rms
    assert rms.count > NUM_ENVS * STEPS  # statistics updated on reset and every step


def test_evaluation_does_not_update_obs_stats(build):
    envs, _ = build("Pendulum-v1", vectorization="sync", normalize_obs=True, evaluation=True)
    rms = find_wrapper(envs, vw.NormalizeObservation).obs_rms
    mean, var, count = rms.mean.copy(), rms.var.copy(), rms.count
    rollout(envs, seed=0, steps=STEPS, action_seed=0)
    np.testing.assert_array_equal(rms.mean, mean)
    np.testing.assert_array_equal(rms.var, var)
    assert rms.count == count


def test_copy_obs_stats(build):
    clip = 10.0
    train, _ = build("Pendulum-v1", vectorization="sync", normalize_obs=True, clip_obs=clip)
    rollout(train, seed=0, steps=STEPS, action_seed=0)
    evaluation, _ = build("Pendulum-v1", vectorization="sync", normalize_obs=True, clip_obs=clip, evaluation=True)
    copy_obs_stats(train, evaluation)
    src = find_wrapper(train, vw.NormalizeObservation)
    dst = find_wrapper(evaluation, vw.NormalizeObservation)
    np.testing.assert_array_equal(dst.obs_rms.mean, src.obs_rms.mean)
    np.testing.assert_array_equal(dst.obs_rms.var, src.obs_rms.var)
    assert dst.obs_rms.count == src.obs_rms.count
    assert dst.obs_rms.mean is not src.obs_rms.mean  # a copy, not shared

    # The evaluation envs normalise with exactly the copied, frozen statistics.
    mean, var = src.obs_rms.mean.copy(), src.obs_rms.var.copy()
    raw, _ = build("Pendulum-v1", vectorization="sync")
    raw_obs = rollout(raw, seed=3, steps=20)
    eval_obs = rollout(evaluation, seed=3, steps=20)
    expected = np.clip((raw_obs - mean) / np.sqrt(var + dst.epsilon), -clip, clip)
    np.testing.assert_allclose(eval_obs, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dst.obs_rms.mean, mean)

    # Training on does not move the evaluation statistics.
    rollout(train, seed=1, steps=10)
    assert not np.array_equal(src.obs_rms.mean, mean)
    np.testing.assert_array_equal(dst.obs_rms.mean, mean)


def test_copy_obs_stats_without_normalisation_is_a_no_op(build):
    train, _ = build("Pendulum-v1", vectorization="sync")
    evaluation, _ = build("Pendulum-v1", vectorization="sync", normalize_obs=True, evaluation=True)
    before = find_wrapper(evaluation, vw.NormalizeObservation).obs_rms.mean.copy()
    copy_obs_stats(train, evaluation)
    np.testing.assert_array_equal(find_wrapper(evaluation, vw.NormalizeObservation).obs_rms.mean, before)
