"""Channel-last image envs (CarRacing, Crafter, Procgen: uint8 [H, W, C]) reach the networks channel-first: without
the transpose a CNN would read CarRacing's [96, 96, 3] as 96 channels of 96 × 3 images, and train on nonsense."""

from __future__ import annotations

import re

import cv2
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, probe_spaces
from rlfoundry.envs.wrappers import images_channel_first, is_channel_last
from rlfoundry.experiment.load import load_config

ID = "rlfoundry-test/CartPoleFrames-v0"


def cartpole_frames(**kwargs) -> gym.Env:
    """CartPole whose observation is its rendered frame, channel-last [400, 600, 3] as Gymnasium gives it."""
    return gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"), render_only=True)


@pytest.fixture(scope="module", autouse=True)
def registered():
    gym.register(ID, entry_point=cartpole_frames, max_episode_steps=20)
    yield
    gym.registry.pop(ID)


@pytest.mark.parametrize(("shape", "expected"), [
    ((96, 96, 3), True), ((64, 64, 1), True), ((84, 84, 4), True), ((7, 7, 3), True),
    ((3, 96, 96), False), ((4, 84, 84), False), ((3, 7, 7), False), ((12, 20, 16), False), ((2, 2, 3), False),
])
def test_channel_last_images_are_told_from_channel_first_ones(shape, expected):
    assert is_channel_last(spaces.Box(0, 255, shape, np.uint8)) is expected
    assert not is_channel_last(spaces.Box(0.0, 1.0, shape, np.float32))  # only uint8 images


def test_observations_are_transposed_views_of_the_env_frames():
    env = images_channel_first(cartpole_frames)
    assert env.observation_space.shape == (3, 400, 600)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 400, 600) and obs in env.observation_space
    np.testing.assert_array_equal(obs, env.unwrapped.render().transpose(2, 0, 1))
    unchanged = images_channel_first(lambda: gym.make("CartPole-v1"))
    assert unchanged.observation_space.shape == (4,)


def test_make_and_probe_give_the_agent_channel_first_images():
    cfg = EnvConfig(id=ID, num_envs=2, vectorization="sync", normalize_obs=False, normalize_reward=False)
    observation_space, _ = probe_spaces(ID, {}, cfg)
    envs, spec = build(cfg)
    try:
        obs, _ = envs.reset(seed=0)
        assert observation_space.shape == spec.obs_shape == (3, 400, 600)
        assert obs.shape == (2, 3, 400, 600) and obs.dtype == np.uint8
    finally:
        envs.close()


def test_config_wrappers_see_the_frames_as_the_env_gives_them():
    """Gymnasium's ResizeObservation takes channel-last frames and a tuple: `env.wrappers` from YAML gives a list."""
    cfg = EnvConfig(id=ID, num_envs=1, vectorization="sync", normalize_obs=False, normalize_reward=False,
                    wrappers=[{"id": "ResizeObservation", "kwargs": {"shape": [64, 48]}}])
    envs, spec = build(cfg)
    try:
        obs, _ = envs.reset(seed=0)
        assert spec.obs_shape == (3, 64, 48) and obs.shape == (1, 3, 64, 48)
    finally:
        envs.close()


def test_img_size_resizes_the_images_for_the_agent():
    cfg = EnvConfig(id=ID, num_envs=2, vectorization="sync", normalize_obs=False, normalize_reward=False,
                    img_size=[40, 60])
    envs, spec = build(cfg)
    try:
        obs, _ = envs.reset(seed=0)
        assert spec.obs_shape == (3, 40, 60) and obs.shape == (2, 3, 40, 60) and obs.dtype == np.uint8
        frame = gym.make("CartPole-v1", render_mode="rgb_array")
        frame.reset(seed=0)
        expected = cv2.resize(frame.render(), (60, 40), interpolation=cv2.INTER_AREA).transpose(2, 0, 1)
        np.testing.assert_array_equal(obs[0], expected)  # the same frame, resized once, channel-first
    finally:
        envs.close()


@pytest.mark.parametrize(("env_id", "message"), [
    ("CartPole-v1", "resizes image observations, and CartPole-v1 gives Box"),
    ("ALE/Pong-v5", "ALE/Pong-v5's frame size is env.atari.img_size; set it there"),
])
def test_img_size_is_refused_where_it_cannot_apply(env_id, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        probe_spaces(env_id, {}, EnvConfig(id=env_id, img_size=64))


def test_the_latent_models_resize_an_image_id_without_a_preset_to_64():
    for algo in ("dreamer", "planet"):
        cfg = load_config(f"{ID}:{algo}")
        assert cfg.env.img_size == 64, algo
        assert load_config(f"{ID}:{algo}", ["env.img_size=null"]).env.img_size is None  # the user's word wins
    assert load_config(f"{ID}:ppo").env.img_size is None  # other algorithms see the frames as they come
    assert load_config(f"{ID}:sac").algo.buffer_size == 100_000  # a replay of frames that fits a machine
    assert load_config("Acrobot-v1:dreamer").env.img_size is None  # vectors
    rendered = load_config("Acrobot-v1:dreamer", ["env.pixels.enabled=true", "env.pixels.img_size=96"])
    assert rendered.env.img_size is None and rendered.env.pixels.img_size == 96  # the size the user rendered at


def test_img_size_resizes_minigrid_views_which_have_no_size_option():
    cfg = EnvConfig(id="MiniGrid-Empty-5x5-v0", minigrid={"view": "rgb_partial"}, img_size=64)
    assert probe_spaces(cfg.id, {}, cfg)[0].shape == (3, 64, 64)  # from 7 tiles of 8 pixels: 56 x 56
