"""Environment construction: one `make()` for every family, returning a Gymnasium `VectorEnv`.

All vector envs here use Gymnasium's NEXT_STEP autoreset: the step that ends an episode returns the
episode's true final observation, and the following step resets that sub-env (its action is ignored,
its reward is 0). Collection relies on that: the final observation sits in the next row of the
rollout, so bootstrapping on truncation needs no extra forward pass, and the reset row is dropped
from learning (see `rlfoundry.buffers.rollout`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.wrappers import vector as vw

from rlfoundry.config.errors import ConfigError

# `auto` uses worker processes when one vector step (single-env step time × num_envs) costs at least this.
ASYNC_STEP_SECONDS = 2e-3


@dataclass(frozen=True)
class EnvSpec:
    """What an agent needs to know about the envs to build its networks and buffers."""

    id: str
    num_envs: int
    observation_space: spaces.Box  # single env
    action_space: spaces.Space  # single env: Discrete or Box
    vectorization: str

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.observation_space.shape)

    @property
    def discrete(self) -> bool:
        return isinstance(self.action_space, spaces.Discrete)

    @property
    def obs_dtype(self) -> np.dtype:
        """How observations are stored and fed to the network: integer frames and grids keep their
        dtype (uint8 until the network); everything else becomes float32."""
        dtype = np.dtype(self.observation_space.dtype)
        return dtype if np.issubdtype(dtype, np.integer) else np.dtype(np.float32)


def register_optional_families() -> None:
    """Register ids of optional env packages (Atari, MiniGrid) when they are installed."""
    for module in ("ale_py", "minigrid"):
        try:
            __import__(module)
        except ImportError:
            pass


def check_spaces(env_id: str, observation_space: spaces.Space, action_space: spaces.Space) -> None:
    if not isinstance(observation_space, spaces.Box):
        raise ConfigError(
            f"env.id = '{env_id}': observation space {observation_space} is not supported; "
            "supported: Box (vectors)"
        )
    if not isinstance(action_space, (spaces.Discrete, spaces.Box)):
        raise ConfigError(
            f"env.id = '{env_id}': action space {action_space} is not supported; supported: Discrete, Box"
        )
    if isinstance(action_space, spaces.Box) and not np.all(np.isfinite(action_space.low) & np.isfinite(action_space.high)):
        raise ConfigError(f"env.id = '{env_id}': continuous actions need finite bounds, got {action_space}")


def probe_spaces(env_id: str, kwargs: dict | None = None) -> tuple[spaces.Space, spaces.Space]:
    """The single-env observation and action spaces of an id (builds and closes one env)."""
    try:
        env = gym.make(env_id, **(kwargs or {}))
    except Exception as exc:  # any failure to build is the user's id or kwargs
        shown = f" with env.kwargs {kwargs}" if kwargs else ""
        raise ConfigError(f"env.id = '{env_id}': cannot be created{shown}: {exc}") from None
    try:
        check_spaces(env_id, env.observation_space, env.action_space)
        return env.observation_space, env.action_space
    finally:
        env.close()


def _step_seconds(env_id: str, kwargs: dict) -> float:
    """Median seconds of one random step of a single env: the cost `auto` vectorization compares."""
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    env.action_space.seed(0)
    times = []
    for _ in range(32):
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        times.append(time.perf_counter() - start)
        if terminated or truncated:
            env.reset()
    env.close()
    return float(np.median(times))


def choose_vectorization(env_cfg, num_envs: int) -> str:
    if env_cfg.vectorization != "auto":
        return env_cfg.vectorization
    if gym.spec(env_cfg.id).vector_entry_point is not None and not env_cfg.kwargs:
        return "vector_entry_point"
    if num_envs >= 2 and (os.cpu_count() or 1) >= 2:
        if _step_seconds(env_cfg.id, make_kwargs(env_cfg)) * num_envs >= ASYNC_STEP_SECONDS:
            return "async"
    return "sync"


def make_kwargs(env_cfg) -> dict:
    kwargs = dict(env_cfg.kwargs)
    if env_cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = env_cfg.max_episode_steps
    return kwargs


def _base_vector_env(env_cfg, num_envs: int, mode: str, render_mode: str | None) -> VectorEnv:
    kwargs = make_kwargs(env_cfg)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if mode == "vector_entry_point":
        if gym.spec(env_cfg.id).vector_entry_point is None:
            raise ConfigError(
                f"env.vectorization = 'vector_entry_point': {env_cfg.id} has none; allowed: auto, sync, async"
            )
        return gym.make_vec(env_cfg.id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
    fns = [lambda: gym.make(env_cfg.id, **kwargs) for _ in range(num_envs)]
    if mode == "async":
        return AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)


def make(
    env_cfg,
    num_envs: int | None = None,
    *,
    gamma: float = 0.99,
    evaluation: bool = False,
    vectorization: str | None = None,
    render_mode: str | None = None,
) -> tuple[VectorEnv, EnvSpec]:
    """Build the vector env described by `env_cfg` (an `EnvConfig`) and its `EnvSpec`.

    Wrappers, inner to outer: episode statistics (true returns) → observation normalisation (+clip)
    → reward normalisation (+clip, training only). Evaluation envs never update the observation
    statistics; the trainer copies them from the training envs (`copy_obs_stats`).
    Seeding happens at `reset(seed=...)`: sub-env i gets seed + i.
    """
    num_envs = num_envs or env_cfg.num_envs
    mode = vectorization or choose_vectorization(env_cfg, num_envs)
    envs = _base_vector_env(env_cfg, num_envs, mode, render_mode)
    check_spaces(env_cfg.id, envs.single_observation_space, envs.single_action_space)
    envs = vw.RecordEpisodeStatistics(envs, buffer_length=1)
    if env_cfg.normalize_obs:
        envs = vw.NormalizeObservation(envs)
        if evaluation:
            envs.update_running_mean = False
        clip = env_cfg.clip_obs
        envs = vw.TransformObservation(envs, lambda obs: np.clip(obs, -clip, clip), envs.observation_space)
    if env_cfg.normalize_reward and not evaluation:
        envs = vw.NormalizeReward(envs, gamma=gamma)
        envs = vw.ClipReward(envs, -env_cfg.clip_reward, env_cfg.clip_reward)
    spec = EnvSpec(env_cfg.id, num_envs, envs.single_observation_space, envs.single_action_space, mode)
    return envs, spec


def find_wrapper(envs: VectorEnv, kind: type) -> VectorEnv | None:
    """The first wrapper of type `kind` in the chain, or None."""
    while True:
        if isinstance(envs, kind):
            return envs
        if not hasattr(envs, "env"):
            return None
        envs = envs.env


def copy_obs_stats(source: VectorEnv, target: VectorEnv) -> None:
    """Give evaluation envs the training envs' observation statistics (frozen)."""
    src, dst = find_wrapper(source, vw.NormalizeObservation), find_wrapper(target, vw.NormalizeObservation)
    if src is not None and dst is not None:
        dst.obs_rms.mean = src.obs_rms.mean.copy()
        dst.obs_rms.var = src.obs_rms.var.copy()
        dst.obs_rms.count = src.obs_rms.count
