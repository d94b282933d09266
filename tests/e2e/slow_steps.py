"""A stand-in for a slow simulator: each env step takes a fixed wall time without using the CPU. For tests whose runs
must outlast a polling interval on every machine without computing more (`env.wrappers=[{id:
tests.e2e.slow_steps:Sleep, kwargs: {seconds: ...}}]`, with the repository on the runs' PYTHONPATH)."""

from __future__ import annotations

import time

import gymnasium as gym


class Sleep(gym.Wrapper):
    def __init__(self, env: gym.Env, seconds: float) -> None:
        super().__init__(env)
        self.seconds = seconds

    def step(self, action):
        time.sleep(self.seconds)
        return self.env.step(action)
