"""`rlfoundry.envs.make`: the vector env training builds, in one call, for a training loop of one's own; the block
of docs/environments/index.md runs here."""

from __future__ import annotations

import numpy as np
import pytest

import rlfoundry
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from tests.docpages import ROOT, page_blocks


def test_the_env_is_the_one_training_builds():
    cfg = rlfoundry.load_config("CartPole-v1:ppo-masked")
    ours, _ = rlfoundry.envs.build(cfg.env)
    theirs = rlfoundry.envs.make(cfg.env)
    try:
        assert theirs.num_envs == ours.num_envs == cfg.env.num_envs
        assert theirs.single_observation_space == ours.single_observation_space  # masked: 2 entries
        np.testing.assert_array_equal(theirs.reset(seed=4)[0], ours.reset(seed=4)[0])
        actions = np.ones(theirs.num_envs, dtype=np.int64)
        for _ in range(30):
            a, b = theirs.step(actions), ours.step(actions)
            for x, y in zip(a[:4], b[:4]):
                np.testing.assert_array_equal(x, y)
    finally:
        theirs.close()
        ours.close()


def test_options_as_keywords_and_the_spec():
    envs = rlfoundry.envs.make("Pendulum-v1", num_envs=3, normalize_obs=True, max_episode_steps=50)
    try:
        assert envs.num_envs == 3 and envs.spec.id == "Pendulum-v1"
        assert envs.spec.kwargs["num_envs"] == 3 and envs.spec.kwargs["max_episode_steps"] == 50
        assert EnvConfig.model_validate(envs.spec.kwargs["rlfoundry"]) == EnvConfig(
            id="Pendulum-v1", normalize_obs=True, max_episode_steps=50)
        envs.reset(seed=0)
        _, _, _, truncated, _ = [envs.step(envs.action_space.sample()) for _ in range(50)][-1]
        assert truncated.all()  # the time limit given
    finally:
        envs.close()


def test_an_env_whose_space_is_not_a_box_gives_vectors():
    envs = rlfoundry.envs.make("Taxi-v4", num_envs=2)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 500) and obs.dtype == np.float32 and (obs.sum(axis=1) == 1).all()
    finally:
        envs.close()


@pytest.mark.parametrize(("options", "message"), [
    ({"num_envz": 2}, "num_envz: Extra inputs are not permitted"),
    ({"atari": {"frame_stak": 2}}, "atari.frame_stak"),
    ({"normalize_obs": "sometimes"}, "normalize_obs"),
])
def test_bad_options_are_one_config_error(options, message):
    with pytest.raises(ConfigError, match=message):
        rlfoundry.envs.make("CartPole-v1", **options)


def test_the_documented_example_runs():
    (block,) = [block for block in page_blocks(ROOT / "docs" / "environments" / "index.md") if block.lang == "python"]
    exec(compile(block.text, "index.md", "exec"), {})  # noqa: S102 (the page's own example)
