"""Observation spaces other than a Box become one float32 vector (`rlfoundry.envs.spaces`), as Stable-Baselines3
preprocesses them: one-hot Discrete, a one-hot per MultiDiscrete entry, MultiBinary bits, Tuple and Dict entries
concatenated; entries with no vector form are refused, named."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, make_kwargs, make_single, probe_spaces
from rlfoundry.envs.spaces import FlatObservation, PackedBox, PackedObservation, flattened


class Fixed(gym.Env):
    """Observes a fixed sample of `space` (seeded), for any space."""

    action_space = spaces.Discrete(2)

    def __init__(self, space: spaces.Space):
        self.observation_space = space
        self.observation_space.seed(0)
        self.obs = self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action):
        return self.obs, 0.0, True, False, {}


@pytest.mark.parametrize(("space", "obs", "expected"), [
    (spaces.Discrete(4), 2, [0, 0, 1, 0]),
    (spaces.Discrete(3, start=5), 6, [0, 1, 0]),
    (spaces.MultiDiscrete([2, 3]), np.array([1, 2]), [0, 1, 0, 0, 1]),
    (spaces.MultiBinary(3), np.array([1, 0, 1], dtype=np.int8), [1, 0, 1]),
    (spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1, (2,)))), (1, np.array([0.5, -0.25], np.float32)),
     [0, 1, 0.5, -0.25]),
    # a Dict's entries in the order of its sorted keys: "a" (one-hot of 3), then "b"
    (spaces.Dict({"b": spaces.Box(0, 5, (1,)), "a": spaces.Discrete(3)}), {"b": np.array([4.0], np.float32), "a": 0},
     [1, 0, 0, 4.0]),
])
def test_each_space_becomes_a_float32_vector(space, obs, expected):
    env = FlatObservation(Fixed(space))
    assert env.observation_space.dtype == np.float32 and env.observation_space.shape == (len(expected),)
    flat = env.observation(obs)
    assert flat.dtype == np.float32
    np.testing.assert_array_equal(flat, np.asarray(expected, dtype=np.float32))
    assert env.observation_space.contains(flat)


@pytest.mark.parametrize(("space", "message"), [
    (spaces.Dict({"mission": spaces.Text(20), "x": spaces.Discrete(2)}), "its entry ['mission'] is a Text"),
    (spaces.Tuple((spaces.Discrete(2), spaces.Sequence(spaces.Discrete(3)))), "its entry [1] is a Sequence"),
])
def test_entries_without_a_vector_form_are_refused_by_name(space, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        flattened(lambda: Fixed(space), "my/Env-v0")


@pytest.mark.parametrize("env_id, size", [("FrozenLake-v1", 16), ("Taxi-v4", 500), ("CliffWalking-v1", 48),
                                          ("Blackjack-v1", 32 + 11 + 2)])
def test_toy_text_ids_observe_vectors_everywhere(env_id, size):
    cfg = EnvConfig(id=env_id)
    observation_space, _ = probe_spaces(env_id, make_kwargs(cfg), cfg)
    assert observation_space == spaces.Box(0.0, 1.0, (size,), np.float32)
    single = make_single(cfg)
    try:
        check_env(single, skip_render_check=True)
        obs, _ = single.reset(seed=3)
        assert obs.shape == (size,) and obs.sum() == (3 if env_id == "Blackjack-v1" else 1)  # one-hot per entry
        rebuilt = gym.make(single.spec)  # the wrapper records itself in the spec
        np.testing.assert_array_equal(rebuilt.reset(seed=3)[0], obs)
        rebuilt.close()
    finally:
        single.close()
    envs, info = build(cfg, 2, vectorization="async")  # pickled into worker processes
    try:
        assert info.obs_shape == (size,) and envs.reset(seed=0)[0].shape == (2, size)
    finally:
        envs.close()


def test_user_wrappers_see_the_envs_own_observations():
    """env.wrappers come before the flattening: TimeAwareObservation (unflattened) turns FrozenLake's Discrete into
    a Dict of its state and the time, which then becomes the one-hot state and the time step."""
    cfg = EnvConfig(id="FrozenLake-v1", wrappers=[{"id": "TimeAwareObservation", "kwargs": {"flatten": False}}])
    env = make_single(cfg)
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.shape == (17,)
        np.testing.assert_array_equal(obs, [1.0, *[0.0] * 15, 0.0])  # state 0, time 0
        obs, *_ = env.step(1)
        assert obs[-1] == 1.0 and obs[:16].sum() == 1.0
    finally:
        env.close()


# ---------------------------------------------------------------- images inside a Dict or Tuple: packed


def test_a_dict_with_an_image_is_packed_into_bytes_with_its_parts():
    space = spaces.Dict({"view": spaces.Box(0, 255, (8, 10, 3), np.uint8), "heading": spaces.Discrete(4)})
    env = flattened(lambda: Fixed(space), "my/Env-v0")
    assert isinstance(env, PackedObservation) and isinstance(env.observation_space, PackedBox)
    heading, view = env.observation_space.parts  # the Dict's key order: heading, view
    assert (heading.kind, heading.shape, heading.offset) == ("vector", (4,), 0)
    assert (view.kind, view.shape, view.offset) == ("image", (3, 8, 10), 4)  # channel-first
    obs = env.observation(env.unwrapped.obs)
    assert obs.dtype == np.uint8 and obs.shape == (4 + 240,)  # everything fits a byte: frames stay a byte each
    np.testing.assert_array_equal(obs[:4], np.eye(4, dtype=np.uint8)[env.unwrapped.obs["heading"]])
    np.testing.assert_array_equal(obs[4:].reshape(3, 8, 10), env.unwrapped.obs["view"].transpose(2, 0, 1))
    assert env.observation_space.contains(obs)


def test_a_float_entry_makes_the_packed_vector_float32():
    space = spaces.Tuple((spaces.Box(0, 255, (3, 6, 6), np.uint8), spaces.Box(-1, 1, (2,), np.float32)))
    env = flattened(lambda: Fixed(space), "my/Env-v0")
    image, joints = env.observation_space.parts
    assert env.observation_space.dtype == np.float32 and (image.kind, joints.kind) == ("image", "vector")
    obs = env.observation(env.unwrapped.obs)
    np.testing.assert_array_equal(obs[:108].reshape(3, 6, 6), env.unwrapped.obs[0])
    np.testing.assert_array_equal(obs[108:], env.unwrapped.obs[1])


def test_the_packed_encoder_reads_each_part():
    import torch

    from rlfoundry.config.sections import NetworkConfig
    from rlfoundry.nets.cnn import CNN_ENCODERS
    from rlfoundry.nets.encoders import PackedEncoder, encoder_for

    space = spaces.Dict({"a": spaces.Discrete(3), "grid": spaces.Box(0, 255, (3, 7, 7), np.uint8)})
    packed = flattened(lambda: Fixed(space), "my/Env-v0").observation_space
    net_cfg = NetworkConfig(encoder="impala_cnn", hidden_sizes=[16])
    torch.manual_seed(0)
    encoder = encoder_for(packed, net_cfg, groups=2)
    assert isinstance(encoder, PackedEncoder) and encoder.out_features == 16
    obs = torch.randint(0, 2, (5, packed.shape[0]), dtype=torch.uint8)
    out = encoder(obs)
    assert out.shape == (2, 5, 16)
    # by hand: the image through the same CNN, the one-hot as it is, then the mixing layer
    cnn = encoder.images[0]
    assert isinstance(cnn, CNN_ENCODERS["impala_cnn"])
    image = cnn(obs[:, 3:].reshape(5, 3, 7, 7))
    inputs = torch.cat([image, obs[:, :3].float().expand(2, 5, 3)], -1)
    torch.testing.assert_close(out, torch.relu(torch.baddbmm(encoder.bias, inputs, encoder.weight)))


@pytest.mark.parametrize(("option", "value"), [("normalize_obs", True), ("mask_obs", [0])])
def test_options_that_would_mix_the_parts_are_refused(option, value):
    cfg = EnvConfig(id="MiniGrid-Empty-5x5-v0", minigrid={"direction": True}, **{option: value})
    with pytest.raises(ConfigError, match=f"env.{option} = .*images inside a Dict or Tuple"):
        probe_spaces(cfg.id, make_kwargs(cfg), cfg)
