"""ViZDoom: the `Vizdoom*` Gymnasium ids of the vizdoom package (1.3), pixels preprocessed by `env.vizdoom`.

Importing this module registers the package's ids. `make_env` hands `env.vizdoom.frame_skip` to the engine (which
runs the skipped tics without rendering them), keeps the `screen` of vizdoom's Dict observation (`VizdoomScreen`,
which also makes a scenario's timeout a truncation) and preprocesses it with `rlfoundry.envs.frames.ScreenFrames`.
Only Discrete actions are built: MultiBinary ids are refused, as are maps whose WAD vizdoom does not ship.
docs/environments/vizdoom.md has the details.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import vizdoom
import vizdoom.gymnasium_wrapper  # noqa: F401  (registers the Vizdoom* ids)

from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.frames import ScreenFrames

# scenario config → the IWAD it needs that vizdoom does not ship
COMMERCIAL_WADS = {"doom.cfg": "doom.wad", "doom2.cfg": "doom2.wad"}
# keyword arguments of vizdoom's Gymnasium env and of gymnasium.make; every other env.kwargs key is an engine option
ENV_ARGS = frozenset({"max_buttons_pressed", "render_mode", "treat_episode_timeout_as_truncation",
                      "use_multi_binary_action_space", "max_episode_steps", "disable_env_checker"})


def make_env(env_id: str, kwargs: dict, env_cfg) -> gym.Env:
    """One ViZDoom env: the id's env with the engine's frame skip, its screen → `ScreenFrames` (module docstring)."""
    frames = env_cfg.vizdoom
    kwargs = dict(kwargs)
    check_id(env_id, kwargs)
    if "frame_skip" in kwargs:
        raise ConfigError(f"env.kwargs.frame_skip = {kwargs['frame_skip']}: set env.vizdoom.frame_skip instead "
                          f"(now {frames.frame_skip}); it is passed to vizdoom")
    if frames.repeat_action_probability:
        raise ConfigError(f"env.vizdoom.repeat_action_probability = {frames.repeat_action_probability}: ViZDoom "
                          "skips frames inside its engine, which has no sticky actions, and seeds its own "
                          "randomness; allowed: 0")
    kwargs.setdefault("screen_format", "RGB24")
    options = {key: value for key, value in kwargs.items() if key not in ENV_ARGS}
    if not vizdoom.DoomGame().set_config(options):  # vizdoom itself only warns and goes on
        raise ConfigError(f"env.kwargs = {options}: an option or value vizdoom does not know (see its warning "
                          "above); allowed: the keys of a vizdoom .cfg file")
    try:
        env = gym.make(env_id, frame_skip=frames.frame_skip, **kwargs)
    except Exception as exc:  # vizdoom's own errors, e.g. a file named in env.kwargs that is not there
        raise ConfigError(f"env.id = '{env_id}': vizdoom cannot create it with env.kwargs {kwargs}: {exc}") from None
    try:
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ConfigError(f"env.id = '{env_id}': its action space {env.action_space} (buttons with continuous "
                              "deltas) is not supported; supported: Discrete")
        env = VizdoomScreen(env)
        shape = env.observation_space.shape
        assert shape is not None  # the screen's Box
        if frames.grayscale is False and shape[2] == 1:
            raise ConfigError(f"env.vizdoom.grayscale = false: env.kwargs.screen_format = "
                              f"{kwargs['screen_format']} renders grey screens; use RGB24 or grayscale: true")
    except Exception:
        env.close()
        raise
    env = ScreenFrames(env, frames.grayscale, frames.frame_size, frames.frame_stack)
    env.metadata = {**env.metadata, "render_fps": vizdoom.DEFAULT_TICRATE / frames.frame_skip}  # real time
    return env


def check_id(env_id: str, kwargs: dict) -> None:
    """ConfigError for the ids this family does not build: MultiBinary actions, WADs that are not there."""
    spec = gym.spec(env_id)
    config = spec.kwargs.get("scenario_config_file", "")
    wad = COMMERCIAL_WADS.get(config)
    package = os.path.dirname(vizdoom.__file__)
    if wad and not any(os.path.exists(os.path.join(folder, wad)) for folder in (vizdoom.scenarios_path, package)):
        raise ConfigError(
            f"env.id = '{env_id}': needs the commercial Doom WAD {wad}, which vizdoom does not ship; copy it into "
            f"{vizdoom.scenarios_path}, or use a bundled scenario (VizdoomBasic-v1, VizdoomDefendCenter-v1, ...) "
            "or a Freedoom map (VizdoomFreedoom1E1M1-S3-v0, VizdoomFreedoom2MAP01-S3-v0, ...)")
    if {**spec.kwargs, **kwargs}.get("max_buttons_pressed", 0) < 1:
        discrete = env_id.replace("-MultiBinary", "")
        if discrete != env_id and discrete in gym.registry:
            hint = f"use {discrete} (Discrete: one button or none a step)"
        else:
            hint = ("set env.kwargs.max_buttons_pressed: 1 (Discrete: one button or none a step; n: every "
                    "combination of up to n buttons)")
        raise ConfigError(f"env.id = '{env_id}': MultiBinary actions (any set of buttons at once) are not "
                          f"supported by rlfoundry's agents; {hint}")


class VizdoomScreen(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """vizdoom's Dict observation → its `screen` [H, W, C]; a scenario's timeout is a truncation, not a termination;
    the final observation repeats the last screen (the engine has none after the episode ended)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        observation_space = env.observation_space
        assert isinstance(observation_space, gym.spaces.Dict)  # vizdoom's: the screen and game variables
        screen = observation_space["screen"]
        assert screen.shape is not None  # a Box
        self.observation_space = screen
        self.screen = np.zeros(screen.shape, dtype=np.uint8)  # the last screen the engine rendered

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.screen = obs["screen"]
        return self.screen, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        base = self.env.unwrapped
        if base.state is not None:  # the episode goes on: a new screen (a new array each step)
            self.screen = obs["screen"]
        else:
            self.screen = self.screen.copy()  # Gymnasium: a new observation each step
        timeout = terminated and base.game.is_episode_timeout_reached()
        terminated = terminated and not timeout
        return self.screen, float(reward), terminated, (truncated or timeout) and not terminated, info
