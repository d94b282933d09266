"""Retro ids (`rlfoundry.envs.retro`) on the ROM stable-retro ships (Airstriker-Genesis), and the frame wrappers
both pixel families share (`rlfoundry.envs.frames`) on a synthetic screen.

stable-retro allows one emulator per process: every test here closes its env before the next one builds another,
and several envs run in worker processes (async).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import cv2
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import build, env_fn, make_kwargs, register_optional_families
from rlfoundry.envs.frames import ScreenFrames, StickyFrameSkip

needs_retro = pytest.mark.skipif(importlib.util.find_spec("stable_retro") is None, reason="stable-retro not installed")

AIRSTRIKER = "retro/Airstriker-Genesis-v0"  # Discrete(126); action 0 presses nothing
MISSING = "retro/SonicTheHedgehog-Genesis-v0"  # integrated, ROM not shipped


# ---------------------------------------------------------------- the frame wrappers on a synthetic screen


class Screen(gym.Env):
    """A [H, W, 3] screen whose every pixel is the frame number (R) and fixed G, B; reward 1 a frame; terminates at
    frame `end`. Records the actions it ran."""

    def __init__(self, end: int = 100, height: int = 30, width: int = 40):
        self.observation_space = spaces.Box(0, 255, (height, width, 3), dtype=np.uint8)
        self.action_space = spaces.Discrete(3)
        self.end, self.frame, self.actions = end, 0, []

    def _screen(self) -> np.ndarray:
        screen = np.empty(self.observation_space.shape, dtype=np.uint8)
        screen[...] = (self.frame, 100, 200)
        return screen

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.frame, self.actions = 0, []
        return self._screen(), {}

    def step(self, action):
        self.frame += 1
        self.actions.append(int(action))
        return self._screen(), 1.0, self.frame >= self.end, False, {"frame": self.frame}


def grey(frame: int) -> int:
    return int(cv2.cvtColor(np.array([[[frame, 100, 200]]], dtype=np.uint8), cv2.COLOR_RGB2GRAY)[0, 0])


def test_frame_skip_sums_rewards_and_stops_at_the_end():
    env = StickyFrameSkip(Screen(end=6), frame_skip=4)
    env.reset(seed=0)
    screen, reward, terminated, _, info = env.step(2)
    assert (reward, terminated, info["frame"], screen[0, 0, 0]) == (4.0, False, 4, 4)
    _, reward, terminated, _, info = env.step(1)
    assert (reward, terminated, info["frame"]) == (2.0, True, 6)  # never past the episode's end
    assert env.unwrapped.actions == [2, 2, 2, 2, 1, 1]


def test_sticky_actions_keep_the_previous_frames_action_from_the_seed():
    always = StickyFrameSkip(Screen(), frame_skip=4, repeat_action_probability=1.0)
    always.reset(seed=0)
    always.step(2)
    assert always.unwrapped.actions == [0, 0, 0, 0]  # a game starts from the no-op, which then sticks

    def actions(seed: int) -> list[int]:
        env = StickyFrameSkip(Screen(), frame_skip=4, repeat_action_probability=0.5)
        env.reset(seed=seed)
        for action in [1, 2, 1, 2, 1, 2, 1, 2]:
            env.step(action)
        return env.unwrapped.actions

    assert actions(1) == actions(1) != actions(2)
    assert actions(1) != [a for a in [1, 2] * 4 for _ in range(4)]  # some frames kept the previous action


def test_screen_frames_stack_grey_frames_oldest_first_after_zeros():
    env = ScreenFrames(StickyFrameSkip(Screen(), frame_skip=2), grayscale=True, img_size=(15, 20), frame_stack=3)
    assert env.observation_space == spaces.Box(0, 255, (3, 15, 20), np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 15, 20) and obs.dtype == np.uint8

    def expected(step: int) -> list[int]:  # after `step` steps: the screens of steps step-2 .. step, zeros before 0
        return [grey(2 * k) if k >= 0 else 0 for k in (step - 2, step - 1, step)]  # 2 frames a step

    np.testing.assert_array_equal(obs[:, 0, 0], expected(0))
    for step in range(1, 5):
        obs, *_ = env.step(0)
        np.testing.assert_array_equal(obs[:, 3, 7], expected(step))
    assert (obs == obs[:, :1, :1]).all()  # a uniform screen stays uniform through INTER_AREA


def test_screen_frames_lay_rgb_out_frame_major_then_channels():
    env = ScreenFrames(Screen(), grayscale=False, img_size=(30, 40), frame_stack=2)  # no resize needed
    env.reset(seed=0)
    obs, *_ = env.step(0)
    assert obs.shape == (6, 30, 40)
    np.testing.assert_array_equal(obs[:, 0, 0], [0, 100, 200, 1, 100, 200])  # frame 0's R, G, B, then frame 1's


def test_screen_frames_hand_out_new_arrays():
    env = ScreenFrames(Screen(), img_size=(10, 10), frame_stack=2)
    first, _ = env.reset(seed=0)
    kept = first.copy()
    second, *_ = env.step(0)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, kept)


def test_the_frame_wrappers_pass_check_env():
    env = ScreenFrames(StickyFrameSkip(Screen(), 3, 0.25), grayscale=True, img_size=(12, 16), frame_stack=2)
    check_env(env, skip_render_check=True, skip_close_check=True)


def test_a_grey_screen_cannot_give_rgb_frames():
    class GreyScreen(Screen):
        def __init__(self):
            super().__init__()
            self.observation_space = spaces.Box(0, 255, (30, 40, 1), dtype=np.uint8)

    with pytest.raises(ValueError, match="grey"):
        ScreenFrames(GreyScreen(), grayscale=False)


# ---------------------------------------------------------------- Retro ids


def single(cfg: EnvConfig) -> gym.Env:
    """The single env our family builds, as `env_fn` hands it to a vector env."""
    return env_fn(cfg.id, make_kwargs(cfg), cfg)()


@pytest.fixture
def airstriker():
    """One single Airstriker env at a time (stable-retro's limit), closed after the test."""
    built = []

    def _build(**cfg_kwargs) -> gym.Env:
        env = single(EnvConfig(id=AIRSTRIKER, **cfg_kwargs))
        built.append(env)
        return env

    register_optional_families(AIRSTRIKER)
    yield _build
    for env in built:
        env.close()


@needs_retro
def test_every_integrated_game_has_an_id():
    register_optional_families(AIRSTRIKER)
    ids = [env_id for env_id in gym.registry if env_id.startswith("retro/")]
    assert len(ids) > 1000
    assert gym.spec(AIRSTRIKER).kwargs == {"game": "Airstriker-Genesis-v0", "integration": "stable"}
    assert gym.spec("retro/Contra-Nes-v0").kwargs["game"] == "Contra-Nes"  # an unversioned name gets -v0


@needs_retro
def test_spaces_frame_skip_and_time_limit(airstriker):
    env = airstriker(retro={"img_size": [42, 60], "frame_stack": 3}, max_episode_steps=5)
    assert env.observation_space == spaces.Box(0, 255, (3, 42, 60), np.uint8)
    assert env.action_space == spaces.Discrete(126)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, reward, terminated, truncated, _ = env.step(0)
    assert (terminated, truncated) == (False, True)  # 5 agent steps, not 5 frames
    assert obs[-1].std() > 0 and env.metadata["render_fps"] == 15.0


@needs_retro
def test_check_env_passes_on_the_single_env(airstriker):
    env = airstriker(retro={"frame_stack": 2, "repeat_action_probability": 0.25})
    # its close check builds a second env beside this one: the game's spaces known, that env opens no emulator
    check_env(env, skip_render_check=True)
    assert env.spec is not None and env.spec.id == AIRSTRIKER
    assert env.unwrapped.retro is not None  # this one's emulator stays open


@needs_retro
def test_render_rgb_array_is_the_console_screen(airstriker):
    env = airstriker(kwargs={"render_mode": "rgb_array"})
    env.reset(seed=0)
    env.step(0)
    frame = env.render()
    assert frame.shape == (224, 320, 3) and frame.dtype == np.uint8 and frame.std() > 0


def play(env: gym.Env, seed: int, steps: int = 60) -> np.ndarray:
    obs, _ = env.reset(seed=seed)
    frames = [obs]
    rng = np.random.default_rng(0)  # the same actions whatever the env's seed
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        frames.append(obs)
        if terminated or truncated:
            break
    return np.stack(frames)


@needs_retro
def test_seeds_with_sticky_actions(airstriker):
    env = airstriker(retro={"repeat_action_probability": 0.25, "img_size": 42})
    first = play(env, 5)
    np.testing.assert_array_equal(first, play(env, 5))
    assert not np.array_equal(first, play(env, 6))


@needs_retro
def test_without_sticky_actions_the_emulator_replays_the_same_episode(airstriker):
    env = airstriker(retro={"img_size": 42})
    np.testing.assert_array_equal(play(env, 5), play(env, 6))


@needs_retro
def test_two_envs_run_in_worker_processes_with_episode_statistics():
    envs, spec = build(EnvConfig(id=AIRSTRIKER, num_envs=2, vectorization="async", max_episode_steps=8))
    try:
        assert spec.obs_shape == (4, 84, 84) and spec.vectorization == "async"
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        returns = np.zeros(2)
        for _ in range(8):
            obs, rewards, terminated, truncated, info = envs.step(np.array([0, 5]))
            returns += rewards
        assert truncated.all() and info["_episode"].all()
        np.testing.assert_array_equal(info["episode"]["l"], [8, 8])
        np.testing.assert_allclose(info["episode"]["r"], returns)
    finally:
        envs.close()


@needs_retro
def test_auto_runs_even_one_env_in_a_worker_process_and_a_debugger_keeps_it_there(monkeypatch):
    from rlfoundry.envs import choose_vectorization
    from rlfoundry.experiment.load import load_config
    from rlfoundry.run import debug

    assert choose_vectorization(EnvConfig(id=AIRSTRIKER, num_envs=1), 1) == "async"
    monkeypatch.setattr(debug, "under_debugger", lambda: True)
    cfg, note = debug.in_process(load_config(f"{AIRSTRIKER}:ppo", ["env.num_envs=1"]))
    assert cfg.env.vectorization == "auto" and note is None


@needs_retro
def test_sync_vectorization_is_a_config_error():
    from rlfoundry.experiment.load import load_config

    with pytest.raises(ConfigError, match="env.vectorization = sync: stable-retro runs one emulator per process"):
        load_config(f"{AIRSTRIKER}:ppo", ["env.vectorization=sync", "env.num_envs=1"])


@needs_retro
def test_two_emulators_at_once_in_one_process_are_a_config_error(airstriker):
    first = airstriker()
    second = airstriker()  # built beside the first: the game's spaces are known, its emulator waits for its reset
    assert second.observation_space == first.observation_space and second.unwrapped.retro is None
    with pytest.raises(ConfigError, match="one emulator per process.*env.vectorization: async"):
        second.reset(seed=0)
    with pytest.raises(ConfigError, match="one emulator per process"):  # a start state not built before: no spaces
        airstriker(kwargs={"state": "Level1"})
    first.close()
    obs, _ = second.reset(seed=0)  # the first one closed: the second opens its own
    assert obs.shape == (4, 84, 84) and second.unwrapped.retro is not None


@needs_retro
def test_a_notebook_can_rebuild_the_env_it_holds():
    register_optional_families(AIRSTRIKER)
    env = single(EnvConfig(id=AIRSTRIKER))
    env = single(EnvConfig(id=AIRSTRIKER))  # the old env is held until this one is built, then it is garbage
    try:
        obs, _ = env.reset(seed=0)  # stable-retro collects the old emulator before opening this one
        assert obs.shape == (4, 84, 84)
    finally:
        env.close()

@needs_retro
@pytest.mark.parametrize(("env_id", "kwargs", "expected"), [
    (MISSING, {}, "ROM is not installed.*python -m stable_retro.import"),
    ("retro/SomeGameWithoutRom-v0", {}, "integrates no such game.*ids look like retro/Airstriker-Genesis-v0"),
    ("retro/Airstriker-Genesis-v1", {}, "integrates no such game.*did you mean retro/Airstriker-Genesis-v0"),
    (AIRSTRIKER, {"state": "Level9"}, "env.kwargs.state = 'Level9'.*allowed: Level1"),
    (AIRSTRIKER, {"use_restricted_actions": 0}, "env.kwargs.use_restricted_actions"),
    (AIRSTRIKER, {"obs_type": 1}, "env.kwargs.obs_type"),
])
def test_refused_ids_and_options_are_config_errors(env_id, kwargs, expected):
    register_optional_families(env_id)
    with pytest.raises(ConfigError, match=expected):
        single(EnvConfig(id=env_id, kwargs=kwargs))


@needs_retro
def test_a_missing_rom_is_exit_2_before_any_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rlfoundry.cli", "train", f"{MISSING}:ppo"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "python -m stable_retro.import" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # no run directory
