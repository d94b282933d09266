"""DeepMind Control Suite ids, `dm_control/<domain>-<task>-v0`, through shimmy's Gymnasium wrapper of dm_control.

Importing this module registers the ids (shimmy does on import), after choosing a headless OpenGL backend for
MuJoCo when `MUJOCO_GL` is unset: dm_control reads it at its first import. shimmy registers its ids with
`functools.partial`s of functions local to its registration, which `EnvSpec.to_json` refuses; the ids are registered
again here with string entry points of ours that build the same envs (`SuiteTask`, `ManipulationTask`,
`LocomotionTask`), so that a spec goes through JSON and `check_renders` reads the render modes without building one.

`make_env` builds one env observing what `env.dm_control` asks for: the observation dict flattened in the task's own
key order (`DmcProprio`; shimmy's Dict space sorts the keys), or rendered frames (`DmcPixels`, which renders only the
frames the agent sees under an action repeat). docs/environments/dm-control.md describes both, the episodes and
resume.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import EzPickle

from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.wrappers import headless_gl

if "MUJOCO_GL" not in os.environ and (_gl := headless_gl()) is not None:
    os.environ["MUJOCO_GL"] = _gl  # before dm_control's first import, which reads it

try:
    import shimmy  # noqa: F401  registers the dm_control/* ids
    from shimmy.dm_control_compatibility import DmControlCompatibilityV0
    from shimmy.registration import DM_CONTROL_MANIPULATION_ENVS, DM_CONTROL_SUITE_ENVS
except RuntimeError as exc:  # dm_control refuses an unknown MUJOCO_GL at import
    raise ConfigError(f"MUJOCO_GL = {os.environ.get('MUJOCO_GL')!r}: {exc}") from None

SHIMMY_INFO = ("timestep.discount", "timestep.step_type")
_RENDERING_PID: int | None = None  # the process that has rendered here (opened an OpenGL context)


class SuiteTask(DmControlCompatibilityV0):
    """A suite task, `dm_control/<domain>-<task>-v0`: `dm_control.suite.load` in shimmy's env, as shimmy's own entry
    point builds it (the same arguments; `render_mode` and `render_kwargs` are shimmy's)."""

    def __init__(self, domain_name: str, task_name: str, task_kwargs: dict | None = None,
                 environment_kwargs: dict | None = None, visualize_reward: bool = False,
                 render_mode: str | None = None, render_kwargs: dict[str, Any] | None = None):
        from dm_control import suite

        super().__init__(suite.load(domain_name, task_name, task_kwargs, environment_kwargs, visualize_reward),
                         render_mode, render_kwargs)
        # what a pickle rebuilds the env from: these arguments, not the dm_control env they built
        EzPickle.__init__(self, domain_name, task_name, task_kwargs, environment_kwargs, visualize_reward,
                          render_mode, render_kwargs)


class ManipulationTask(DmControlCompatibilityV0):
    """A manipulation task, `dm_control/<name>-v0` (`dm_control.manipulation.load`), as shimmy builds it."""

    def __init__(self, env_name: str, render_mode: str | None = None, render_kwargs: dict[str, Any] | None = None):
        from dm_control import manipulation

        super().__init__(manipulation.load(env_name), render_mode, render_kwargs)
        EzPickle.__init__(self, env_name, render_mode, render_kwargs)


class LocomotionTask(DmControlCompatibilityV0):
    """A locomotion example (`dm_control/CmuHumanoidRunWalls-v0`, ...), as shimmy builds it; `example` names its
    function in `dm_control.locomotion.examples` (`basic_cmu_2019.cmu_humanoid_run_walls`)."""

    def __init__(self, example: str, random_state: np.random.RandomState | None = None,
                 render_mode: str | None = None, render_kwargs: dict[str, Any] | None = None):
        module, _, function = example.partition(".")
        build = getattr(importlib.import_module(f"dm_control.locomotion.examples.{module}"), function)
        super().__init__(build(random_state), render_mode, render_kwargs)
        EzPickle.__init__(self, example, random_state, render_mode, render_kwargs)


def _entry_point(cls: type, env_id: str, kwargs: dict[str, Any]) -> None:
    spec = gym.registry.get(env_id)
    if spec is not None:
        gym.registry[env_id] = dataclasses.replace(spec, entry_point=f"{__name__}:{cls.__name__}",
                                                   kwargs={**kwargs, **spec.kwargs})


def register_string_entry_points() -> None:
    """Give each id shimmy registered an entry point of ours that builds the same env (module docstring): its spec,
    nondeterminism and kwargs stay shimmy's. `dm_control/compatibility-env-v0`, which wraps an env object handed
    to it, keeps shimmy's."""
    for domain, task in DM_CONTROL_SUITE_ENVS:
        _entry_point(SuiteTask, f"dm_control/{domain}-{task}-v0", {"domain_name": domain, "task_name": task})
    for name in DM_CONTROL_MANIPULATION_ENVS:
        _entry_point(ManipulationTask, f"dm_control/{name}-v0", {"env_name": name})
    for env_id, spec in list(gym.registry.items()):
        entry = spec.entry_point
        if env_id.startswith("dm_control/") and isinstance(entry, partial) and "env_fn" in entry.keywords:
            build = entry.keywords["env_fn"]
            example = f"{build.__module__.rsplit('.', 1)[-1]}.{build.__name__}"
            _entry_point(LocomotionTask, env_id, {"example": example})


register_string_entry_points()


def async_context(env_cfg) -> str | None:
    """The start method AsyncVectorEnv workers need (`multiprocessing` context name), None for the default.

    Pixels need `spawn`: a worker forked from a process that has rendered (AsyncVectorEnv's own dummy env, `auto`
    vectorization's timing, `make_env`'s check) inherits a half-copied EGL/Mesa state and hangs in its first
    render (seen with Mesa 22.3 llvmpipe). Vectors render nothing and fork safely."""
    return "spawn" if env_cfg.dm_control.pixels else None


def _base(env: gym.Env) -> DmControlCompatibilityV0:
    base = env.unwrapped
    if not isinstance(base, DmControlCompatibilityV0):
        raise TypeError(f"expected a shimmy dm_control env, got {type(base).__name__}")
    return base


class DmcProprio(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """The observation dict → one float64 vector, keys in the task's order (module docstring)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        specs = _base(env).observation_spec()  # an OrderedDict in the task's order
        self.keys = tuple(specs)
        size = sum(int(np.prod(spec.shape)) for spec in specs.values())
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), np.float64)

    def observation(self, observation: dict) -> np.ndarray:
        return np.concatenate([np.asarray(observation[key], dtype=np.float64).ravel() for key in self.keys])

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, _without_shimmy_info(info)

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, _without_shimmy_info(info)


class DmcPixels(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Rendered frames, uint8 [3, height, width] from `camera` (index or name), instead of the observation dict.

    `render_every` k: a frame is rendered at reset, every k-th step after it and at an episode's end; the steps in
    between return the last frame. Set it to the action repeat around this env, whose inner frames are discarded.
    """

    def __init__(self, env: gym.Env, height: int = 64, width: int = 64, camera: int | str = 0, render_every: int = 1):
        if render_every < 1:
            raise ValueError(f"render_every = {render_every}: expected a positive int")
        gym.utils.RecordConstructorArgs.__init__(self, height=height, width=width, camera=camera,
                                                 render_every=render_every)
        gym.Wrapper.__init__(self, env)
        self.height, self.width, self.render_every = height, width, render_every
        self.camera_id = camera_index(_base(env).physics, camera)
        self.observation_space = spaces.Box(0, 255, (3, height, width), np.uint8)
        self.steps = 0  # since the last reset
        self.frame = np.zeros((3, height, width), np.uint8)

    def render_frame(self) -> np.ndarray:
        global _RENDERING_PID
        if _RENDERING_PID not in (None, os.getpid()):  # see async_context: fail instead of hanging
            raise ConfigError("env.vectorization = async: dm_control pixels cannot render in a worker process forked "
                              "from one that has rendered (OpenGL hangs); use env.vectorization = sync, or async "
                              "workers started with spawn (rlfoundry.envs.dm_control.async_context)")
        _RENDERING_PID = os.getpid()
        frame = _base(self.env).physics.render(self.height, self.width, camera_id=self.camera_id)
        self.frame = frame.transpose(2, 0, 1)  # [H, W, 3] → [3, H, W], a view; the vector env copies it
        return self.frame

    def reset(self, *, seed=None, options=None):
        _, info = self.env.reset(seed=seed, options=options)
        self.steps = 0
        return self.render_frame(), _without_shimmy_info(info)

    def step(self, action):
        _, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        due = terminated or truncated or self.steps % self.render_every == 0
        return self.render_frame() if due else self.frame, reward, terminated, truncated, _without_shimmy_info(info)


def _without_shimmy_info(info: dict) -> dict:
    """`info` without shimmy's per-step keys (the dm_env step type and discount): the terminated and truncated flags
    carry them, and a vector env would batch an object array of step types at every step."""
    return {key: value for key, value in info.items() if key not in SHIMMY_INFO} if info else info


def camera_index(physics, camera: int | str) -> int:
    """The model's index of `camera` (an index, −1 the free camera, or a name); ValueError naming the cameras."""
    model = physics.model
    names = [model.id2name(i, "camera") or str(i) for i in range(model.ncam)]
    if isinstance(camera, str):
        if camera not in names:
            raise ValueError(f"no camera named {camera!r}; this model's cameras: {', '.join(names) or 'none'} "
                             "(or an index, -1 for the free camera)")
        return names.index(camera)
    if not -1 <= camera < model.ncam:
        raise ValueError(f"camera index {camera} is out of range; this model has {model.ncam} "
                         f"({', '.join(names) or 'none'}), indices -1 (free camera) to {model.ncam - 1}")
    return int(camera)


def make_env(env_id: str, kwargs: dict, env_cfg) -> gym.Env:
    """One DeepMind Control env with the observation `env_cfg.dm_control` asks for (module docstring)."""
    options = env_cfg.dm_control
    env = gym.make(env_id, **kwargs)
    if not isinstance(env.unwrapped, DmControlCompatibilityV0):
        env.close()
        raise ConfigError(f"env.id = '{env_id}': not a dm_control env (shimmy's DmControlCompatibilityV0)")
    video = kwargs.get("render_mode") is not None and "render_kwargs" not in kwargs
    if not (options.pixels or video):
        return DmcProprio(env)
    try:
        camera = camera_index(_base(env).physics, options.camera)
    except ValueError as exc:
        env.close()
        raise ConfigError(f"env.dm_control.camera = {options.camera!r}: {env_id}: {exc}") from None
    if video:  # from that camera, not shimmy's default free camera
        _base(env).render_kwargs = {"camera_id": camera}
    if not options.pixels:
        return DmcProprio(env)
    height, width = options.frame_size
    buffer = _base(env).physics.model.vis.global_  # dm_control renders into the model's offscreen buffer
    if height > buffer.offheight or width > buffer.offwidth:
        env.close()
        raise ConfigError(f"env.dm_control.img_size = {[height, width]}: {env_id} renders at most {buffer.offheight}x"
                          f"{buffer.offwidth} (height x width: the model's offscreen buffer, visual/global "
                          "offheight and offwidth); allowed: a side or [height, width] within it")
    pixels = DmcPixels(env, height, width, camera, render_every=env_cfg.action_repeat)
    check_renders(pixels)
    return pixels


def check_renders(env: DmcPixels) -> None:
    """One frame now, so that a missing OpenGL backend is a clear ConfigError before training starts."""
    try:
        env.render_frame()
    except ConfigError:
        env.close()
        raise
    except Exception as exc:  # no usable OpenGL context; dm_control raises several types
        env.close()
        gl = os.environ.get("MUJOCO_GL")
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no detail"
        raise ConfigError(
            f"env.dm_control.pixels = true: MuJoCo cannot render here with MUJOCO_GL={gl or '(unset)'} "
            f"({type(exc).__name__}: {detail}); set MUJOCO_GL to a backend this machine has (egl: libEGL and a GPU "
            "driver or Mesa; osmesa: libOSMesa), or use pixels: false") from None
