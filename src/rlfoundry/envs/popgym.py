"""POPGym (Morad et al., ICLR 2023): the `popgym-<Env><Difficulty>-v0` ids of the popgym package (1.0.7), partially
observable tasks that need memory: card games (RepeatPrevious, RepeatFirst, CountRecall, Autoencode, HigherLower,
Concentration), CartPole and Pendulum without velocities or with noise, bandits, Battleship, MineSweeper; and, with
mazelib installed, the Labyrinth mazes.

Importing this module makes popgym register its ids. `make_env` wraps the id's env in `PopgymObservation`:

- observations: one flat float32 vector, each Discrete part one-hot (a MultiDiscrete one one-hot per entry, a Tuple
  its parts in order), each Box part as it is; then, as the paper's benchmark observes them (popgym's
  baselines/ppo.py wraps every env in PreviousAction and Antialias), the previous action encoded the same way
  (zeros after a reset) and a flag that is 1 on the first observation of an episode only;
- actions: Discrete and Box as the env has them; a MultiDiscrete (Battleship, MineSweeper: a cell) becomes one
  Discrete over every combination, row-major;
- episodes: the card games end when the deck runs out, which is the task's end, a termination; the control tasks and
  the bandit end at their length, a truncation, so the learner bootstraps there; a step that is both is a
  termination only;
- seeds: `reset(seed=s)` seeds the env's `np_random`, which draws the decks, noise and boards.

An id popgym does not register (a Labyrinth without mazelib, a misspelled one) and observation or action spaces the
conversion has no rule for are refused as ConfigErrors. docs/environments/popgym.md has the details.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import popgym  # noqa: F401  (registers the popgym-* ids)
from gymnasium import spaces

from rlfoundry.config.errors import ConfigError, unknown_id

PREFIX = "popgym-"


def _check_space(env_id: str, space: spaces.Space, what: str) -> None:
    """ConfigError unless `space` is made of parts the conversion encodes."""
    if isinstance(space, spaces.Tuple):
        for part in space.spaces:
            _check_space(env_id, part, what)
    elif not isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)):
        raise ConfigError(f"env.id = '{env_id}': its {what} space {space} has a part rlfoundry cannot flatten; "
                          "supported parts: Discrete, MultiDiscrete, MultiBinary, Box and Tuples of them")


def _bounds(space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    """The low and high of the flat float32 encoding of `space` (one-hot parts lie in [0, 1])."""
    flat = spaces.flatten_space(space)
    assert isinstance(flat, spaces.Box)  # _check_space allows only parts that flatten to a Box
    return flat.low.astype(np.float32), flat.high.astype(np.float32)


def encode(space: spaces.Space, value) -> np.ndarray:
    """`value` of `space` as a flat float32 vector: Gymnasium's flattening (one-hot Discrete parts and MultiDiscrete
    entries, Boxes and MultiBinary as they are, Tuples in order)."""
    return np.asarray(spaces.flatten(space, value), dtype=np.float32)


class PopgymObservation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """A POPGym env as rlfoundry's agents take it (module docstring): [observation, previous action, first-step flag]
    as one float32 vector, a MultiDiscrete action as one Discrete, no step both terminated and truncated."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.inner_obs_space = env.observation_space
        self.inner_action_space = env.action_space
        obs_low, obs_high = _bounds(env.observation_space)
        act_low, act_high = _bounds(env.action_space)
        self.sizes = (obs_low.size, act_low.size)
        low = np.concatenate([obs_low, act_low, [0.0]]).astype(np.float32)
        high = np.concatenate([obs_high, act_high, [1.0]]).astype(np.float32)
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        if isinstance(env.action_space, spaces.MultiDiscrete):
            self.nvec: np.ndarray | None = env.action_space.nvec.ravel()
            self.action_space = spaces.Discrete(int(np.prod(self.nvec)))
        else:
            self.nvec = None
            self.action_space = env.action_space

    def _observe(self, obs, previous_action: np.ndarray | None) -> np.ndarray:
        encoded_obs = encode(self.inner_obs_space, obs)
        if previous_action is None:  # the first observation of an episode
            return np.concatenate([encoded_obs, np.zeros(self.sizes[1], np.float32), np.ones(1, np.float32)])
        return np.concatenate([encoded_obs, previous_action, np.zeros(1, np.float32)])

    def inner_action(self, action):
        """The action the POPGym env takes for ours: a flat index unravelled into its MultiDiscrete entries."""
        if self.nvec is None:
            return action
        start = np.asarray(self.inner_action_space.start).ravel()
        return np.array(np.unravel_index(int(action), tuple(self.nvec)), dtype=np.int64) + start

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(obs, None), _copied(info)

    def step(self, action):
        inner = self.inner_action(action)
        obs, reward, terminated, truncated, info = self.env.step(inner)
        terminated, truncated = bool(terminated), bool(truncated)
        observation = self._observe(obs, encode(self.inner_action_space, inner))
        return observation, float(reward), terminated, truncated and not terminated, _copied(info)


def _copied(info: dict) -> dict:
    """`info` with its arrays copied: CountRecall returns its live counts, which the next step changes in place."""
    return {key: value.copy() if isinstance(value, np.ndarray) else value for key, value in info.items()}


def check_id(env_id: str) -> None:
    """ConfigError for an id popgym does not register, naming the nearest ones (and mazelib for the Labyrinths)."""
    if env_id in gym.registry:
        return
    if env_id.startswith(f"{PREFIX}Labyrinth"):
        raise ConfigError(f"env.id = '{env_id}': popgym registers its Labyrinth ids only when mazelib is installed "
                          "(pip install mazelib; popgym's `navigation` extra)")
    raise unknown_id(env_id, sorted(name for name in gym.registry if name.startswith(PREFIX)), "a POPGym id")


def make_env(env_id: str, kwargs: dict, env_cfg) -> gym.Env:
    """One POPGym env: the id's env from popgym, converted by `PopgymObservation` (module docstring)."""
    check_id(env_id)
    env = gym.make(env_id, **kwargs)
    try:
        _check_space(env_id, env.observation_space, "observation")
        _check_space(env_id, env.action_space, "action")
        if isinstance(env.action_space, spaces.Box) and not np.all(
                np.isfinite(env.action_space.low) & np.isfinite(env.action_space.high)):
            raise ConfigError(f"env.id = '{env_id}': continuous actions need finite bounds, got {env.action_space}")
    except ConfigError:
        env.close()
        raise
    return PopgymObservation(env)
