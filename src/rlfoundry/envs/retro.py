"""Retro: classic console games through stable-retro (1.0), as `retro/<Game>-v0` ids, pixels preprocessed by
`env.retro`.

Ids. Importing this module registers one id for every game stable-retro has an integration for (about a thousand:
its stable integrations, then the contrib and experimental ones whose names are still free), `retro/` + the game's
name (`retro/Airstriker-Genesis-v0`; names without a version get `-v0`). It costs about 0.1 s, on top of importing
stable-retro, and only runs when a `retro/` id is used (`rlfoundry.envs.load_family`). stable-retro ships one ROM,
Airstriker-Genesis's; the others must be imported first (`python -m stable_retro.import <dir with ROM files>`, which
finds them by checksum). An id whose ROM is missing is a ConfigError that says so.

Each env (`make_env`) is stable-retro's `RetroEnv` with:
- Discrete actions: `use_restricted_actions=Actions.DISCRETE`, every combination of the game's valid button groups
  (Airstriker: 126); action 0 presses nothing. MultiBinary, the package's default, is not supported by our agents.
- the game's default start state (`env.kwargs.state` picks another), its scenario's reward and done condition.
- `rlfoundry.envs.frames.StickyFrameSkip`: `env.retro.frame_skip` frames per agent step, rewards summed, with sticky
  actions at `env.retro.repeat_action_probability` (0 by default; 0.25 in Nichol et al. 2018, arXiv:1804.03720).
  The emulator is deterministic: sticky actions, drawn from the env's seed, are the only randomness in an episode,
  so with 0 a seed changes nothing and a fixed policy replays the same episode.
- `ScreenFrames`: grey (or RGB), resized, stacked, channel-first uint8.
- a time limit in agent steps: `env.max_episode_steps`, by default 108 000 frames (30 minutes at 60 fps, the Atari
  path's limit) / frame_skip. Episodes otherwise end at the scenario's done condition (game over).

Not done, unlike the Atari path: no max-pool of the last two frames (see `rlfoundry.envs.frames`), no reward clipping
(the episode statistics report the score; `env.normalize_reward` scales what the learner sees), no episodic life
(retro integrations have no common life counter), no no-op starts (sticky actions give the randomness).

One emulator per process: stable-retro 1.0 refuses a second emulator while one is open ("Cannot create multiple
emulator instances per process"). A training run opens its evaluation envs beside its training envs, so both run in
worker processes: `env.vectorization` must be `async` (what `auto` picks for these ids: `VECTORIZATION`); `sync` is
refused. No other retro env may be open in the process that builds them (AsyncVectorEnv builds one there to read the
spaces, then closes it); a video's one env is built in the trainer's process, which holds none. Building a second
emulator in a process is a ConfigError that says so.
"""

from __future__ import annotations

import re

import gymnasium as gym
import stable_retro
import stable_retro.data
from gymnasium.wrappers import TimeLimit

from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.frames import ScreenFrames, StickyFrameSkip

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
                gym.register(env_id, entry_point="rlfoundry.envs.retro:retro_game",
                             kwargs={"game": game, "integration": integration})
                count += 1
    return count


def id_of(game: str) -> str:
    return PREFIX + (game if re.search(r"-v\d+$", game) else f"{game}-v0")


def retro_game(game: str, integration: str = "stable", state=stable_retro.State.DEFAULT, render_mode=None,
               **kwargs) -> gym.Env:
    """The registered ids' entry point: stable-retro's RetroEnv with Discrete actions, single frames, no window
    unless `render_mode="human"`."""
    inttype = INTEGRATIONS[integration]
    check_rom(game, inttype)
    try:
        return stable_retro.RetroEnv(game, state, inttype=inttype, use_restricted_actions=stable_retro.Actions.DISCRETE,
                                     render_mode=render_mode, **kwargs)
    except RuntimeError as exc:
        if "multiple emulator" not in str(exc):
            raise
        raise ConfigError(
            f"env.id = '{id_of(game)}': stable-retro runs one emulator per process and this process has one open "
            "already; run several envs in worker processes (env.vectorization: async), and close a retro env before "
            "building another in the same process") from None


def check_rom(game: str, inttype) -> None:
    try:
        stable_retro.data.get_romfile_path(game, inttype)
    except FileNotFoundError:
        raise ConfigError(f"env.id = '{id_of(game)}': the game's ROM is not installed (stable-retro ships only "
                          f"Airstriker-Genesis's); import it with: {IMPORT_HINT}") from None


def make_env(env_id: str, kwargs: dict, env_cfg) -> gym.Env:
    """One Retro env, preprocessed as the module docstring says."""
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
    env = TimeLimit(env, limit)
    env.metadata = {**env.metadata, "render_fps": fps / frames.frame_skip}  # real time
    return env


register_games()
