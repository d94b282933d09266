"""MiniGrid ids through `rlfoundry.envs.make`: channel-first uint8 views, seeding, time limit, episode statistics."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from rollouts import rollout  # tests/envs/rollouts.py

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig, MiniGridConfig
from rlfoundry.envs import build as build_envs
from rlfoundry.envs import probe_spaces, register_optional_families

EMPTY = "MiniGrid-Empty-5x5-v0"  # 5×5 walls included; agent at (1, 1) facing right, goal at (3, 3)
TO_GOAL = [2, 2, 1, 2, 2]  # forward, forward, turn right, forward, forward
AGENT = 10  # OBJECT_TO_IDX["agent"]

VIEWS = {  # view → observation shape on EMPTY (tile size 8)
    "partial": (3, 7, 7),
    "full": (3, 5, 5),
    "rgb_partial": (3, 56, 56),
    "rgb_full": (3, 40, 40),
}


@pytest.fixture
def build():
    """build_envs(), closing every env the test built."""
    built = []

    def _build(env_id=EMPTY, view="partial", num_envs=2, vectorization="sync", **cfg_kwargs):
        minigrid = MiniGridConfig(view=view)
        cfg = EnvConfig(id=env_id, num_envs=num_envs, vectorization=vectorization, minigrid=minigrid, **cfg_kwargs)
        envs, spec = build_envs(cfg)
        built.append(envs)
        return envs, spec

    yield _build
    for envs in built:
        envs.close()


@pytest.mark.parametrize("view", list(VIEWS))
def test_each_view_is_channel_first_uint8(build, view):
    envs, spec = build(view=view)
    assert isinstance(spec.observation_space, spaces.Box)
    assert spec.obs_shape == VIEWS[view] and spec.observation_space.dtype == np.uint8
    assert spec.discrete and spec.action_space == spaces.Discrete(7)
    seen = rollout(envs, seed=0)
    assert seen.dtype == np.uint8 and seen.shape[1:] == (2, *VIEWS[view])
    assert all(spec.observation_space.contains(obs) for obs in seen.reshape(-1, *VIEWS[view]))
    obs, _ = envs.reset(seed=1)
    assert obs.shape == (2, *VIEWS[view])


def test_symbolic_views_match_minigrid_encoding(build):
    """partial = MiniGrid's image [x, y, c] as [c, y, x]; full draws the agent at row y, column x."""
    register_optional_families()
    envs, _ = build(env_id="MiniGrid-DoorKey-5x5-v0", num_envs=1)
    raw = gym.make("MiniGrid-DoorKey-5x5-v0")
    obs, _ = envs.reset(seed=3)
    raw_obs, _ = raw.reset(seed=3)
    np.testing.assert_array_equal(obs[0], raw_obs["image"].transpose(2, 1, 0))
    raw.close()

    # RedBlueDoors-6x6 is 12 wide and 6 high: rows are axis 1, columns axis 2.
    envs, spec = build(env_id="MiniGrid-RedBlueDoors-6x6-v0", view="full", num_envs=1)
    assert spec.obs_shape == (3, 6, 12)
    obs, _ = envs.reset(seed=0)
    x, y = envs.unwrapped.envs[0].unwrapped.agent_pos
    assert obs[0, 0, y, x] == AGENT and np.count_nonzero(obs[0, 0] == AGENT) == 1
    assert obs[0, 2, y, x] == envs.unwrapped.envs[0].unwrapped.agent_dir
    assert np.array_equal(spec.observation_space.high[:, 0, 0], [10, 5, 3])
    _, spec = build(env_id="MiniGrid-RedBlueDoors-6x6-v0", view="rgb_full", num_envs=1)
    assert spec.obs_shape == (3, 6 * 8, 12 * 8)


@pytest.mark.parametrize("view", ["full", "rgb_partial", "rgb_full"])
def test_views_match_minigrids_own_wrappers(view):
    """Our views are computed from the env itself (so the env keeps a spec); minigrid's wrappers are the oracle."""
    from minigrid.wrappers import FullyObsWrapper, RGBImgObsWrapper, RGBImgPartialObsWrapper

    from rlfoundry.envs.minigrid import make_env

    oracle_wrapper = {"full": FullyObsWrapper, "rgb_partial": RGBImgPartialObsWrapper, "rgb_full": RGBImgObsWrapper}
    register_optional_families()
    ours = make_env("MiniGrid-DoorKey-5x5-v0", {}, view=view, tile_size=5)
    raw = gym.make("MiniGrid-DoorKey-5x5-v0")
    oracle = oracle_wrapper[view](raw) if view == "full" else oracle_wrapper[view](raw, tile_size=5)
    axes = (2, 1, 0) if view == "full" else (2, 0, 1)
    obs, expected = ours.reset(seed=4)[0], oracle.reset(seed=4)[0]["image"]
    actions = np.random.default_rng(0).integers(0, 7, size=30)
    for action in actions:
        np.testing.assert_array_equal(obs, expected.transpose(axes))
        assert ours.observation_space.contains(obs)
        obs, expected = ours.step(action)[0], oracle.step(action)[0]["image"]
    ours.close(), oracle.close()


def test_tile_size():
    minigrid = MiniGridConfig(view="rgb_partial", tile_size=4)
    cfg = EnvConfig(id=EMPTY, num_envs=1, vectorization="sync", minigrid=minigrid)
    envs, spec = build_envs(cfg)
    envs.close()
    assert spec.obs_shape == (3, 28, 28)


def test_async_vector_env(build):
    envs, spec = build(vectorization="async")
    assert spec.vectorization == "async"
    seen = rollout(envs, seed=0, steps=5)
    assert seen.dtype == np.uint8 and seen.shape == (6, 2, 3, 7, 7)


@pytest.mark.parametrize("view", ["partial", "rgb_full"])
def test_same_seed_same_observations(build, view):
    env_id = "MiniGrid-DoorKey-5x5-v0"  # random layout, so seeds matter
    first, _ = build(env_id=env_id, view=view)
    second, _ = build(env_id=env_id, view=view)
    a, b = rollout(first, seed=42), rollout(second, seed=42)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0, 0], a[0, 1])  # sub-envs get seed + i: different layouts
    assert not np.array_equal(rollout(first, seed=43), a)


def test_truncation_at_max_steps(build):
    envs, _ = build(num_envs=1, max_episode_steps=4)
    assert envs.unwrapped.envs[0].unwrapped.max_steps == 4  # one time limit: MiniGrid's own
    envs.reset(seed=0)
    for t in range(1, 5):  # turning left never reaches the goal
        _, reward, terminated, truncated, info = envs.step(np.array([0]))
        assert reward[0] == 0.0 and not terminated[0]
        assert truncated[0] == (t == 4)
    assert info["_episode"][0] and info["episode"]["l"][0] == 4 and info["episode"]["r"][0] == 0.0
    _, reward, terminated, truncated, _ = envs.step(np.array([2]))  # NEXT_STEP: this step resets
    assert reward[0] == 0.0 and not terminated[0] and not truncated[0]
    assert envs.unwrapped.envs[0].unwrapped.step_count == 0


def test_goal_on_the_last_step_is_termination_only(build):
    register_optional_families()
    raw = gym.make(EMPTY, max_steps=len(TO_GOAL))
    raw.reset(seed=0)
    for action in TO_GOAL:
        *_, raw_terminated, raw_truncated, _ = raw.step(action)
    raw.close()
    assert raw_terminated and raw_truncated  # MiniGrid reports both

    envs, _ = build(num_envs=1, max_episode_steps=len(TO_GOAL))
    envs.reset(seed=0)
    for action in TO_GOAL:
        _, reward, terminated, truncated, info = envs.step(np.array([action]))
    assert terminated[0] and not truncated[0]
    assert reward[0] == pytest.approx(1 - 0.9 * len(TO_GOAL) / len(TO_GOAL))
    assert info["episode"]["r"][0] == pytest.approx(reward[0]) and info["episode"]["l"][0] == len(TO_GOAL)


def test_episode_statistics_match_rewards(build):
    """Random play with a short limit: every reported episode matches the rewards and steps seen (NEXT_STEP)."""
    n = 3
    envs, _ = build(num_envs=n, max_episode_steps=12)
    envs.reset(seed=5)
    envs.action_space.seed(5)
    returns, lengths = np.zeros(n), np.zeros(n, dtype=int)
    resetting = np.zeros(n, dtype=bool)
    episodes = 0
    for _ in range(150):
        _, rewards, terminated, truncated, info = envs.step(envs.action_space.sample())
        done = terminated | truncated
        assert not (terminated & truncated).any()
        assert np.all(rewards[resetting] == 0.0) and not done[resetting].any()
        returns[~resetting] += rewards[~resetting]
        lengths[~resetting] += 1
        np.testing.assert_array_equal(info.get("_episode", np.zeros(n, dtype=bool)), done)
        for i in np.flatnonzero(done):
            assert info["episode"]["r"][i] == pytest.approx(returns[i])
            assert info["episode"]["l"][i] == lengths[i]
        episodes += int(done.sum())
        returns[done], lengths[done] = 0.0, 0
        resetting = done
    assert episodes >= 20


def test_probe_reports_the_wrapped_box():
    observation_space, action_space = probe_spaces(EMPTY)
    assert isinstance(observation_space, spaces.Box) and observation_space.shape == (3, 7, 7)
    assert observation_space.dtype == np.uint8 and action_space == spaces.Discrete(7)
    cfg = EnvConfig(id=EMPTY, minigrid=MiniGridConfig(view="rgb_full"))
    observation_space, _ = probe_spaces(EMPTY, env_cfg=cfg)
    assert observation_space.shape == (3, 40, 40) and observation_space.dtype == np.uint8


def test_normalize_obs_on_images_is_a_config_error(build):
    cfg = EnvConfig(id=EMPTY, normalize_obs=True)
    with pytest.raises(ConfigError, match="env.normalize_obs"):
        probe_spaces(EMPTY, env_cfg=cfg)
    with pytest.raises(ConfigError, match="env.normalize_obs"):
        build(normalize_obs=True)
    envs, _ = build(normalize_reward=True)  # rewards are not images
    rollout(envs, seed=0, steps=3)


def test_minigrid_section_on_another_id_is_a_config_error():
    cfg = EnvConfig(id="CartPole-v1", minigrid=MiniGridConfig(view="full"))
    with pytest.raises(ConfigError, match="env.minigrid"):
        probe_spaces("CartPole-v1", env_cfg=cfg)
