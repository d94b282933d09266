"""ViZDoom ids (`rlfoundry.envs.vizdoom`): headless frames in the configured shapes, the stack's layout, seeding,
timeouts as truncations, episode statistics, check_env, a few PPO iterations, and the refused ids and options."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build as build_envs
from rlfoundry.envs import env_fn, make_kwargs, register_optional_families

pytest.importorskip("vizdoom")

BASIC = "VizdoomBasic-v1"  # a 300-tic timeout = 75 steps at frame skip 4; -1 a tic, -5 a missed shot
NOOP, ATTACK, RIGHT, LEFT = 0, 1, 2, 3  # Discrete(4): no button, or one of its buttons (vizdoom's order, reversed)


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    """The engine writes _vizdoom.ini and an empty _vizdoom/ into the working directory."""
    monkeypatch.chdir(tmp_path)


def single(cfg: EnvConfig) -> gym.Env:
    """The single env our family builds, as `env_fn` hands it to a vector env."""
    return env_fn(cfg.id, make_kwargs(cfg), cfg)()


@pytest.fixture
def build():
    """build_envs(), closing every vector env the test built."""
    built = []

    def _build(num_envs: int = 2, **cfg_kwargs):
        envs, spec = build_envs(EnvConfig(id=BASIC, num_envs=num_envs, vectorization="sync", **cfg_kwargs))
        built.append(envs)
        return envs, spec

    yield _build
    for envs in built:
        envs.close()


def test_importing_the_family_registers_its_discrete_ids():
    register_optional_families(BASIC)
    assert gym.spec(BASIC).kwargs["max_buttons_pressed"] == 1


@pytest.mark.parametrize(("frames", "shape"), [
    ({}, (4, 84, 84)),  # the defaults: grey, 84x84, 4 frames
    ({"grayscale": False, "img_size": [60, 80], "frame_stack": 2}, (6, 60, 80)),
])
def test_spaces_and_steps_headless(build, frames, shape):
    envs, spec = build(vizdoom=frames)
    assert spec.obs_shape == shape and spec.observation_space.dtype == np.uint8
    assert spec.action_space == gym.spaces.Discrete(4)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, *shape) and obs.dtype == np.uint8
    envs.action_space.seed(0)
    for _ in range(5):
        obs, rewards, terminated, truncated, _ = envs.step(envs.action_space.sample())
    assert obs.shape == (2, *shape) and rewards.dtype.kind == "f"
    assert obs[:, -1].any() and obs.std() > 0  # the engine rendered without a display


def test_the_stack_shifts_one_frame_a_step_zeros_before_the_reset_frame():
    env = single(EnvConfig(id=BASIC))
    try:
        first, _ = env.reset(seed=3)
        assert not first[:3].any() and first[3].any()  # [0, 0, 0, reset frame]
        second, *_ = env.step(NOOP)
        np.testing.assert_array_equal(second[:3], first[1:])
        third, *_ = env.step(NOOP)
        np.testing.assert_array_equal(third[:3], second[1:])
    finally:
        env.close()


def test_rgb_frames_are_frame_major_then_channels():
    env = single(EnvConfig(id=BASIC, vizdoom={"grayscale": False, "frame_stack": 2, "img_size": 32}))
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (6, 32, 32) and not obs[:3].any()  # the zero frame, then the reset frame's R, G, B
        screen = env.unwrapped.state.screen_buffer  # the engine's RGB [H, W, 3]
        import cv2

        expected = cv2.resize(screen, (32, 32), interpolation=cv2.INTER_AREA).transpose(2, 0, 1)
        np.testing.assert_array_equal(obs[3:], expected)
    finally:
        env.close()


def test_a_seed_gives_the_same_episode_and_another_seed_another():
    def play(seed: int) -> tuple[np.ndarray, list[float]]:
        env = single(EnvConfig(id=BASIC))
        try:
            obs, _ = env.reset(seed=seed)
            frames, rewards = [obs], []
            for action in [RIGHT, RIGHT, LEFT, NOOP, LEFT, LEFT, RIGHT]:  # no shot: no kill, no end
                obs, reward, *_ = env.step(action)
                frames.append(obs)
                rewards.append(reward)
            return np.stack(frames), rewards
        finally:
            env.close()

    frames, rewards = play(7)
    again, rewards_again = play(7)
    np.testing.assert_array_equal(frames, again)
    assert rewards == rewards_again
    other, _ = play(8)  # Basic places its monster at random
    assert not np.array_equal(frames, other)


def test_the_scenario_timeout_is_a_truncation_with_the_last_screen_repeated():
    env = single(EnvConfig(id=BASIC))
    try:
        env.reset(seed=0)
        for step in range(1, 100):  # noqa: B007 (the step the loop ends at is what the test checks)
            obs, reward, terminated, truncated, _ = env.step(NOOP)  # no shot: the monster lives until the timeout
            if terminated or truncated:
                break
        assert (step, terminated, truncated) == (75, False, True)  # 300 tics / 4
        np.testing.assert_array_equal(obs[-1], obs[-2])  # vizdoom has no screen after the end: the last one again
        assert obs[-1].any()
    finally:
        env.close()


def test_episode_statistics_report_the_true_return_and_length(build):
    envs, _ = build(max_episode_steps=6)
    envs.reset(seed=1)
    returns = np.zeros(2)
    for _step in range(1, 7):
        _, rewards, terminated, truncated, info = envs.step(np.array([NOOP, RIGHT]))
        returns += rewards
    assert truncated.all() and not terminated.any()
    assert info["_episode"].all()
    np.testing.assert_array_equal(info["episode"]["l"], [6, 6])
    np.testing.assert_allclose(info["episode"]["r"], returns)
    assert (returns == -24).all()  # 6 steps of 4 tics, no shot fired


def test_check_env_passes_on_the_single_env():
    env = single(EnvConfig(id=BASIC, vizdoom={"frame_stack": 2, "img_size": 42}))
    try:
        check_env(env, skip_render_check=True)  # rendering alone: test_render_rgb_array_headless
        assert env.spec is not None and env.spec.id == BASIC
    finally:
        env.close()


def test_render_rgb_array_headless():
    env = single(EnvConfig(id=BASIC, kwargs={"render_mode": "rgb_array"}))
    try:
        env.reset(seed=0)
        frame = env.render()
        assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.std() > 0
        assert env.metadata["render_fps"] == 35 / 4  # real time at frame skip 4
    finally:
        env.close()

@pytest.mark.parametrize(("env_id", "kwargs", "frames", "expected"), [
    ("VizdoomBasic-MultiBinary-v1", {}, {}, "use VizdoomBasic-v1"),
    ("VizdoomFreedoom1E1M1-S3-v0", {}, {}, "env.kwargs.max_buttons_pressed: 1"),
    ("VizdoomDoomE1M1-S3-v0", {"max_buttons_pressed": 1}, {}, "doom.wad"),
    (BASIC, {"frame_skip": 2}, {}, "env.vizdoom.frame_skip"),
    (BASIC, {"no_such_option": 1}, {}, "no_such_option"),
    (BASIC, {"screen_format": "GRAY8"}, {"grayscale": False}, "env.vizdoom.grayscale"),
    (BASIC, {}, {"repeat_action_probability": 0.25}, "env.vizdoom.repeat_action_probability"),
])
def test_refused_ids_and_options_are_config_errors(env_id, kwargs, frames, expected):
    register_optional_families(env_id)
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        single(EnvConfig(id=env_id, kwargs=kwargs, vizdoom=frames))


def test_a_freedoom_map_builds_with_discrete_buttons():
    env = single(EnvConfig(id="VizdoomFreedoom1E1M1-S3-v0", kwargs={"max_buttons_pressed": 1},
                           vizdoom={"img_size": 42}))
    try:
        assert env.action_space == gym.spaces.Discrete(20)  # 19 buttons or none
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 42, 42) and obs[-1].any()
    finally:
        env.close()


@pytest.mark.parametrize(("env_id", "override", "key"), [
    (BASIC, "env.vizdoom.img_size=0", "env.vizdoom.img_size"),
    (BASIC, "env.vizdoom.frame_stack=0", "env.vizdoom.frame_stack"),
    (BASIC, "env.vizdoom.frame_skip=-1", "env.vizdoom.frame_skip"),
    (BASIC, "env.vizdoom.repeat_action_probability=2", "env.vizdoom.repeat_action_probability"),
    (BASIC, "env.vizdoom.no_such_key=1", "no_such_key"),
    (BASIC, "env.retro.frame_skip=2", "env.retro"),  # another family's section
    ("retro/Airstriker-Genesis-v0", "env.retro.img_size=[84]", "env.retro.img_size"),
    ("retro/Airstriker-Genesis-v0", "env.retro.frame_stack=0", "env.retro.frame_stack"),
    ("retro/Airstriker-Genesis-v0", "env.retro.repeat_action_probability=-0.1", "env.retro.repeat_action_probability"),
    ("retro/Airstriker-Genesis-v0", "env.retro.grayscale=maybe", "env.retro.grayscale"),
    ("retro/Airstriker-Genesis-v0", "env.vizdoom.frame_skip=2", "env.vizdoom"),
])
def test_bad_frames_options_are_config_errors(env_id, override, key):
    """ViZDoom's and Retro's `env.vizdoom` / `env.retro` (one FramesConfig) and each other's section."""
    from rlfoundry.experiment.load import load_config

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(f"{env_id}:ppo", [override])
