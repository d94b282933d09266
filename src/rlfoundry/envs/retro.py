"""Retro: classic console games through stable-retro (1.0), as `retro/<Game>-v0` ids, pixels preprocessed by
`env.retro`.

Importing this module registers an id for every game stable-retro integrates (about 0.1 s; only done when a
`retro/` id is used). `make_env` builds stable-retro's `RetroEnv` with Discrete actions (every combination of the
game's button groups) inside `RetroGame`, then `StickyFrameSkip`, `ScreenFrames` and a time limit of 108,000 frames
(`StepLimit`, in agent steps, outside the frame skip). An id of no integrated game, and a game whose ROM is not
imported, are ConfigErrors that say so; the latter names the import command.

stable-retro allows one emulator per process and a run opens its evaluation envs beside its training envs, so these
ids run in worker processes (`VECTORIZATION`). `RetroGame` opens its emulator when it is built; where this process
has one open already, and an env of the same game was built before (so its spaces are known), it waits for its first
reset to open it. That lets `gym.make(env.spec)` build an env beside an open one (Gymnasium's `check_env` does, to
check `close`), and a notebook rebuild an env it still holds; stepping two at once stays a ConfigError.
docs/environments/retro.md has the details.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import gymnasium as gym
import numpy as np
import stable_retro
import stable_retro.data

from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.frames import ScreenFrames, StickyFrameSkip
from rlfoundry.envs.wrappers import StepLimit

PREFIX = "retro/"
VECTORIZATION = "async"  # what env.vectorization `auto` means for these ids (module docstring)
MAX_EPISODE_FRAMES = 108_000
IMPORT_HINT = "python -m stable_retro.import <directory with your ROM files>"
# the integration tiers, in the order their names take ids
INTEGRATIONS = {
    "stable": stable_retro.data.Integrations.STABLE,
    "contrib": stable_retro.data.Integrations.CONTRIB_ONLY,
    "experimental": stable_retro.data.Integrations.EXPERIMENTAL_ONLY,
}
# env.kwargs that would change what this family builds
FIXED = {"use_restricted_actions": "actions are Discrete (retro.Actions.DISCRETE)",
         "obs_type": "observations are the screen (retro.Observations.IMAGE)",
         "inttype": "each id has its integration already", "integration": "each id has its integration already"}


def register_games() -> int:
    """Register `retro/<Game>-v0` for every game of every integration tier (first name wins); the number registered."""
    count = 0
    for integration, inttype in INTEGRATIONS.items():
        for game in stable_retro.data.list_games(inttype):
            env_id = id_of(game)
            if env_id not in gym.registry:
                gym.register(env_id, entry_point="rlfoundry.envs.retro:RetroGame",
                             kwargs={"game": game, "integration": integration})
                count += 1
    return count


def id_of(game: str) -> str:
    return PREFIX + (game if re.search(r"-v\d+$", game) else f"{game}-v0")


def _name(env_id: str) -> str:
    """retro/Airstriker-Genesis-v0 -> Airstriker-Genesis: what a game's ids are compared by."""
    return re.sub(r"-v\d+$", "", env_id.removeprefix(PREFIX))


def check_id(env_id: str) -> None:
    """ConfigError for a `retro/` id of no game stable-retro integrates, naming the closest games' ids."""
    if env_id in gym.registry:
        return
    known = {_name(name): name for name in gym.registry if name.startswith(PREFIX)}
    near = [known[name] for name in difflib.get_close_matches(_name(env_id), list(known), n=3, cutoff=0.6)]
    hint = f"did you mean {', '.join(near)}?" if near else "ids look like retro/Airstriker-Genesis-v0"
    raise ConfigError(f"env.id = '{env_id}': stable-retro integrates no such game, and a ROM of a game it does not "
                      f"integrate cannot be imported; {hint}")


# the spaces of each game (and its arguments) built in this process: what `RetroGame` needs before its emulator opens
SPACES: dict[str, tuple[gym.spaces.Space, gym.spaces.Space]] = {}


class RetroGame(gym.Env):
    """The registered ids' entry point: stable-retro's `RetroEnv` with Discrete actions, single frames, no window
    unless `render_mode="human"`, whose emulator opens when this env is built or at its first reset (module
    docstring). `retro` is the RetroEnv while the emulator is open."""

    metadata = stable_retro.RetroEnv.metadata

    def __init__(self, game: str, integration: str = "stable", state=stable_retro.State.DEFAULT,
                 render_mode: str | None = None, **kwargs: Any):
        inttype = INTEGRATIONS[integration]
        check_rom(game, inttype)
        self.game, self.render_mode = game, render_mode
        self.arguments = dict(game=game, state=state, inttype=inttype, render_mode=render_mode,
                              use_restricted_actions=stable_retro.Actions.DISCRETE, **kwargs)
        self.retro: stable_retro.RetroEnv | None = None
        key = repr(sorted((name, repr(value)) for name, value in self.arguments.items()))
        try:
            self.retro = self._open()
            SPACES[key] = self.retro.observation_space, self.retro.action_space
        except ConfigError:  # another emulator is open: wait for it to close, if the spaces are known
            if key not in SPACES:
                raise
        self.observation_space, self.action_space = SPACES[key]

    def _open(self) -> stable_retro.RetroEnv:
        try:
            return stable_retro.RetroEnv(**self.arguments)
        except RuntimeError as exc:
            if "multiple emulator" not in str(exc):
                raise
            raise ConfigError(
                f"env.id = '{id_of(self.game)}': stable-retro runs one emulator per process and this process has one "
                "open already; run several envs in worker processes (env.vectorization: async), and close a retro "
                "env before using another in the same process") from None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self.retro is None:
            self.retro = self._open()
        return self.retro.reset(seed=seed, options=options)

    def step(self, action):
        if self.retro is None:
            raise RuntimeError("step() before reset(): reset the env first")
        return self.retro.step(action)

    def render(self) -> np.ndarray | None:
        return None if self.retro is None else self.retro.render()

    def close(self) -> None:
        if self.retro is not None:
            self.retro.close()
            self.retro = None


def check_rom(game: str, inttype) -> None:
    try:
        stable_retro.data.get_romfile_path(game, inttype)
    except FileNotFoundError:
        raise ConfigError(f"env.id = '{id_of(game)}': the game's ROM is not installed (stable-retro ships only "
                          f"Airstriker-Genesis's); import it with: {IMPORT_HINT}") from None


def make_env(env_id: str, kwargs: dict, env_cfg) -> gym.Env:
    """One Retro env, preprocessed as the module docstring says."""
    check_id(env_id)
    frames = env_cfg.retro
    kwargs = dict(kwargs)
    if env_cfg.vectorization == "sync":
        raise ConfigError("env.vectorization = sync: stable-retro runs one emulator per process, and a run opens its "
                          "evaluation envs beside its training envs; allowed: auto or async (worker processes)")
    for key, why in FIXED.items():
        if key in kwargs:
            raise ConfigError(f"env.kwargs.{key} = {kwargs[key]!r}: not an option for Retro ids: {why}")
    limit = kwargs.pop("max_episode_steps", None) or -(-MAX_EPISODE_FRAMES // frames.frame_skip)
    spec = gym.spec(env_id)
    game, inttype = spec.kwargs["game"], INTEGRATIONS[spec.kwargs["integration"]]
    check_rom(game, inttype)
    states = stable_retro.data.list_states(game, inttype)
    if isinstance(kwargs.get("state"), str) and kwargs["state"] not in states:
        raise ConfigError(f"env.kwargs.state = {kwargs['state']!r}: {game} has no such start state; "
                          f"allowed: {', '.join(states) or 'none (omit the key)'}")
    try:
        env = gym.make(env_id, **kwargs)
    except (ConfigError, RuntimeError):
        raise
    except Exception as exc:  # stable-retro's: a start state or scenario in env.kwargs that the game lacks, ...
        raise ConfigError(f"env.id = '{env_id}': stable-retro cannot create it with env.kwargs {kwargs}: "
                          f"{type(exc).__name__}: {exc}") from None
    fps = env.metadata.get("video.frames_per_second", 60.0)
    env = StickyFrameSkip(env, frames.frame_skip, frames.repeat_action_probability)
    env = ScreenFrames(env, frames.grayscale, frames.frame_size, frames.frame_stack)
    env = StepLimit(env, limit)
    env.metadata = {**env.metadata, "render_fps": fps / frames.frame_skip}  # real time
    return env


register_games()
