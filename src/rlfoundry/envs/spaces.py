"""Observation spaces other than a Box, as the networks read them: one float32 vector, the preprocessing
Stable-Baselines3 applies. Discrete is one-hot; MultiDiscrete a one-hot per entry, concatenated; MultiBinary its bits;
Tuple and Dict their entries, each so, concatenated (a Dict's in its keys' sorted order, Gymnasium's). That is
`gymnasium.spaces.flatten`, cast to float32: its one-hots are int64, which the networks would take for integer frames.

The wrapper is the last of a single env's own (after `env.wrappers`, which see the env's own observations: a
`FilterObservation` there picks a Dict's entries), so every algorithm, memory core, replay, export and
`load_policy` sees the vector. Entries that have no fixed-size vector form (Text, Graph, Sequence) are refused with
the entry named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.wrappers import is_image_space

FLATTENED = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Tuple, spaces.Dict)


def _entries(space: spaces.Space, name: str = "") -> Iterator[tuple[str, spaces.Space]]:
    """(path, space) of every leaf of a Tuple or Dict (`[0]`, `['goal']`), or the space itself."""
    if isinstance(space, spaces.Dict):
        for key, child in space.spaces.items():
            yield from _entries(child, f"{name}[{key!r}]")
    elif isinstance(space, spaces.Tuple):
        for index, child in enumerate(space.spaces):
            yield from _entries(child, f"{name}[{index}]")
    else:
        yield name, space


def needs_flattening(space: spaces.Space) -> bool:
    return isinstance(space, FLATTENED)


def check_flattenable(env_id: str, space: spaces.Space) -> None:
    """ConfigError naming the first entry of `space` with no fixed-size vector form."""
    for path, leaf in _entries(space):
        if path and is_image_space(leaf):
            raise ConfigError(f"env.id = '{env_id}': observation space {space}: its entry {path} is an image, and "
                              "images inside a Dict or Tuple have no encoder yet; keep it alone with env.wrappers "
                              "(FilterObservation, then a wrapper that takes the entry out)")
        if not isinstance(leaf, (spaces.Box, *FLATTENED)):
            where = f"its entry {path}" if path else "it"
            raise ConfigError(f"env.id = '{env_id}': observation space {space}: {where} is a {type(leaf).__name__}, "
                              "which has no fixed-size vector form; drop it with env.wrappers (FilterObservation "
                              "for a Dict) or encode it in a wrapper of your own")


class FlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """The env's observations as one float32 vector (module docstring)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        flat = spaces.flatten_space(env.observation_space)
        assert isinstance(flat, spaces.Box), "check_flattenable lets only Box-flattening spaces through"
        self.observation_space = spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32),
                                            dtype=np.float32)

    def observation(self, observation) -> np.ndarray:
        return np.asarray(spaces.flatten(self.env.observation_space, observation), dtype=np.float32)


def flattened(make_env: Callable[[], gym.Env], env_id: str) -> gym.Env:
    """`make_env()`, observing one vector where its space is not a Box: a module-level function, so a partial of it
    pickles for async envs."""
    env = make_env()
    if not needs_flattening(env.observation_space):
        return env
    try:
        check_flattenable(env_id, env.observation_space)
    except ConfigError:
        env.close()
        raise
    return FlatObservation(env)
