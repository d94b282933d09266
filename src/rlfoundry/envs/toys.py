"""Small games registered as `rlfoundry/*` ids, for checking learners in minutes. `rlfoundry/Catch-v0` (`CatchEnv`) is
Catch (Mnih et al. 2014, arXiv:1406.6247; bsuite's catch, Osband et al. 2020, arXiv:1908.03568) drawn in colour and
stacked like the RGB Atari frames, so that a world model made for SimPLe's frames has a small game with a known
best return. `rlfoundry/Reach-v0` (`ReachEnv`) moves a point to a goal on a line, and `ReachEnv.best_return` gives
the optimal return. docs/environments/toys.md has the rules of both.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

BALL = np.array([255, 80, 80], dtype=np.uint8)  # red
PADDLE = np.array([80, 160, 255], dtype=np.uint8)  # blue
BALL_GREY, PADDLE_GREY = np.array([255], dtype=np.uint8), np.array([128], dtype=np.uint8)
PADDLE_WIDTH = 3
RENDER_SCALE = 8  # render() upscales each pixel to 8x8, so videos are not a few pixels wide


class CatchEnv(gym.Env):
    """Catch a falling ball with a paddle; docs/environments/toys.md has the rules."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, height: int = 20, width: int = 16, frame_stack: int = 4, balls: int = 10,
                 grayscale: bool = False, render_mode: str | None = None):
        if height < 2 or width < PADDLE_WIDTH:
            raise ValueError(f"height = {height}, width = {width}: need height >= 2 and width >= {PADDLE_WIDTH}")
        if frame_stack < 1 or balls < 1:
            raise ValueError(f"frame_stack = {frame_stack}, balls = {balls}: both must be at least 1")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode = {render_mode!r}: allowed: None, 'rgb_array'")
        self.height, self.width, self.frame_stack, self.balls = height, width, frame_stack, balls
        self.render_mode = render_mode
        channels = 1 if grayscale else 3
        self.ball, self.paddle_colour = (BALL_GREY, PADDLE_GREY) if grayscale else (BALL, PADDLE)
        self.observation_space = spaces.Box(0, 255, (frame_stack * channels, height, width), dtype=np.uint8)
        self.action_space = spaces.Discrete(3)  # 0 left, 1 stay, 2 right
        self.stack = np.zeros((frame_stack, channels, height, width), dtype=np.uint8)  # oldest first
        self.ball_row, self.ball_col, self.paddle = 0, 0, 0  # the paddle's leftmost column
        self.balls_left = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.paddle = (self.width - PADDLE_WIDTH) // 2
        self.balls_left = self.balls
        self._new_ball()
        self.stack[:] = 0
        self._push()
        return self._obs(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, self.width - PADDLE_WIDTH))
        reward, terminated = 0.0, False
        if self.ball_row == self.height - 1:  # the last step showed the ball landing
            self._new_ball()
        else:
            self.ball_row += 1
            if self.ball_row == self.height - 1:
                reward = 1.0 if self.paddle <= self.ball_col < self.paddle + PADDLE_WIDTH else -1.0
                self.balls_left -= 1
                terminated = self.balls_left == 0
        self._push()
        return self._obs(), reward, terminated, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.broadcast_to(self.stack[-1], (3, self.height, self.width)).transpose(1, 2, 0)  # [H, W, RGB]
        return np.repeat(np.repeat(frame, RENDER_SCALE, axis=0), RENDER_SCALE, axis=1)

    def _new_ball(self) -> None:
        self.ball_row, self.ball_col = 0, int(self.np_random.integers(0, self.width))

    def _push(self) -> None:
        self.stack[:-1] = self.stack[1:]
        frame = self.stack[-1]
        frame[:] = 0
        frame[:, -1, self.paddle:self.paddle + PADDLE_WIDTH] = self.paddle_colour[:, None]
        frame[:, self.ball_row, self.ball_col] = self.ball  # drawn over the paddle when caught

    def _obs(self) -> np.ndarray:
        return self.stack.reshape(self.observation_space.shape).copy()


class ReachEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, steps: int = 10, speed: float = 0.2):
        self.steps, self.speed = steps, speed
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.position = self.goal = 0.0
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.goal = (float(x) for x in self.np_random.uniform(-1.0, 1.0, 2))
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        move = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1.0, 1.0)) * self.speed
        self.position = float(np.clip(self.position + move, -1.0, 1.0))
        self.t += 1
        return self._obs(), -abs(self.goal - self.position), False, self.t >= self.steps, {}

    def _obs(self) -> np.ndarray:
        return np.array([self.position, self.goal], np.float32)

    def best_return(self, position: float, goal: float) -> float:
        """The return of the optimal policy from this start: full speed to the goal, then stay."""
        distance = abs(goal - position)
        return -sum(max(0.0, distance - self.speed * t) for t in range(1, self.steps + 1))


TOYS: dict[str, str] = {"rlfoundry/Catch-v0": "rlfoundry.envs.toys:CatchEnv",
                        "rlfoundry/Reach-v0": "rlfoundry.envs.toys:ReachEnv"}


def register_toys() -> None:
    """Register the `rlfoundry/*` toy ids (once; later calls do nothing)."""
    for env_id, entry_point in TOYS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point)
