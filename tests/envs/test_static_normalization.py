"""`env.normalize_obs: static`: the observation space's finite bounds mapped to [-1, 1] (no statistics), beside
the running normalisation (`true`); spaces without finite bounds and images refuse it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlfoundry
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, obs_stats, probe_spaces


def test_static_maps_the_bounds_to_minus_one_one():
    envs, spec = build(EnvConfig(id="Pendulum-v1", num_envs=2, normalize_obs="static"))
    raw = gym.make_vec("Pendulum-v1", 2, vectorization_mode="sync")
    try:
        obs, _ = envs.reset(seed=3)
        expected, _ = raw.reset(seed=3)
        for _ in range(5):
            action = np.full((2, 1), 1.5, dtype=np.float32)
            obs, *_ = envs.step(action)
            expected, *_ = raw.step(action)
        high = raw.single_observation_space.high  # [1, 1, 8], symmetric bounds: x / high
        assert np.allclose(obs, expected / high, atol=1e-6)
        assert spec.observation_space.low.min() == -1.0 and spec.observation_space.high.max() == 1.0
        assert obs_stats(envs) is None  # nothing for the trainer to copy into evaluation envs or checkpoint
    finally:
        envs.close()
        raw.close()


def test_static_uses_the_masked_bounds():
    cfg = EnvConfig(id="Pendulum-v1", normalize_obs="static", mask_obs=[0, 1])  # only the velocity, in [-8, 8]
    envs, _ = build(cfg)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (cfg.num_envs, 1) and np.abs(obs).max() <= 1.0
    finally:
        envs.close()


@pytest.mark.parametrize("env_id, message", [("CartPole-v1", r"no finite bounds .*entries \[1, 3\]"),
                                             ("rlfoundry/Catch-v0", "uint8 images")])
def test_static_refuses_unbounded_spaces_and_images(env_id, message):
    cfg = EnvConfig(id=env_id, normalize_obs="static")
    with pytest.raises(ConfigError, match=message):
        probe_spaces(env_id, {}, cfg)


def test_a_run_with_static_normalisation(tmp_path, quiet):
    _, summary = rlfoundry.train("Pendulum-v1:ppo", [*quiet, "env.normalize_obs=static", "train.total_timesteps=1024",
                                                      "eval.episodes=1"], tmp_path / "run")
    assert summary["status"] == "finished"
