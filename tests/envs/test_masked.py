"""`env.mask_obs`: the hidden entries are removed, the others pass through unchanged; bad indices are config errors."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import vector as vw
from rollouts import rollout  # tests/envs/rollouts.py

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build as build_envs
from rlfoundry.envs import find_wrapper, probe_spaces
from rlfoundry.envs.wrappers import MaskObservation
from rlfoundry.experiment.load import load_config


@pytest.fixture
def build():
    built = []

    def _build(env_id: str = "CartPole-v1", num_envs: int = 3, **cfg_kwargs):
        envs, spec = build_envs(EnvConfig(id=env_id, num_envs=num_envs, **cfg_kwargs))
        built.append(envs)
        return envs, spec

    yield _build
    for envs in built:
        envs.close()


@pytest.mark.parametrize(
    ("env_id", "vectorization", "hidden", "kept"),
    [
        ("CartPole-v1", "vector_entry_point", [1, 3], [0, 2]),  # the POMDP benchmark: velocities hidden
        ("CartPole-v1", "sync", [3, 1], [0, 2]),
        ("Acrobot-v1", "sync", [0, 5], [1, 2, 3, 4]),  # contiguous: a view
        ("Pendulum-v1", "sync", [2], [0, 1]),
    ],
)
def test_hides_exactly_the_listed_indices(build, env_id, vectorization, hidden, kept):
    masked, spec = build(env_id, vectorization=vectorization, mask_obs=hidden)
    full, full_spec = build(env_id, vectorization=vectorization)
    assert spec.obs_shape == (len(kept),)
    assert masked.observation_space.shape == (3, len(kept))
    expected_space = spaces.Box(
        full_spec.observation_space.low[kept], full_spec.observation_space.high[kept], dtype=np.float32
    )
    assert spec.observation_space == expected_space
    seen, reference = rollout(masked), rollout(full)
    np.testing.assert_array_equal(seen, reference[..., kept])  # same seed, same actions: the kept entries unchanged
    assert seen.dtype == reference.dtype


def test_contiguous_kept_entries_are_a_view(build):
    envs, _ = build("Acrobot-v1", vectorization="sync", mask_obs=[0, 5])
    wrapper = find_wrapper(envs, MaskObservation)
    assert wrapper.index == slice(1, 5)
    raw = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = wrapper.observations(raw)
    assert np.shares_memory(out, raw)
    np.testing.assert_array_equal(out, raw[:, 1:5])
    envs, _ = build("CartPole-v1", mask_obs=[1, 3])
    np.testing.assert_array_equal(find_wrapper(envs, MaskObservation).index, [0, 2])


def test_mask_sits_under_statistics_and_normalisation(build):
    envs, spec = build("CartPole-v1", mask_obs=[1, 3], normalize_obs=True)
    assert find_wrapper(envs, vw.NormalizeObservation).obs_rms.mean.shape == (2,)
    assert spec.obs_shape == (2,)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(200):
        *_, info = envs.step(envs.action_space.sample())
        if "_episode" in info and info["_episode"].any():
            break
    assert info["_episode"].any()  # episode statistics still reported


def test_probe_reports_the_masked_space():
    cfg = EnvConfig(id="CartPole-v1", mask_obs=[1, 3])
    observation_space, action_space = probe_spaces("CartPole-v1", env_cfg=cfg)
    assert observation_space.shape == (2,) and action_space == spaces.Discrete(2)
    assert probe_spaces("CartPole-v1")[0].shape == (4,)


@pytest.mark.parametrize(
    ("hidden", "words"),
    [
        ([1, 4], ["env.mask_obs = [1, 4]", "index 4", "0 to 3"]),
        ([-1], ["env.mask_obs = [-1]", "index -1", "0 to 3"]),
        ([1, 1], ["env.mask_obs", "repeated"]),
        ([0, 1, 2, 3], ["env.mask_obs", "hides all 4"]),
    ],
)
def test_bad_indices_are_config_errors(build, hidden, words):
    cfg = EnvConfig(id="CartPole-v1", mask_obs=hidden)
    for check in (lambda: probe_spaces("CartPole-v1", env_cfg=cfg), lambda: build(mask_obs=hidden)):
        with pytest.raises(ConfigError) as info:
            check()
        for word in words:
            assert word in str(info.value)


def test_mask_on_an_image_is_a_config_error():
    cfg = EnvConfig(id="MiniGrid-Empty-5x5-v0", mask_obs=[0])
    with pytest.raises(ConfigError, match=r"env.mask_obs = \[0\]: needs a 1-D vector observation"):
        probe_spaces(cfg.id, env_cfg=cfg)


def test_cartpole_masked_preset():
    cfg = load_config("CartPole-v1:ppo-masked")
    assert cfg.env.mask_obs == [1, 3]
    assert cfg.threshold == 475.0
    assert load_config("CartPole-v1:ppo").env.mask_obs is None
