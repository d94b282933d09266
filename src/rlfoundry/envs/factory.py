"""Building envs: `build()` for every family (a Gymnasium `VectorEnv` with NEXT_STEP autoreset, and the `EnvInfo` an
agent is built for), `make()` (the same vector env in one call, for a training loop of one's own), `make_single()`,
the optional families' dispatch, env seeds, the vectorization `auto` chooses, and the checks an id and its options
get before anything is built. `rlfoundry.envs` re-exports what others use."""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.wrappers import vector as vw

from rlfoundry.config.cores import cores_of_run
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import atari
from rlfoundry.envs.bandits import register_bandits
from rlfoundry.envs.config_wrappers import wrapped
from rlfoundry.envs.spaces import flattened, packed_parts
from rlfoundry.envs.toys import register_toys
from rlfoundry.envs.wrappers import (
    ActionRepeat,
    FiniteCheck,
    MaskEntries,
    MaskObservation,
    RenderedFrames,
    images_channel_first,
    is_image_space,
    mask_obs_space,
    offscreen_mujoco,
    resized_images,
)

# `auto` uses worker processes when one vector step (single-env step time × num_envs) costs at least this.
ASYNC_STEP_SECONDS = 2e-3
EVAL_TIME_LIMIT = 10_000  # steps of an evaluation episode of an id without a time limit (`unlimited`)


@dataclass(frozen=True)
class EnvInfo:
    """What an agent needs to know about the vector env it is built for: its id, its size, its spaces and how it is
    vectorized (Gymnasium's own `EnvSpec` is a registered id's entry, a different thing)."""

    id: str
    num_envs: int
    observation_space: spaces.Box  # single env
    action_space: spaces.Space  # single env: Discrete or Box
    vectorization: str
    first_env: int = 0  # of a run across processes: this process's first env among the run's (its seeds follow)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.observation_space.shape)

    @property
    def obs_dtype(self) -> np.dtype:
        """How observations are stored and fed to the network: integer frames and grids keep their
        dtype (uint8 until the network); everything else becomes float32."""
        dtype = np.dtype(self.observation_space.dtype)
        return dtype if np.issubdtype(dtype, np.integer) else np.dtype(np.float32)

    @property
    def discrete(self) -> bool:
        return isinstance(self.action_space, spaces.Discrete)

    @property
    def choices(self) -> bool:
        """The actions are choices (Discrete, MultiDiscrete, MultiBinary), not a Box of numbers."""
        return not isinstance(self.action_space, spaces.Box)


@dataclass(frozen=True)
class Family:
    """An env family from an optional package, known by its ids' prefix.

    `module` is ours: importing it registers the family's Gymnasium ids (raising ImportError when the package is
    missing) and, for families built one sub-env at a time, defines `make_env(env_id, kwargs, env_cfg) -> gym.Env`:
    one env with the family's own preprocessing (from its `env_cfg` section).
    """

    name: str
    prefix: str
    module: str
    extra: str  # pip install 'rlfoundry[<extra>]'
    renders: bool = False  # its envs render rgb_array frames that env.pixels can observe


FAMILIES = (
    Family("DeepMind Control", "dm_control/", "rlfoundry.envs.dm_control", "dm-control"),
    Family("ViZDoom", "Vizdoom", "rlfoundry.envs.vizdoom", "vizdoom"),
    Family("Retro", "retro/", "rlfoundry.envs.retro", "retro"),
    Family("Brax", "brax/", "rlfoundry.envs.brax", "brax"),
    Family("POPGym", "popgym-", "rlfoundry.envs.popgym", "popgym"),
    Family("Gymnasium-Robotics", "PointMaze_", "rlfoundry.envs.robotics", "robotics", renders=True),
    Family("Gymnasium-Robotics", "AntMaze_", "rlfoundry.envs.robotics", "robotics", renders=True),
)


def family_of(env_id: str) -> Family | None:
    return next((family for family in FAMILIES if env_id.startswith(family.prefix)), None)


def load_family(env_id: str):
    """The module of `env_id`'s optional family (its ids now registered), or None for ids of no such family.
    A missing package is a ConfigError that names the extra to install."""
    family = family_of(env_id)
    if family is None:
        return None
    try:
        return importlib.import_module(family.module)
    except ImportError as exc:
        if (exc.name or "").startswith("rlfoundry"):
            raise
        raise ConfigError(
            f"env.id = '{env_id}': {family.name} ids need packages that are not installed ({exc}); "
            f"install them with: pip install 'rlfoundry[{family.extra}]'") from None


def register_optional_families(env_id: str | None = None) -> None:
    """Register our `Bandit-*` and `rlfoundry/*` ids, Atari's and MiniGrid's, and the ids of `env_id`'s optional
    family (`FAMILIES`: imported only when an id asks for it, some are slow to import)."""
    register_bandits()
    register_toys()
    for module in ("ale_py", "minigrid"):
        try:
            __import__(module)
        except ImportError:
            pass
    if env_id is not None:
        load_family(env_id)


def env_seed(seed: int) -> int:
    """The seed a vector env is reset with; sub-env i then gets env_seed + i (Gymnasium's convention,
    also ale_py's). Hashing the run seed first keeps runs apart: with the run seed used directly, seeds
    1 and 2 of an 8-env run would share 7 of their 8 env streams."""
    return int(np.random.SeedSequence(seed).generate_state(1)[0] >> 1)  # < 2**31: every env family takes it


def declared_render_modes(env_id: str) -> list[str] | None:
    """The render modes an id's env class declares (its metadata), or None where it declares none; no env is built."""
    register_optional_families(env_id)
    entry_point = gym.spec(env_id).entry_point
    creator: object = (gym.envs.registration.load_env_creator(entry_point) if isinstance(entry_point, str)
                       else entry_point)
    modes = getattr(creator, "metadata", {}).get("render_modes")
    return None if modes is None else list(modes)


def check_renders(env_id: str, purpose: str = "cannot record a video") -> None:
    """Raise ConfigError unless `env_id` can render rgb_array frames (checked before any env is built)."""
    modes = declared_render_modes(env_id)
    if modes is not None and "rgb_array" not in modes:
        raise ConfigError(f"env.id = '{env_id}': {purpose}: the env renders {list(modes) or 'nothing'}, "
                          "not 'rgb_array'")


def frame_family(env_id: str) -> str | None:
    """The config section of an id's family with frame options of its own (atari, minigrid, dm_control, vizdoom,
    retro), or None."""
    if atari.is_atari(env_id):
        return "atari"
    if is_minigrid(env_id):
        return "minigrid"
    family = family_of(env_id)
    return None if family is None else {"dm_control/": "dm_control", "Vizdoom": "vizdoom", "retro/": "retro"}.get(
        family.prefix)


def size_option(env_id: str) -> str | None:
    """The option that sets an id's frame size where its family has one (all but MiniGrid, whose views have none),
    or None: `env.img_size` resizes the images of every other id."""
    section = frame_family(env_id)
    return None if section in (None, "minigrid") else f"env.{section}.img_size"


def check_pixels(env_cfg) -> None:
    """`env.pixels` is for ids that render rgb_array outside the families with frames of their own."""
    if not env_cfg.pixels.enabled:
        return
    section, family = frame_family(env_cfg.id), family_of(env_cfg.id)
    if section is not None:
        own = {"minigrid": "minigrid.view", "dm_control": "dm_control.pixels"}.get(section, section)
        raise ConfigError(f"env.pixels.enabled = true: {env_cfg.id} has frame options of its own (env.{own})")
    if family is not None and not family.renders:
        raise ConfigError(f"env.pixels.enabled = true: {env_cfg.id} is a {family.name} id, whose envs give no "
                          "frames to observe")
    if env_cfg.mask_obs:
        raise ConfigError(f"env.mask_obs = {env_cfg.mask_obs}: hides entries of vector observations, and "
                          "env.pixels.enabled = true observes frames; use one of them")
    check_renders(env_cfg.id, "env.pixels.enabled = true")


def is_minigrid(env_id: str) -> bool:
    """MiniGrid and BabyAI ids (registered by the minigrid package)."""
    spec = gym.registry.get(env_id)
    return spec is not None and isinstance(spec.entry_point, str) and spec.entry_point.startswith("minigrid.")


def frame_stack(env_cfg) -> int:
    """Frames the env itself stacks into one observation (Atari, ViZDoom, Retro), which replay stores once each;
    else 1."""
    if atari.is_atari(env_cfg.id):
        return env_cfg.atari.frame_stack if env_cfg.atari.obs_type == "pixels" else 1
    family = family_of(env_cfg.id)
    if family is not None and family.prefix in ("Vizdoom", "retro/"):
        return getattr(env_cfg, "vizdoom" if family.prefix == "Vizdoom" else "retro").frame_stack
    return 1


def check_spaces(env_id: str, observation_space: spaces.Space, action_space: spaces.Space) -> None:
    if not isinstance(observation_space, spaces.Box):  # a single env's other spaces are flattened (env_fn)
        raise ConfigError(
            f"env.id = '{env_id}': observation space {observation_space} is not supported from a batched entry "
            "point; supported: Box (vectors, uint8 images), and Discrete, MultiDiscrete, MultiBinary, Tuple and "
            "Dict of single envs (env.vectorization: sync or async)"
        )
    if not isinstance(action_space, (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
        raise ConfigError(f"env.id = '{env_id}': action space {action_space} is not supported; supported: Discrete, "
                          "Box, MultiDiscrete, MultiBinary")
    if isinstance(action_space, (spaces.MultiDiscrete, spaces.MultiBinary)) and (
            len(action_space.shape) != 1 or np.any(getattr(action_space, "start", 0) != 0)):
        raise ConfigError(f"env.id = '{env_id}': action space {action_space}: MultiDiscrete and MultiBinary actions "
                          "are taken one-dimensional, each entry counting from 0")
    if isinstance(action_space, spaces.Box) and not np.all(np.isfinite(action_space.low) & np.isfinite(action_space.high)):
        raise ConfigError(f"env.id = '{env_id}': continuous actions need finite bounds, got {action_space}")


def check_obs_options(env_cfg, observation_space: spaces.Space) -> None:
    """Config options that depend on the env's observation space (checked by the probe and by `make`)."""
    if packed_parts(observation_space) and (env_cfg.normalize_obs or env_cfg.mask_obs):
        option = "normalize_obs" if env_cfg.normalize_obs else "mask_obs"
        raise ConfigError(f"env.{option} = {getattr(env_cfg, option)}: {env_cfg.id} observes images inside a Dict or "
                          "Tuple, packed into one vector whose parts the network reads apart; allowed: false (drop "
                          "entries with env.wrappers instead)")
    if env_cfg.normalize_obs and is_image_space(observation_space):
        raise ConfigError(
            f"env.normalize_obs = {str(env_cfg.normalize_obs).lower()}: {env_cfg.id} observes uint8 images "
            f"{observation_space.shape}, which stay uint8 until the network's encoder scales them; allowed: false"
        )
    if env_cfg.mask_obs:
        observation_space, _ = mask_obs_space(env_cfg.id, observation_space, env_cfg.mask_obs)
    if env_cfg.normalize_obs == "static":
        unbounded = (np.flatnonzero(~(np.isfinite(observation_space.low) & np.isfinite(observation_space.high)))
                     .tolist() if isinstance(observation_space, spaces.Box) else "all")
        if unbounded:
            raise ConfigError(
                f"env.normalize_obs = static: {env_cfg.id}'s observation space {observation_space} has no finite "
                f"bounds to rescale from (entries {unbounded}); allowed: true (running statistics) or false")
    check_pixels(env_cfg)
    if env_cfg.img_size is not None:
        own = size_option(env_cfg.id)
        if own is not None:
            raise ConfigError(f"env.img_size = {env_cfg.img_size}: {env_cfg.id}'s frame size is {own}; set it there")
        if not is_image_space(observation_space):
            raise ConfigError(f"env.img_size = {env_cfg.img_size}: resizes image observations, and {env_cfg.id} "
                              f"gives {observation_space}; remove it")
    if env_cfg.minigrid != type(env_cfg.minigrid)() and not is_minigrid(env_cfg.id):
        shown = env_cfg.minigrid.model_dump()
        raise ConfigError(f"env.minigrid = {shown}: {env_cfg.id} is not a MiniGrid id; remove the section")
    if env_cfg.atari != type(env_cfg.atari)() and not atari.is_atari(env_cfg.id):
        shown = env_cfg.atari.model_dump(exclude_defaults=True)
        raise ConfigError(f"env.atari = {shown}: {env_cfg.id} is not an ALE id; remove the section")
    family = family_of(env_cfg.id)
    for section, prefix in (("dm_control", "dm_control/"), ("vizdoom", "Vizdoom"), ("retro", "retro/")):
        options = getattr(env_cfg, section)
        if options != type(options)() and (family is None or family.prefix != prefix):
            shown = options.model_dump(exclude_defaults=True)
            raise ConfigError(f"env.{section} = {shown}: {env_cfg.id} is not a {section} id ({prefix}...); "
                              "remove the section")


def env_fn(env_id: str, kwargs: dict, env_cfg=None) -> Callable[[], gym.Env]:
    """The factory of one single env with its family's single-env wrappers (one per sub-env of a vector env).

    MiniGrid ids get their image view (from `env_cfg.minigrid`, else the default partial view), the optional
    families (`FAMILIES`) their own preprocessing; then `env_cfg.action_repeat`, the rendered frames of
    `env_cfg.pixels`, `env_cfg.wrappers` (`rlfoundry.envs.config_wrappers`), observations that are not a Box as one
    vector (`rlfoundry.envs.spaces`), channel-last images transposed to channel-first (`images_channel_first`) and,
    outermost, images resized to `env_cfg.img_size`.
    """
    family = load_family(env_id)
    pixels = env_cfg is not None and env_cfg.pixels.enabled
    if pixels:
        check_pixels(env_cfg)
        kwargs = {**kwargs, "render_mode": "rgb_array"}
    if kwargs.get("render_mode") == "rgb_array":
        offscreen_mujoco()
    make_env: Callable[[], gym.Env]
    if is_minigrid(env_id):
        from rlfoundry.envs import minigrid

        options = {} if env_cfg is None else env_cfg.minigrid.model_dump()
        make_env = partial(minigrid.make_env, env_id, kwargs, **options)
    elif hasattr(family, "make_env"):
        make_env = partial(family.make_env, env_id, kwargs, env_cfg or EnvConfig(id=env_id))
    else:
        make_env = partial(gym.make, env_id, **kwargs)
    if env_cfg is not None and env_cfg.action_repeat > 1:
        make_env = partial(ActionRepeat.around, make_env, env_cfg.action_repeat)
    if pixels:  # outside the repeat: one frame per agent step
        make_env = partial(RenderedFrames.around, make_env, *env_cfg.pixels.frame_size)
    if env_cfg is not None and env_cfg.wrappers:  # as the env gives its observations (Gymnasium's image wrappers
        make_env = partial(wrapped, make_env, env_cfg.wrappers)  # take channel-last ones)
    make_env = partial(flattened, make_env, env_id)  # Discrete, Tuple, Dict, ...: one vector (envs/spaces.py)
    make_env = partial(images_channel_first, make_env)
    if env_cfg is not None and env_cfg.img_size is not None:
        make_env = partial(resized_images, make_env, *env_cfg.frame_size)
    return make_env


def probe_spaces(env_id: str, kwargs: dict | None = None, env_cfg=None) -> tuple[spaces.Space, spaces.Space]:
    """The single-env observation and action spaces an agent sees for an id (builds and closes one env).

    With `env_cfg` (an `EnvConfig`) its observation options are applied and checked as `make` would: the
    MiniGrid view, `mask_obs` (the space returned is the masked one), no `normalize_obs` on images.
    """
    register_optional_families(env_id)
    if atari.is_atari(env_id):  # only the vector env exists for Atari (rlfoundry.envs.atari)
        observation_space, action_space = atari.probe_spaces(env_id, kwargs, None if env_cfg is None else env_cfg.atari)
        if env_cfg is not None:
            atari.check_options(env_cfg)
            check_obs_options(env_cfg, observation_space)
        return observation_space, action_space
    try:
        env = env_fn(env_id, kwargs or {}, env_cfg)()
    except ConfigError:
        raise
    except Exception as exc:  # any failure to build is the user's id or kwargs
        shown = f" with env.kwargs {kwargs}" if kwargs else ""
        raise ConfigError(f"env.id = '{env_id}': cannot be created{shown}: {exc}") from None
    try:
        check_spaces(env_id, env.observation_space, env.action_space)
        observation_space = env.observation_space
        if env_cfg is not None:
            check_obs_options(env_cfg, observation_space)
            if env_cfg.mask_obs:
                observation_space, _ = mask_obs_space(env_id, observation_space, env_cfg.mask_obs)
        return observation_space, env.action_space
    finally:
        env.close()


def _step_seconds(make_env: Callable[[], gym.Env]) -> float:
    """Median seconds of one random step of a single env: the cost `auto` vectorization compares."""
    env = make_env()
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


def family_vectorization(env_id: str) -> str | None:
    """The vectorization a family needs whatever the env count (Retro: one emulator per process, so `async`), or None."""
    return getattr(load_family(env_id), "VECTORIZATION", None)


def single_env_option(env_cfg) -> str | None:
    """The first option that wraps each sub-env, as an error names it (then no batched vector env can serve), or
    None."""
    if env_cfg.wrappers:
        return "env.wrappers: they wrap"
    if env_cfg.action_repeat > 1:
        return "env.action_repeat: it wraps"
    if env_cfg.pixels.enabled:
        return "env.pixels: it wraps"
    return None


def choose_vectorization(env_cfg, num_envs: int) -> str:
    if atari.is_atari(env_cfg.id):
        return "atari"
    family_mode = family_vectorization(env_cfg.id)
    if family_mode == "vector_entry_point" and env_cfg.vectorization == "async":  # Brax: one batched env
        raise ConfigError(f"env.vectorization = 'async': {env_cfg.id} steps all its envs in one batched call, and "
                          "worker processes would each compile it; allowed: auto, vector_entry_point, sync")
    if env_cfg.vectorization != "auto":
        return env_cfg.vectorization
    single = single_env_option(env_cfg) is not None
    if family_mode == "vector_entry_point" and single:
        return "sync"
    if family_mode:
        return family_mode
    if gym.spec(env_cfg.id).vector_entry_point is not None and not env_cfg.kwargs and not single:
        return "vector_entry_point"
    # Worker processes pay off only with cores of this run's own to put them on: under `trials` on 2 cores each run
    # has one, where 32 BipedalWalker envs step 2.7x slower in processes than in a loop (300 vs 112 µs a step).
    if num_envs >= 2 and cores_of_run() >= 2:
        if _step_seconds(env_fn(env_cfg.id, make_kwargs(env_cfg), env_cfg)) * num_envs >= ASYNC_STEP_SECONDS:
            return "async"
    return "sync"


def make_kwargs(env_cfg) -> dict:
    kwargs = dict(env_cfg.kwargs)
    if env_cfg.max_episode_steps is not None:
        # MiniGrid's time limit is its own `max_steps` (see rlfoundry.envs.minigrid)
        kwargs["max_steps" if is_minigrid(env_cfg.id) else "max_episode_steps"] = env_cfg.max_episode_steps
    return kwargs


def time_limited(make_env: Callable[[], gym.Env], steps: int) -> gym.Env:
    """`make_env()` with a time limit: a module-level function, so a partial of it pickles for async envs."""
    return gym.wrappers.TimeLimit(make_env(), steps)


def unlimited(env_cfg) -> bool:
    """An id registered without a time limit (CliffWalking, a user's env) and none set in env.max_episode_steps:
    a deterministic policy that never reaches the end would evaluate forever."""
    spec = gym.registry.get(env_cfg.id)
    return env_cfg.max_episode_steps is None and spec is not None and spec.max_episode_steps is None \
        and not is_minigrid(env_cfg.id)


def _base_vector_env(env_cfg, num_envs: int, mode: str, render_mode: str | None,
                     evaluation: bool = False) -> VectorEnv:
    if atari.is_atari(env_cfg.id):
        atari.check_options(env_cfg, mode, render_mode)
        return atari.make_vector_env(env_cfg.id, env_cfg.atari, num_envs, render_mode)
    kwargs = make_kwargs(env_cfg)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if mode == "vector_entry_point":
        if gym.spec(env_cfg.id).vector_entry_point is None:
            raise ConfigError(
                f"env.vectorization = 'vector_entry_point': {env_cfg.id} has none; allowed: auto, sync, async"
            )
        shown = single_env_option(env_cfg)
        if shown is not None:
            raise ConfigError(f"{shown} each sub-env, and env.vectorization = 'vector_entry_point' "
                              "builds none; use auto, sync or async")
        return gym.make_vec(env_cfg.id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
    fns = [env_fn(env_cfg.id, kwargs, env_cfg)] * num_envs
    if evaluation and unlimited(env_cfg):
        fns = [partial(time_limited, fns[0], EVAL_TIME_LIMIT)] * num_envs
    if mode == "async":  # a family may need fresh worker processes (DeepMind Control's renderer hangs when forked)
        context = getattr(load_family(env_cfg.id), "async_context", lambda env_cfg: None)(env_cfg)
        return AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP, context=context)
    return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)


def build(
    env_cfg,
    num_envs: int | None = None,
    *,
    gamma: float = 0.99,
    evaluation: bool = False,
    vectorization: str | None = None,
    render_mode: str | None = None,
    first_env: int = 0,
    check_finite: bool = False,
) -> tuple[VectorEnv, EnvInfo]:
    """Build the vector env described by `env_cfg` (an `EnvConfig`) and its `EnvInfo`.

    Wrappers, inner to outer: masked observations (`mask_obs`) → episode statistics (true returns)
    → observation normalisation (running, +clip; or static from the bounds) → reward normalisation (+clip,
    training only). Evaluation envs
    never update the observation statistics; the trainer copies them from the training envs (`copy_obs_stats`).
    Seeding happens at `reset(seed=...)`: sub-env i gets seed + i, or seed + first_env + i for the envs of one
    process of a run across processes (`EnvInfo.first_env`). `check_finite` (debug mode) adds `FiniteCheck` outside.
    """
    register_optional_families(env_cfg.id)
    num_envs = num_envs or env_cfg.num_envs
    mode = vectorization or choose_vectorization(env_cfg, num_envs)
    envs = _base_vector_env(env_cfg, num_envs, mode, render_mode, evaluation)
    try:
        check_spaces(env_cfg.id, envs.single_observation_space, envs.single_action_space)
        check_obs_options(env_cfg, envs.single_observation_space)
    except ConfigError:
        envs.close()
        raise
    if env_cfg.mask_obs:
        envs = MaskObservation(envs, env_cfg.mask_obs, env_cfg.id)
    if not atari.is_atari(env_cfg.id):  # AtariEpisodes records whole games itself
        envs = vw.RecordEpisodeStatistics(envs, buffer_length=1)
    if env_cfg.normalize_obs == "static":  # the (masked) space's bounds -> [-1, 1]; nothing to learn or copy
        envs = vw.RescaleObservation(envs, np.float32(-1.0), np.float32(1.0))
    elif env_cfg.normalize_obs:
        envs = vw.NormalizeObservation(envs)
        if evaluation:
            envs.update_running_mean = False
        clip = env_cfg.clip_obs
        envs = vw.TransformObservation(envs, lambda obs: np.clip(obs, -clip, clip), envs.observation_space)
    if env_cfg.normalize_reward and not evaluation:
        envs = vw.NormalizeReward(envs, gamma=gamma)
        envs = vw.ClipReward(envs, -env_cfg.clip_reward, env_cfg.clip_reward)
    if check_finite:
        envs = FiniteCheck(envs)
    observation_space = envs.single_observation_space
    assert isinstance(observation_space, spaces.Box)  # check_spaces; the wrappers above keep a Box
    spec = EnvInfo(env_cfg.id, num_envs, observation_space, envs.single_action_space, mode, first_env)
    return envs, spec


def make(env: str | EnvConfig, num_envs: int | None = None, *, evaluation: bool = False,
         render_mode: str | None = None, **options) -> VectorEnv:
    """The vector env training builds, in one call: `make("ALE/Breakout-v5", num_envs=8)`, with any `EnvConfig`
    option as a keyword (`make("Pendulum-v1", normalize_obs=True, action_repeat=2)`; a section as a dict:
    `atari={"frame_stack": 2}`), or from an `EnvConfig` (a preset's exactly: `rlfoundry.load_config(SPEC).env`).

    Its `spec` is the id's Gymnasium `EnvSpec` with the env's kwargs, `num_envs` and the `EnvConfig` it was built
    from (`spec.kwargs["rlfoundry"]`), and its `single_observation_space` what an agent takes (a Box: see
    `rlfoundry.envs.spaces`). `evaluation`: the statistics of observation normalisation frozen and rewards not
    normalised, as a run evaluates. Bad options are a ConfigError naming them."""
    from pydantic import ValidationError

    try:
        base = EnvConfig(id=env) if isinstance(env, str) else env
        env_cfg = EnvConfig.model_validate({**base.model_dump(), **options}) if options else base
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, error['loc'])) or 'env'}: {error['msg']}" for error in exc.errors())
        raise ConfigError(f"rlfoundry.envs.make({env!r}): {problems}") from None
    envs, _ = build(env_cfg, num_envs, evaluation=evaluation, render_mode=render_mode)
    registered = gym.registry.get(env_cfg.id)
    if registered is not None:
        envs.unwrapped.spec = dataclasses.replace(registered, kwargs={  # the wrappers read it there
            **registered.kwargs, **make_kwargs(env_cfg), "num_envs": envs.num_envs,
            "rlfoundry": env_cfg.model_dump(mode="json")})
    return envs


def make_single(env_cfg, render_mode: str | None = None) -> gym.Env:
    """One env as a run's agent sees it before normalisation (`rlfoundry.load_policy(...).make_env()`): the family's
    preprocessing, `action_repeat`, `pixels`, `wrappers` and `mask_obs`; an ALE id is one whole game
    (`atari.make_game`), a Brax id one `BraxEnv` (which starts as sub-env i of the batched env when reset with seed
    + i). Observation and reward normalisation are not here: the policy applies its frozen statistics itself, and
    rewards are the true ones. Every wrapper records its arguments: `gym.make(env.spec)` rebuilds the same env."""
    register_optional_families(env_cfg.id)
    if atari.is_atari(env_cfg.id):
        atari.check_options(env_cfg, "atari", render_mode)
        env = atari.make_game(env_cfg.id, env_cfg.atari, render_mode)
    else:
        kwargs = make_kwargs(env_cfg)
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        env = env_fn(env_cfg.id, kwargs, env_cfg)()
    if env_cfg.mask_obs:
        env = MaskEntries(env, env_cfg.mask_obs)
    return env


W = TypeVar("W", bound=VectorEnv)


def find_wrapper(envs: VectorEnv, kind: type[W]) -> W | None:
    """The first wrapper of type `kind` in the chain, or None."""
    while True:
        if isinstance(envs, kind):
            return envs
        if not hasattr(envs, "env"):
            return None
        envs = envs.env


def obs_stats(envs: VectorEnv) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(mean, var, count) of the observation normalisation, or None when observations are not normalised."""
    wrapper = find_wrapper(envs, vw.NormalizeObservation)
    if wrapper is None:
        return None
    return wrapper.obs_rms.mean.copy(), wrapper.obs_rms.var.copy(), float(wrapper.obs_rms.count)


def set_obs_stats(envs: VectorEnv, mean: np.ndarray, var: np.ndarray, count: float) -> None:
    wrapper = find_wrapper(envs, vw.NormalizeObservation)
    if wrapper is not None:
        wrapper.obs_rms.mean, wrapper.obs_rms.var, wrapper.obs_rms.count = mean.copy(), var.copy(), count


def copy_obs_stats(source: VectorEnv, target: VectorEnv) -> None:
    """Give evaluation envs the training envs' observation statistics (frozen)."""
    stats = obs_stats(source)
    if stats is not None:
        set_obs_stats(target, *stats)
