"""Gymnasium's `check_env` on the single envs rlfoundry builds itself, each as `env_fn` hands it to the vector env:
our envs (bandits, Catch, Reach), our wrappers (MiniGrid's views, action repeat, rendered frames, config wrappers
around them).

Then every family's single env as `make_single` builds it (`load_policy(...).make_env()`, `play`), Atari, Retro
and Brax included, each family as far as its extra is installed: `check_env` passes, and the env rebuilt from
`env.spec` (and from the spec's JSON) has the same spaces and plays the same steps for the same seed and actions.
The family files test the rest of each family (test_atari.py, test_dm_control.py, ...). `MaskObservation` and
`FiniteCheck` wrap vector envs, which `check_env` does not take: test_masked.py and test_families.py hold them to
the vector contract.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env
from rollouts import play  # tests/envs/rollouts.py

from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import env_fn, make_kwargs, make_single, register_optional_families
from rlfoundry.envs.bandits import BANDITS
from rlfoundry.envs.wrappers import ActionRepeat

register_optional_families()


def built(env_cfg: EnvConfig) -> gym.Env:
    return env_fn(env_cfg.id, make_kwargs(env_cfg), env_cfg)()


CASES = {
    **{f"bandit {env_id}": EnvConfig(id=env_id) for env_id in BANDITS},
    "Catch grey": EnvConfig(id="rlfoundry/Catch-v0", kwargs={"grayscale": True, "frame_stack": 1}),
    "Reach": EnvConfig(id="rlfoundry/Reach-v0"),
    **{f"MiniGrid {view}": EnvConfig(id="MiniGrid-Empty-5x5-v0", minigrid={"view": view})
       for view in ("partial", "full", "rgb_partial", "rgb_full")},
    "action repeat": EnvConfig(id="Pendulum-v1", action_repeat=3),
    "action repeat + config wrappers": EnvConfig(
        id="Pendulum-v1", action_repeat=2,
        wrappers=[{"id": "TimeAwareObservation", "kwargs": {"flatten": False}}, {"id": "RecordEpisodeStatistics"}]),
    "Pendulum from pixels": EnvConfig(id="Pendulum-v1", pixels={"enabled": True, "img_size": [48, 64]}),
    "CartPole from pixels, action repeat": EnvConfig(id="CartPole-v1", action_repeat=2, pixels={"enabled": True}),
}


@pytest.mark.parametrize("name", CASES)
def test_check_env_passes(name):
    env = built(CASES[name])
    try:
        check_env(env, skip_render_check=True)
        assert env.spec is not None and env.spec.id == CASES[name].id
    finally:
        env.close()


class Counter(gym.Env):
    """Observes its step count; reward 1 a step; terminates at step `end`, truncates at step `limit`."""

    observation_space = gym.spaces.Box(0, 1_000, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, end: int = 1_000, limit: int = 1_000):
        self.end, self.limit, self.t = end, limit, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t == self.end, self.t == self.limit, {"t": self.t}


@pytest.mark.parametrize(("end", "limit", "steps", "flags"), [
    (1_000, 1_000, [3, 6, 9], (False, False)),
    (7, 1_000, [3, 6, 7], (True, False)),  # ends mid-repeat: the rest of the repeat is not played
    (1_000, 8, [3, 6, 8], (False, True)),
])
def test_action_repeat_sums_rewards_and_stops_at_the_episode_end(end, limit, steps, flags):
    env = ActionRepeat(Counter(end, limit), 3)
    env.reset(seed=0)
    for expected in steps:
        obs, reward, terminated, truncated, info = env.step(0)
        assert obs[0] == info["t"] == expected
    assert reward == steps[-1] - steps[-2] and (terminated, truncated) == flags


def test_a_family_whose_package_is_missing_names_its_extra(tmp_path, monkeypatch):
    """An optional family's module that cannot import its package: one ConfigError naming the pip extra."""
    from rlfoundry import envs
    from rlfoundry.config.errors import ConfigError
    from rlfoundry.envs import factory

    (tmp_path / "fake_family.py").write_text("import a_package_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = envs.Family("Fake", "fake/", "fake_family", "fake-extra")
    monkeypatch.setattr(factory, "FAMILIES", (*envs.FAMILIES, fake))
    with pytest.raises(ConfigError, match=r"fake/thing-v0.*a_package_that_is_not_installed.*rlfoundry\[fake-extra\]"):
        envs.build(EnvConfig(id="fake/thing-v0"))
    assert envs.load_family("CartPole-v1") is None


def test_rendered_frames_show_the_state_the_env_is_in():
    """`env.pixels`: uint8 [3, H, W] frames of the env's own rendering, one per step, differing as the state does;
    the vector env is built from single envs (CartPole's vector entry point renders nothing)."""
    from rlfoundry import envs

    cfg = EnvConfig(id="CartPole-v1", num_envs=2, vectorization="sync", pixels={"enabled": True, "img_size": 32})
    vector, spec = envs.build(cfg)
    try:
        assert spec.observation_space == gym.spaces.Box(0, 255, (3, 32, 32), np.uint8)
        obs, _ = vector.reset(seed=0)
        frames = [obs]
        for _ in range(5):
            frames.append(vector.step(np.ones(2, np.int64))[0])
        assert all(frame.shape == (2, 3, 32, 32) and frame.dtype == np.uint8 for frame in frames)
        assert not np.array_equal(frames[0], frames[-1])  # the cart moved
        assert frames[0].min() < 100 < 200 < frames[0].max()  # a drawn cart on a white background
    finally:
        vector.close()
    assert envs.choose_vectorization(EnvConfig(id="CartPole-v1", pixels={"enabled": True}), 1) == "sync"


@pytest.mark.parametrize("options, message", [
    ({"id": "ALE/Pong-v5"}, r"frame options of its own \(env.atari\)"),
    ({"id": "MiniGrid-Empty-5x5-v0"}, r"env.minigrid.view"),
    ({"id": "Pendulum-v1", "mask_obs": [0]}, r"env.mask_obs = \[0\].*use one of them"),
    ({"id": "CartPole-v1", "vectorization": "vector_entry_point"}, r"env.pixels: it wraps"),
])
def test_pixels_are_refused_where_they_cannot_apply(options, message):
    from rlfoundry import envs
    from rlfoundry.config.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        envs.build(EnvConfig(**options, num_envs=1, pixels={"enabled": True}))


# ---------------------------------------------------------------- every family's single env, and its spec


# name: (the package the family's extra installs, or None for the core families; the config)
SINGLE_ENVS = {
    "Gymnasium, masked": (None, EnvConfig(id="Pendulum-v1", mask_obs=[1])),
    "Gymnasium, frames resized": (None, EnvConfig(id="Pendulum-v1", img_size=24, pixels={"enabled": True})),
    "Gymnasium, channel-last frames": (None, EnvConfig(id="CarRacing-v3")),
    "bandit": (None, EnvConfig(id="Bandit-Gaussian10-v0")),
    "toy": (None, EnvConfig(id="rlfoundry/Catch-v0")),
    "MiniGrid": (None, EnvConfig(id="MiniGrid-Empty-5x5-v0", minigrid={"view": "rgb_partial"})),
    "Atari": (None, EnvConfig(id="ALE/Breakout-v5")),
    "Atari, colour": (None, EnvConfig(id="ALE/Breakout-v5", atari={"grayscale": False, "img_size": 42})),
    "Atari, RAM": (None, EnvConfig(id="ALE/Breakout-v5", atari={"obs_type": "ram", "episodic_life": False})),
    "OCAtari": ("ocatari", EnvConfig(id="ALE/Pong-v5", atari={"obs_type": "objects"})),
    "DeepMind Control": ("dm_control", EnvConfig(id="dm_control/cartpole-balance-v0", action_repeat=2)),
    "ViZDoom": ("vizdoom", EnvConfig(id="VizdoomBasic-v1", vizdoom={"img_size": 42})),
    "Brax": ("brax", EnvConfig(id="brax/fast-v0")),
    "POPGym": ("popgym", EnvConfig(id="popgym-BattleshipEasy-v0")),
    "Gymnasium-Robotics": ("gymnasium_robotics", EnvConfig(id="PointMaze_UMaze-v3")),  # a Dict, flattened
}


def assert_alike(env: gym.Env, rebuilt: gym.Env) -> None:
    """The same spaces, and the same observations, rewards and episode ends for the same seed and actions."""
    assert rebuilt.observation_space == env.observation_space and rebuilt.action_space == env.action_space
    for ours, theirs in zip(play(env, seed=7), play(rebuilt, seed=7), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def rebuilds(env: gym.Env, from_spec) -> None:
    """`from_spec(spec)` builds an env alike to `env` (and closes it)."""
    rebuilt = from_spec(env.spec)
    try:
        assert [w.name for w in rebuilt.spec.additional_wrappers] == [w.name for w in env.spec.additional_wrappers]
        assert_alike(env, rebuilt)
    finally:
        rebuilt.close()


def json_round_trip(spec: EnvSpec) -> EnvSpec:
    """The spec written to JSON and read back; it must be plain data (no functions, classes or objects)."""
    text = spec.to_json()
    assert json.loads(text)["id"] == spec.id
    return EnvSpec.from_json(text)


@pytest.mark.parametrize("name", SINGLE_ENVS)
def test_every_familys_single_env_passes_check_env_and_rebuilds_from_its_spec(name):
    package, cfg = SINGLE_ENVS[name]
    if package is not None:
        pytest.importorskip(package)
    env = make_single(cfg)
    try:
        assert env.spec is not None and env.spec.id == cfg.id
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checker's advice (wrapped env, unbounded or asymmetric spaces)
            check_env(env, skip_render_check=True)  # its close check builds a second env from env.spec
        rebuilds(env, gym.make)
        rebuilds(env, lambda spec: gym.make(json_round_trip(spec)))
    finally:
        env.close()


def test_make_single_rebuilds_the_wrappers_in_their_order():
    """The spec lists our wrappers innermost first, each with its arguments, as `make_single` put them."""
    cfg = EnvConfig(id="Pendulum-v1", action_repeat=2, img_size=[24, 32], pixels={"enabled": True, "img_size": 48})
    env = make_single(cfg)
    try:
        wrappers = {w.name: w for w in env.spec.additional_wrappers}
        assert list(wrappers) == ["ActionRepeat", "RenderedFrames", "ResizeImages"]
        assert wrappers["ActionRepeat"].kwargs == {"repeat": 2}
        assert wrappers["ResizeImages"].kwargs == {"height": 24, "width": 32}
        assert env.observation_space.shape == (3, 24, 32)
    finally:
        env.close()


RETRO_CHECK = """
import gymnasium as gym, numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env
from rollouts import play
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import make_single

env = make_single(EnvConfig(id="retro/Airstriker-Genesis-v0", max_episode_steps=6, retro={"frame_stack": 2}))
check_env(env, skip_render_check=True)  # its close check builds a second env beside this one
assert [w.name for w in env.spec.additional_wrappers] == ["StickyFrameSkip", "ScreenFrames", "StepLimit"]
assert env.spec.max_episode_steps is None  # the limit counts agent steps, outside the frame skip
expected = play(env, seed=7)
assert expected[2][5].tolist() == [False, True]  # truncated at agent step 6
env.close()
for spec in (env.spec, EnvSpec.from_json(env.spec.to_json())):
    rebuilt = gym.make(spec)  # one emulator at a time: built after the first is closed
    assert rebuilt.observation_space == env.observation_space and rebuilt.action_space == env.action_space
    for ours, theirs in zip(expected, play(rebuilt, seed=7), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    rebuilt.close()
print("retro ok")
"""


def test_retros_single_env_passes_check_env_and_rebuilds_from_its_spec():
    """In a process of its own: stable-retro runs one emulator per process, and this one must be the only one."""
    pytest.importorskip("stable_retro")
    here = Path(__file__).parent
    proc = subprocess.run([sys.executable, "-c", RETRO_CHECK], capture_output=True, text=True, timeout=120, cwd=here,
                          env={**os.environ, "PYTHONPATH": str(here)})
    assert proc.returncode == 0 and "retro ok" in proc.stdout, proc.stdout + proc.stderr
