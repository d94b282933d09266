"""Wrappers of our own; Gymnasium's cover episode statistics and normalisation. `ActionRepeat` (`env.action_repeat`),
`RenderedFrames` (`env.pixels`), `ChannelsFirst` (channel-last uint8 images, which the networks read as [C, H, W]),
`ResizeImages` (`env.img_size`), `MaskObservation` (`env.mask_obs` on a vector env; `MaskEntries` on one env) and
`StepLimit` (a time limit outside other wrappers). Every single-env wrapper here records its constructor arguments
(`gym.utils.RecordConstructorArgs`) and none holds a function, so that `gym.make(env.spec)` rebuilds an env with its
wrappers and its spec goes through `EnvSpec.to_json`.

Masking removes the hidden entries rather than zeroing them, as pomdp-baselines' "-P" tasks do (Ni et al. 2022,
arXiv:2110.05038): a zeroed entry is a constant input that observation normalisation would divide by a zero
variance. It works on the vector env, so it also masks numpy vector entry points (CartPole).
docs/environments/options.md describes the options.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Sequence
from typing import TypeGuard

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv, VectorObservationWrapper, VectorWrapper
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import TimeLimit

from rlfoundry.config.errors import ConfigError


def mask_obs_space(
    env_id: str, observation_space: spaces.Space, hidden: Sequence[int]
) -> tuple[spaces.Box, slice | np.ndarray]:
    """The single-env space without the `hidden` entries, and the index that selects the kept ones.

    The index is a slice when the kept entries are contiguous (selecting is then a view, no copy).
    Raises `ConfigError` naming `env.mask_obs` when an index is out of range, repeated, or hides everything.
    """
    shown = f"env.mask_obs = {list(hidden)}"
    if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 1:
        raise ConfigError(f"{shown}: needs a 1-D vector observation; {env_id} observes {observation_space}")
    size = observation_space.shape[0]
    for i in hidden:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= i < size:
            raise ConfigError(
                f"{shown}: index {i!r} is out of range for {env_id}'s {size} observation entries; "
                f"allowed: integers 0 to {size - 1}"
            )
    if len(set(hidden)) != len(hidden):
        raise ConfigError(f"{shown}: an index is repeated; list each hidden index once")
    keep = np.setdiff1d(np.arange(size), np.asarray(hidden, dtype=np.int64))
    if keep.size == 0:
        raise ConfigError(f"{shown}: hides all {size} entries of {env_id}'s observation; keep at least one")
    index: slice | np.ndarray = keep
    if keep[-1] - keep[0] + 1 == keep.size:
        index = slice(int(keep[0]), int(keep[-1]) + 1)
    box = spaces.Box(observation_space.low[index], observation_space.high[index], dtype=observation_space.dtype)
    return box, index


class ActionRepeat(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Each action is repeated `repeat` times; the rewards are summed and the last observation returned. A
    termination or truncation ends the repeat early (the episode's end is never stepped past). The time limit
    inside still counts env steps, so a 1000-step DeepMind Control episode is 125 agent steps at repeat 8."""

    def __init__(self, env: gym.Env, repeat: int):
        if repeat < 1:
            raise ValueError(f"repeat = {repeat}: expected a positive int")
        gym.utils.RecordConstructorArgs.__init__(self, repeat=repeat)
        gym.Wrapper.__init__(self, env)
        self.repeat = repeat

    @classmethod
    def around(cls, make_env, repeat: int) -> ActionRepeat:
        return cls(make_env(), repeat)

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def headless_gl() -> str | None:
    """The OpenGL backend MuJoCo renders with where there is no display: egl, else osmesa, where its library is
    installed (Linux); None where neither is (or elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    for backend, library in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(library):
            return backend
    return None


def offscreen_mujoco() -> None:
    """Before an env that renders rgb_array frames is made: without a display and without the user's `MUJOCO_GL`,
    MuJoCo's envs render through `headless_gl()` (Gymnasium reads MUJOCO_GL when an env first renders, and would
    otherwise try GLFW, which needs a display)."""
    if "MUJOCO_GL" not in os.environ and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        backend = headless_gl()
        if backend is not None:
            os.environ["MUJOCO_GL"] = backend


class RenderedFrames(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The env's rgb_array frames as its observation, uint8 [3, height, width] (`env.pixels`): RGB resized with
    OpenCV's INTER_AREA, rendered once per (repeated) step. The env must be made with `render_mode="rgb_array"`.
    pygame-drawn envs (classic control, Box2D) draw off-screen: SDL's dummy video driver unless one is set."""

    def __init__(self, env: gym.Env, height: int = 64, width: int = 64):
        gym.utils.RecordConstructorArgs.__init__(self, height=height, width=width)
        gym.Wrapper.__init__(self, env)
        if env.render_mode != "rgb_array":
            raise ValueError(f"render_mode = {env.render_mode!r}: RenderedFrames needs 'rgb_array'")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        self.height, self.width = height, width
        self.observation_space = spaces.Box(0, 255, (3, height, width), np.uint8)

    @classmethod
    def around(cls, make_env, height: int, width: int) -> RenderedFrames:
        return cls(make_env(), height, width)

    def frame(self) -> np.ndarray:
        frame = resize_frame(np.asarray(self.env.render()), self.height, self.width)
        return np.ascontiguousarray(frame[..., :3].transpose(2, 0, 1), dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        _, info = self.env.reset(seed=seed, options=options)
        return self.frame(), info

    def step(self, action):
        _, reward, terminated, truncated, info = self.env.step(action)
        return self.frame(), reward, terminated, truncated, info


class StepLimit(TimeLimit):
    """Gymnasium's `TimeLimit`, for a limit that must stay outside the wrappers it is put around (Retro's counts
    agent steps, outside the frame skip). `TimeLimit` records itself as `spec.max_episode_steps`, which `gym.make`
    applies right around the base env, inside every other wrapper: the env rebuilt from the spec would count frames.
    This one records itself as a wrapper of the spec, in its place."""

    spec = gym.Wrapper.spec


IMAGE_CHANNELS = (1, 3, 4)  # grey, RGB, RGBA


def is_image_space(space: spaces.Space) -> TypeGuard[spaces.Box]:
    """uint8 [C, H, W] images: they stay uint8 until the network's encoder scales them."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def is_channel_last(space: spaces.Space) -> bool:
    """uint8 images [H, W, C] with C grey, RGB or RGBA and both sides larger than C. Channel-first ones ([3, 64, 64],
    stacks [4, 84, 84], MiniGrid's [3, 7, 7]) end in a side, never in a channel count below both other sides."""
    if not is_image_space(space):
        return False
    height, width, channels = space.shape
    return channels in IMAGE_CHANNELS and min(height, width) > channels


def resize_frame(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """An [H, W, C] frame resized with OpenCV's INTER_AREA, its channel axis kept (OpenCV drops a single one)."""
    if frame.shape[:2] == (height, width):
        return frame
    resized = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
    return resized[..., None] if resized.ndim == 2 else resized


class ChannelsFirst(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Channel-last uint8 images [H, W, C] → [C, H, W], and stacks of them [S, H, W, C] → [S * C, H, W]
    (frame-major, then channels: the layout the image encoders take). A named wrapper rather than a
    `TransformObservation` of a lambda, so that `env.spec` holds no function and goes through `EnvSpec.to_json`."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not (isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (3, 4)):
            raise ValueError(f"ChannelsFirst needs uint8 [H, W, C] or [S, H, W, C] images, got {space}")
        *stack, height, width, channels = space.shape
        self.shape = (int(np.prod(stack, dtype=np.int64)) * channels, height, width)
        self.axes = (2, 0, 1) if not stack else (0, 3, 1, 2)
        self.observation_space = spaces.Box(space.low.transpose(self.axes).reshape(self.shape),
                                            space.high.transpose(self.axes).reshape(self.shape), dtype=np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        # single images: a view, which a vector env copies into its batch; stacks: a copy
        return observation.transpose(self.axes).reshape(self.shape)


class ResizeImages(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """uint8 [C, H, W] images resized to [C, height, width] with OpenCV's INTER_AREA (`env.img_size`)."""

    def __init__(self, env: gym.Env, height: int, width: int):
        gym.utils.RecordConstructorArgs.__init__(self, height=height, width=width)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not is_image_space(space):
            raise ValueError(f"ResizeImages needs uint8 [C, H, W] images, got {space}")
        self.height, self.width = height, width
        self.observation_space = spaces.Box(0, 255, (space.shape[0], height, width), np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return resize_frame(observation.transpose(1, 2, 0), self.height, self.width).transpose(2, 0, 1)


def images_channel_first(make_env) -> gym.Env:
    """The env from `make_env()`, with channel-last image observations transposed to [C, H, W] (`ChannelsFirst`);
    any other env as it is."""
    env = make_env()
    return ChannelsFirst(env) if is_channel_last(env.observation_space) else env


def resized_images(make_env, height: int, width: int) -> gym.Env:
    """The env from `make_env()` with its uint8 [C, H, W] image observations resized to [C, height, width]
    (`ResizeImages`); any other env, or images of that size already, as they are."""
    env = make_env()
    space = env.observation_space
    if not is_image_space(space) or space.shape[1:] == (height, width):
        return env
    return ResizeImages(env, height, width)


class MaskEntries(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """`env.mask_obs` on one env (`rlfoundry.envs.make_single`): the observation without the `hidden` entries, as
    `MaskObservation` removes them from a vector env's."""

    def __init__(self, env: gym.Env, hidden: Sequence[int]):
        hidden = [int(i) for i in hidden]
        gym.utils.RecordConstructorArgs.__init__(self, hidden=hidden)
        gym.ObservationWrapper.__init__(self, env)
        env_id = env.spec.id if env.spec is not None else "this env"
        self.observation_space, self.index = mask_obs_space(env_id, env.observation_space, hidden)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.index]


class MaskObservation(VectorObservationWrapper):
    """Remove the observation entries listed in `hidden` (indices into the single-env observation)."""

    def __init__(self, env: VectorEnv, hidden: Sequence[int], env_id: str = "this env"):
        super().__init__(env)
        self.hidden = tuple(int(i) for i in hidden)
        self.single_observation_space, self.index = mask_obs_space(env_id, env.single_observation_space, hidden)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)

    def observations(self, observations: np.ndarray) -> np.ndarray:
        return observations[:, self.index]  # [B, D] → [B, kept]


class FiniteCheck(VectorWrapper):
    """`train.debug`: fails at the first observation, reward or action that is NaN or infinite, naming it, the env
    and the env step (counted over all envs, as the trainer's steps are). Observations are checked as the agent
    sees them, after any normalisation."""

    def __init__(self, env: VectorEnv):
        super().__init__(env)
        self.steps = 0  # env steps so far (all envs): plain state, so it is checkpointed with the envs

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._check("observation", obs, "after reset")
        return obs, info

    def step(self, actions):
        self._check("action", actions, f"at step {self.steps:,}")
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self.steps += self.num_envs
        self._check("observation", obs, f"at step {self.steps:,}")
        self._check("reward", rewards, f"at step {self.steps:,}")
        return obs, rewards, terminated, truncated, info

    @staticmethod
    def _check(what: str, values, when: str) -> None:
        values = np.asarray(values)
        if values.dtype.kind != "f":  # integer observations and actions are always finite
            return
        bad = ~np.isfinite(values)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            kind = "NaN" if np.isnan(values[index]) else "inf"
            raise FloatingPointError(f"{what} of env {index[0]} is {kind} {when}"
                                     + (f" (element {index[1:]})" if len(index) > 1 else ""))
