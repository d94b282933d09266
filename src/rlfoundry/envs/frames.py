"""Pixel preprocessing of game screens for ViZDoom and Retro (`env.vizdoom`, `env.retro`: `FramesConfig`): the Atari
path's frames for envs that hand out an RGB screen. `ScreenFrames` greys (OpenCV's weights), resizes (INTER_AREA)
and stacks the frames channel-first in the Atari path's layout; `StickyFrameSkip` plays an action for `frame_skip`
emulator frames with optional sticky actions (Retro only: ViZDoom's engine skips frames itself). No max-pool and
no reward clipping, unlike the Atari path: docs/environments/retro.md says why. A step costs one grey conversion
and one resize into preallocated buffers (a ring of frames, never shifted) and one copy laying it out oldest first.
"""

from __future__ import annotations

from typing import Any

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ScreenFrames(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """A screen [H, W, C] (C = 3 RGB or 1 grey) → the last `frame_stack` frames, channel-first (module docstring).

    `img_size` is (height, width). A grey screen cannot give RGB frames. The state is the ring of frames and the index
    of the newest one.
    """

    def __init__(self, env: gym.Env, grayscale: bool = True, img_size: tuple[int, int] = (84, 84),
                 frame_stack: int = 4):
        gym.utils.RecordConstructorArgs.__init__(self, grayscale=grayscale, img_size=tuple(img_size),
                                                 frame_stack=frame_stack)
        gym.Wrapper.__init__(self, env)
        screen = env.observation_space
        if not (isinstance(screen, spaces.Box) and screen.dtype == np.uint8 and len(screen.shape) == 3
                and screen.shape[2] in (1, 3)):
            raise ValueError(f"ScreenFrames needs a uint8 [H, W, 3 or 1] screen, got {screen}")
        if screen.shape[2] == 1 and not grayscale:
            raise ValueError("grayscale = False: the screen is grey ([H, W, 1]); RGB frames need an RGB screen")
        if frame_stack < 1 or len(img_size) != 2 or min(img_size) < 1:
            raise ValueError(f"frame_stack = {frame_stack}, img_size = {img_size}: expected positive sizes")
        self.height, self.width = int(img_size[0]), int(img_size[1])
        self.channels = 1 if grayscale else 3
        self.ring = np.zeros((frame_stack, self.channels, self.height, self.width), dtype=np.uint8)
        self.newest = frame_stack - 1  # index in `ring` of the newest frame
        # RGB screens become grey here, resized RGB frames wait here for their transpose into the ring
        self.grey = np.empty(screen.shape[:2], dtype=np.uint8) if grayscale and screen.shape[2] == 3 else None
        self.resized = None if grayscale else np.empty((self.height, self.width, 3), dtype=np.uint8)
        self.observation_space = spaces.Box(0, 255, (frame_stack * self.channels, self.height, self.width),
                                            dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        screen, info = self.env.reset(seed=seed, options=options)
        self.ring[:] = 0
        self._push(screen)
        return self._stacked(), info

    def step(self, action):
        screen, reward, terminated, truncated, info = self.env.step(action)
        self._push(screen)
        return self._stacked(), reward, terminated, truncated, info

    def _push(self, screen: np.ndarray) -> None:
        self.newest = (self.newest + 1) % len(self.ring)
        size = (self.width, self.height)  # OpenCV's dsize is (width, height)
        if self.channels == 1:
            grey = screen[..., 0] if self.grey is None else cv2.cvtColor(screen, cv2.COLOR_RGB2GRAY, dst=self.grey)
            if grey.shape == (self.height, self.width):
                self.ring[self.newest, 0] = grey
            else:
                cv2.resize(grey, size, dst=self.ring[self.newest, 0], interpolation=cv2.INTER_AREA)
        else:
            rgb = screen
            if rgb.shape[:2] != (self.height, self.width):
                rgb = cv2.resize(screen, size, dst=self.resized, interpolation=cv2.INTER_AREA)
            self.ring[self.newest] = rgb.transpose(2, 0, 1)

    def _stacked(self) -> np.ndarray:
        """The ring oldest first, [frame_stack * C, H, W]: a new array."""
        oldest = (self.newest + 1) % len(self.ring)
        stacked = np.empty_like(self.ring)
        older = len(self.ring) - oldest
        stacked[:older] = self.ring[oldest:]
        stacked[older:] = self.ring[:oldest]
        return stacked.reshape(self.observation_space.shape)


class StickyFrameSkip(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """`frame_skip` frames of the wrapped env per step with the rewards summed; the last frame's observation and info.

    The repeat stops at the episode's end (never stepping past it). Sticky actions as ALE does them (Machado et al.
    2018, arXiv:1709.06009): each frame runs the previous frame's action instead of the agent's with probability
    `repeat_action_probability`, drawn from the env's `np_random` (seeded by `reset(seed=...)`); an episode starts
    from `noop_action`. With probability 0 no random number is drawn.
    """

    def __init__(self, env: gym.Env, frame_skip: int, repeat_action_probability: float = 0.0, noop_action: int = 0):
        gym.utils.RecordConstructorArgs.__init__(self, frame_skip=frame_skip,
                                                 repeat_action_probability=repeat_action_probability,
                                                 noop_action=noop_action)
        gym.Wrapper.__init__(self, env)
        if frame_skip < 1 or not 0.0 <= repeat_action_probability <= 1.0:
            raise ValueError(f"frame_skip = {frame_skip}, repeat_action_probability = {repeat_action_probability}: "
                             "expected frame_skip >= 1 and a probability in [0, 1]")
        self.frame_skip, self.repeat_action_probability = frame_skip, repeat_action_probability
        self.noop_action = noop_action
        self.sticky_action = noop_action  # the action the last frame ran

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.sticky_action = self.noop_action
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        total = 0.0
        sticky = self.repeat_action_probability > 0
        rng = self.np_random if sticky else None
        for _ in range(self.frame_skip):
            if not sticky or rng.random() >= self.repeat_action_probability:
                self.sticky_action = action
            obs, reward, terminated, truncated, info = self.env.step(self.sticky_action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info
