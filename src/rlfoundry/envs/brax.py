"""Brax ids, `brax/<name>-v0`: Brax's JAX physics, every sub-env of a vector env stepped by one jitted call.

`BraxVectorEnv`, the ids' vector entry point, holds all sub-envs in one batched Brax state and steps them with a
`jax.vmap` of Brax's `step`, NEXT_STEP autoreset and the time limit inside the compiled function. `BraxEnv` is one
env for what needs single envs (`env.wrappers`, `env.action_repeat`, reading the spaces). Both capture and restore
their JAX state as named numpy arrays (`capture_state`, `restore_state`) for exact resume. docs/environments/brax.md
has the spaces, seeding, compilation costs and the speed against MuJoCo.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rlfoundry.config.errors import ConfigError

with contextlib.redirect_stdout(io.StringIO()):  # mujoco.mjx prints a line for each missing optional `warp` import
    import brax.envs
import jax
import jax.numpy as jnp

PREFIX = "brax/"
VERSION = "v0"
MAX_EPISODE_STEPS = 1000  # the episode_length of Brax's training wrappers (brax.envs.create)
BACKENDS = ("generalized", "positional", "spring", "mjx")
# What env.vectorization `auto` means for these ids (`rlfoundry.envs.family_vectorization`), whatever `env.kwargs`:
# they all reach `get_environment`. `env.wrappers` and `env.action_repeat` wrap single envs and need `sync` (a
# SyncVectorEnv of `BraxEnv`s, each with its own jitted step). Never `async`: each worker would compile its own
# step, and forking a process once JAX has started its threads can deadlock (JAX warns so).
VECTORIZATION = "vector_entry_point"


def env_id(name: str) -> str:
    return f"{PREFIX}{name}-{VERSION}"


def names() -> list[str]:
    """The env names Brax knows (its registry has no public listing; `get_environment` reads this dict)."""
    return sorted(brax.envs._envs)


Leaf = TypeVar("Leaf")


class Carry(NamedTuple, Generic[Leaf]):
    """What a vector env carries from one jitted step to the next. Its leaves are jax.Arrays in the jitted step, numpy
    arrays where one is built or restored outside it, jax.ShapeDtypeStructs in the template of `Physics.carry_shape`."""

    state: Any  # the batched brax.envs.State [B]
    keys: Leaf  # [B, 2] uint32: each sub-env's PRNG key, split at each of its resets
    steps: Leaf  # [B] int32: steps into the current episode
    needs_reset: Leaf  # [B] bool: the last step ended the episode, so the next one resets


def _split(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """[B, 2] keys -> (the keys to keep, the keys for this reset), as `jax.random.split` of each."""
    pairs = jax.vmap(jax.random.split)(keys)
    return pairs[:, 0], pairs[:, 1]


def _where_rows(mask: jax.Array, new: jax.Array, old: jax.Array) -> jax.Array:
    """`new` in the rows where `mask` [B] is set, else `old` (any trailing shape)."""
    return jnp.where(mask.reshape(mask.shape + (1,) * (old.ndim - 1)), new, old).astype(old.dtype)


def _step_many(env, carry: Carry[jax.Array], actions: jax.Array, max_steps: jax.Array):
    """One NEXT_STEP vector step: (carry, (obs, rewards, terminated, truncated)).

    A `lax.cond` computes resets only when some sub-env needs one, and `jnp.where` on the per-env mask picks the reset
    state over the stepped one; each reset draws fresh randomness (Brax's own `AutoResetWrapper` replays each env's
    first initial state instead). A reset is this step from a carry whose every sub-env needs a reset (`BraxVectorEnv.reset`; the rows it steps
    are thrown away): one function to compile instead of two."""
    stepped = jax.vmap(env.step)(carry.state, actions)
    restart = carry.needs_reset

    def with_resets(operand):
        state, keys = operand
        kept, reset_keys = _split(keys)
        fresh = jax.vmap(env.reset)(reset_keys)
        state = jax.tree.map(partial(_where_rows, restart), fresh, state)
        return state, _where_rows(restart, kept, keys)

    state, keys = jax.lax.cond(restart.any(), with_resets, lambda operand: operand, (stepped, carry.keys))
    # the carry keeps its input's dtypes (no weak types either): another type would compile another step
    state = jax.tree.map(lambda new, old: new.astype(old.dtype), state, carry.state)
    steps = jnp.where(restart, 0, carry.steps + 1)
    terminated = (stepped.done > 0) & ~restart
    truncated = (steps >= max_steps) & ~terminated & ~restart
    rewards = jnp.where(restart, 0.0, stepped.reward).astype(jnp.float32)
    carry = Carry(state, keys, steps, terminated | truncated)
    return carry, (state.obs.astype(jnp.float32), rewards, terminated, truncated)


def _reset_one(env, key: jax.Array):
    key, reset_key = jax.random.split(key)
    return key, env.reset(reset_key)


class Physics:
    """One Brax env and its jitted functions, shared by every env of the same name and kwargs (see `physics`)."""

    def __init__(self, name: str, kwargs: dict[str, Any]):
        shown = env_id(name)
        backend = kwargs.get("backend", "generalized")
        if backend not in BACKENDS:
            raise ConfigError(f"env.kwargs.backend = {backend!r}: not a Brax backend for {shown}; "
                              f"allowed: {', '.join(BACKENDS)}")
        try:
            with warnings.catch_warnings():  # Brax warns on every model load that it is no longer maintained
                warnings.filterwarnings("ignore", message="Brax System", category=UserWarning)
                self.env = brax.envs.get_environment(name, **kwargs)
            state = jax.eval_shape(self.env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))  # traced: nothing compiles
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"env.kwargs = {kwargs}: {shown} cannot be built with them ({exc})") from None
        if not isinstance(state.obs, jax.ShapeDtypeStruct) or len(state.obs.shape) != 1:
            raise ConfigError(f"env.kwargs = {kwargs}: {shown} then observes {state.obs}; rlfoundry needs one "
                              "vector observation (drop the kwargs that ask for dict or pixel observations)")
        self.name = name
        self.state_shape = state  # one env's brax.envs.State, as jax.ShapeDtypeStruct leaves
        self.observation_space = spaces.Box(-np.inf, np.inf, state.obs.shape, np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (self.env.action_size,), np.float32)
        self.step_many = jax.jit(partial(_step_many, self.env))
        self.reset_one = jax.jit(partial(_reset_one, self.env))
        self.step_one = jax.jit(self.env.step)

    def carry_shape(self, num_envs: int) -> Carry[jax.ShapeDtypeStruct]:
        """The `Carry` of `num_envs` sub-envs, as jax.ShapeDtypeStruct leaves."""
        batched = partial(jax.tree.map, lambda leaf: jax.ShapeDtypeStruct((num_envs, *leaf.shape), leaf.dtype))
        return Carry(batched(self.state_shape), jax.ShapeDtypeStruct((num_envs, 2), jnp.uint32),
                     jax.ShapeDtypeStruct((num_envs,), jnp.int32), jax.ShapeDtypeStruct((num_envs,), jnp.bool_))

    def restart_carry(self, keys: np.ndarray | jax.Array) -> Carry[np.ndarray | jax.Array]:
        """A carry whose every sub-env needs a reset (its state zeros, never used): the next step resets them all."""
        num_envs = keys.shape[0]
        state = jax.tree.map(lambda leaf: np.zeros((num_envs, *leaf.shape), leaf.dtype), self.state_shape)
        return Carry(state, keys, np.zeros(num_envs, np.int32), np.ones(num_envs, np.bool_))


PHYSICS: dict[tuple[str, str], Physics] = {}


def physics(name: str, kwargs: dict[str, Any]) -> Physics:
    """The shared `Physics` of a Brax env (built once per name and kwargs: JAX compiles each function once per input
    shape, so envs built later with the same number of sub-envs compile nothing)."""
    if name not in brax.envs._envs:
        raise ConfigError(f"env.id = '{env_id(name)}': Brax has no env {name!r}; allowed: "
                          f"{', '.join(env_id(n) for n in names())}")
    key = (name, repr(sorted(kwargs.items())))
    if key not in PHYSICS:
        PHYSICS[key] = Physics(name, kwargs)
    return PHYSICS[key]


def seed_keys(seed: int, num_envs: int) -> np.ndarray:
    """[num_envs, 2] uint32 PRNG keys: row i is `jax.random.PRNGKey(seed + i)`, seed + i taken mod 2**32.

    Built in numpy, as JAX's default threefry implementation builds a key from a 32-bit seed: [0, seed] (eager
    JAX calls would compile a small function per batch size)."""
    seeds = (np.uint64(seed) + np.arange(num_envs, dtype=np.uint64)) % np.uint64(2**32)
    return np.stack([np.zeros_like(seeds), seeds], axis=1).astype(np.uint32)


def _pytree_arrays(tree) -> dict[str, np.ndarray]:
    """Each leaf of a pytree as a numpy copy, named by its path (`state.pipeline_state.q`, `keys`, ...)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {_path_name(path): np.array(leaf) for path, leaf in leaves}


def _path_name(path) -> str:
    parts = []
    for entry in path:
        part = getattr(entry, "name", getattr(entry, "key", getattr(entry, "idx", None)))
        parts.append(str(part if part is not None else entry))
    return ".".join(parts)


def _pytree_from(template, arrays: dict[str, np.ndarray], what: str):
    """The pytree shaped as `template` (ShapeDtypeStruct leaves) with its leaves from `arrays` (`_pytree_arrays`)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    wanted = {_path_name(path): leaf for path, leaf in leaves}
    if set(wanted) != set(arrays):
        missing, extra = sorted(set(wanted) - set(arrays)), sorted(set(arrays) - set(wanted))
        raise ValueError(f"the saved state of {what} does not fit it (missing {missing}, unexpected {extra})")
    for name, leaf in wanted.items():
        if arrays[name].shape != leaf.shape or arrays[name].dtype != leaf.dtype:
            raise ValueError(f"the saved state of {what} does not fit it: {name} is {arrays[name].dtype}"
                             f"{list(arrays[name].shape)}, expected {leaf.dtype}{list(leaf.shape)}")
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(arrays[name]) for name in wanted])


class BraxVectorEnv(VectorEnv):
    """`num_envs` sub-envs of one Brax env, stepped together in one jitted call (module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, name: str, num_envs: int = 1, max_episode_steps: int | None = MAX_EPISODE_STEPS,
                 render_mode: str | None = None, **kwargs: Any):
        if render_mode is not None:
            raise ConfigError(f"render_mode = {render_mode!r}: {env_id(name)} cannot render; allowed: none")
        if num_envs < 1:
            raise ValueError(f"num_envs = {num_envs}: expected a positive int")
        self.physics = physics(name, kwargs)
        self.num_envs = num_envs
        self.max_episode_steps = MAX_EPISODE_STEPS if max_episode_steps is None else int(max_episode_steps)
        if self.max_episode_steps < 1:
            raise ConfigError(f"env.max_episode_steps = {max_episode_steps}: expected a positive int")
        self.single_observation_space = self.physics.observation_space
        self.single_action_space = self.physics.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._max_steps = np.int32(self.max_episode_steps)  # an argument, not a constant: no compile per limit
        self._carry: Carry[np.ndarray | jax.Array] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options:
            raise ValueError(f"options = {options}: {env_id(self.physics.name)} takes no reset options")
        keys: np.ndarray | jax.Array
        if seed is not None:
            keys = seed_keys(seed, self.num_envs)
        elif self._carry is not None:
            keys = self._carry.keys
        else:
            keys = seed_keys(int(self.np_random.integers(2**31)), self.num_envs)
        assert self.action_space.shape is not None  # a Box's
        no_actions = np.zeros(self.action_space.shape, np.float32)
        self._carry, (obs, *_) = self.physics.step_many(self.physics.restart_carry(keys), no_actions, self._max_steps)
        return np.asarray(obs), {}

    def step(self, actions):
        if self._carry is None:
            raise RuntimeError("step() before reset(): reset the env first")
        actions = np.asarray(actions, dtype=np.float32)  # another dtype or shape would compile another step
        if actions.shape != self.action_space.shape:
            raise ValueError(f"actions of shape {actions.shape}; expected {self.action_space.shape}")
        self._carry, outputs = self.physics.step_many(self._carry, actions, self._max_steps)
        obs, rewards, terminated, truncated = outputs
        return np.asarray(obs), np.asarray(rewards), np.asarray(terminated), np.asarray(truncated), {}

    def close_extras(self, **kwargs: Any) -> None:
        self._carry = None

    def capture_state(self) -> dict[str, np.ndarray]:
        """The whole state (Brax state, keys, step counters, pending resets) as named numpy arrays; {} before reset."""
        return {} if self._carry is None else _pytree_arrays(self._carry)

    def restore_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Continue exactly from what `capture_state` returned (also on a new env never reset)."""
        if not arrays:
            self._carry = None
            return
        what = f"{self.num_envs} {env_id(self.physics.name)} envs"
        self._carry = _pytree_from(self.physics.carry_shape(self.num_envs), arrays, what)


class BraxEnv(gym.Env):
    """One Brax env (no time limit of its own: `gym.make` adds the id's TimeLimit, `max_episode_steps` = 1000)."""

    metadata = {"render_modes": []}

    def __init__(self, name: str, render_mode: str | None = None, **kwargs: Any):
        if render_mode is not None:
            raise ConfigError(f"render_mode = {render_mode!r}: {env_id(name)} cannot render; allowed: none")
        self.physics = physics(name, kwargs)
        self.observation_space = self.physics.observation_space
        self.action_space = self.physics.action_space
        self._key: jax.Array | None = None
        self._state: brax.envs.State | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            key = seed_keys(seed, 1)[0]
        elif self._key is not None:
            key = self._key
        else:
            key = seed_keys(int(self.np_random.integers(2**31)), 1)[0]
        self._key, self._state = self.physics.reset_one(key)
        return np.asarray(self._state.obs, dtype=np.float32), {}

    def step(self, action):
        if self._state is None:
            raise RuntimeError("step() before reset(): reset the env first")
        action = np.asarray(action, dtype=np.float32)
        if action.shape != self.action_space.shape:
            raise ValueError(f"action of shape {action.shape}; expected {self.action_space.shape}")
        self._state = self.physics.step_one(self._state, action)
        obs = np.asarray(self._state.obs, dtype=np.float32)
        return obs, float(self._state.reward), bool(self._state.done > 0), False, {}

    def capture_state(self) -> dict[str, np.ndarray]:
        return {} if self._state is None else _pytree_arrays({"key": self._key, "state": self._state})

    def restore_state(self, arrays: dict[str, np.ndarray]) -> None:
        if not arrays:
            self._key = self._state = None
            return
        key, state = jax.eval_shape(self.physics.reset_one, jax.ShapeDtypeStruct((2,), jnp.uint32))
        restored = _pytree_from({"key": key, "state": state}, arrays, env_id(self.physics.name))
        self._key, self._state = restored["key"], restored["state"]


def register() -> None:
    """Register `brax/<name>-v0` for every env Brax knows (string entry points, so `check_renders` can read the
    classes' render modes)."""
    for name in names():
        if env_id(name) not in gym.registry:
            gym.register(env_id(name), entry_point=f"{__name__}:BraxEnv",
                         vector_entry_point=f"{__name__}:BraxVectorEnv",
                         max_episode_steps=MAX_EPISODE_STEPS, kwargs={"name": name})


register()
