"""`env.wrappers`: Gymnasium wrappers named in the config around each sub-env, in order; bad entries are one
clear error (exit 2 from the CLI)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, choose_vectorization, probe_spaces

TIME = {"id": "TimeAwareObservation"}
RESCALE = {"id": "RescaleObservation", "kwargs": {"min_obs": -1.0, "max_obs": 1.0}}


def _last_obs(wrappers: list[dict], steps: int = 3, **env) -> np.ndarray:
    envs, spec = build(EnvConfig(id="Pendulum-v1", num_envs=2, wrappers=wrappers, **env))
    try:
        envs.reset(seed=0)
        for _ in range(steps):
            obs, *_ = envs.step(np.zeros((2, 1), dtype=np.float32))
        assert spec.observation_space.shape == obs.shape[1:]
        return obs
    finally:
        envs.close()


def test_wrappers_apply_innermost_first():
    # Pendulum's [cos, sin, velocity] in [-1, 1] x [-1, 1] x [-8, 8]; the time after 3 steps is 3 of 0..200
    time_then_rescale = _last_obs([TIME, RESCALE])
    rescale_then_time = _last_obs([RESCALE, TIME])
    assert time_then_rescale.shape == rescale_then_time.shape == (2, 4)
    assert np.allclose(time_then_rescale[:, -1], -1 + 2 * 3 / 200)  # the time rescaled with the rest
    assert np.allclose(rescale_then_time[:, -1], 3.0)  # the time added after
    assert np.allclose(time_then_rescale[:, 2] * 8, rescale_then_time[:, 2] * 8, atol=1e-5)


def test_module_paths_async_envs_and_the_probed_spaces():
    obs = _last_obs([{"id": "gymnasium.wrappers:TimeAwareObservation"}], vectorization="async")
    assert np.allclose(obs[:, -1], 3.0)  # the partial around the wrapper pickles into the worker processes
    cfg = EnvConfig(id="CartPole-v1", wrappers=[TIME])
    assert probe_spaces(cfg.id, {}, cfg)[0].shape == (5,)
    assert choose_vectorization(cfg, 1) == "sync"  # CartPole's own vector env has no sub-envs to wrap
    with pytest.raises(ConfigError, match="vector_entry_point"):
        build(EnvConfig(id="CartPole-v1", wrappers=[TIME], vectorization="vector_entry_point"))


@pytest.mark.parametrize("entry, message", [
    ({"id": "TimeAwareObsrvation"}, "did you mean TimeAwareObservation"),
    ({"id": "RescaleObservation", "kwargs": {"min_ob": -1.0}}, r"bad env.wrappers\[0\].kwargs"),
    ({"id": "no_such_module:Thing"}, "cannot import it"),
    ({"id": "os:path"}, "is not a gymnasium.Wrapper class"),
])
def test_bad_entries_are_config_errors(entry, message):
    cfg = EnvConfig(id="CartPole-v1", wrappers=[entry])
    with pytest.raises(ConfigError, match=message):
        probe_spaces(cfg.id, {}, cfg)
    with pytest.raises(ConfigError, match=message):
        build(cfg)


@pytest.mark.parametrize("env_id, wrappers, message", [
    ("CartPole-v1", [TIME, {"id": "ClipReward", "kwargs": {"min_reward": 1, "max_reward": 0}}],
     r"^env.wrappers\[1\] = ClipReward with kwargs \{'min_reward': 1, 'max_reward': 0\}: cannot wrap CartPole-v1: "
     r"InvalidBound: Min reward \(1\) must be smaller than max reward \(0\)$"),
    ("CarRacing-v3", [{"id": "ResizeObservation", "kwargs": {"shape": [3]}}],
     r"^env.wrappers\[0\] = ResizeObservation with kwargs \{'shape': \[3\]\}: cannot wrap CarRacing-v3: "
     r"ValueError: ResizeObservation requires shape tuple of length 2, got \(3,\)$"),
])
def test_a_wrapper_refusing_its_entry_is_a_config_error_naming_it(env_id, wrappers, message):
    """The wrapper's own constructor raises: the error names the entry and gives the wrapper's message, and the env
    it was to wrap is closed."""
    cfg = EnvConfig(id=env_id, wrappers=wrappers)
    with pytest.raises(ConfigError, match=message):
        probe_spaces(cfg.id, {}, cfg)
    with pytest.raises(ConfigError, match=message):
        build(cfg.model_copy(update={"num_envs": 1}))


def test_the_env_is_closed_when_a_wrapper_refuses_it(monkeypatch):
    import gymnasium as gym

    closed = []
    monkeypatch.setattr(gym.Wrapper, "close", lambda self: closed.append(type(self).__name__))
    clip = {"id": "ClipReward", "kwargs": {"min_reward": 1, "max_reward": 0}}
    cfg = EnvConfig(id="CartPole-v1", wrappers=[TIME, clip])
    with pytest.raises(ConfigError, match=r"env.wrappers\[1\]"):
        probe_spaces(cfg.id, {}, cfg)
    assert closed == ["TimeAwareObservation"]  # the chain built so far, from its outermost wrapper


def test_ale_ids_refuse_wrappers():
    pytest.importorskip("ale_py")
    with pytest.raises(ConfigError, match="not applied to ALE ids"):
        build(EnvConfig(id="ALE/Pong-v5", num_envs=1, wrappers=[TIME]))


def test_the_cli_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rlfoundry.cli", "train", "CartPole-v1:ppo", "env.wrappers=[{id: TimeAwareObsrvation}]",
         "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "did you mean TimeAwareObservation" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()
