"""MiniGrid (and BabyAI) ids: their Dict observation becomes one channel-first uint8 image, the view `env.minigrid.view`
picks (`MiniGridImage`): the symbolic 7×7 egocentric view (the default), the whole grid, or either one rendered;
with `env.minigrid.direction`, a Dict of that view and the agent's direction (one-hot beside the view, for the
networks: `rlfoundry.envs.spaces`).
Axis 1 is the grid's row and axis 2 its column in every view (MiniGrid's own encoding is [x, y, channel]), and
the symbolic spaces bound each channel by its largest index, which the `minigrid` encoder sizes its embeddings
from. MiniGrid sets `truncated` on a goal reached at the last allowed step; here that step is a termination only.
docs/environments/minigrid.md has the details.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

if TYPE_CHECKING:
    from minigrid.minigrid_env import MiniGridEnv

VIEWS = ("partial", "full", "rgb_partial", "rgb_full")

# Largest value of each symbolic channel; the state channel holds the agent's direction (0–3) in the full view.
SYMBOLIC_HIGH = np.array(
    [max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values()), max(*STATE_TO_IDX.values(), 3)], dtype=np.uint8
)


class MiniGridImage(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """MiniGrid's Dict observation → the chosen view (module docstring), channel-first; reaching the goal at the limit
    is not truncation.

    The full and rendered views are computed here from the env itself, as minigrid's FullyObsWrapper and
    RGBImg(Partial)ObsWrapper do, rather than through those wrappers: they record no constructor arguments, so an env
    wrapped in them has no `spec` (Gymnasium's `check_env` and `gym.make(env.spec)` need one).
    """

    def __init__(self, env: gym.Env, view: str = "partial", tile_size: int = 8, direction: bool = False):
        if view not in VIEWS:
            raise ValueError(f"view = {view!r}: allowed: {', '.join(VIEWS)}")
        gym.utils.RecordConstructorArgs.__init__(self, view=view, tile_size=tile_size, direction=direction)
        gym.ObservationWrapper.__init__(self, env)
        self.view, self.tile_size, self.direction = view, tile_size, direction
        base = cast("MiniGridEnv", env.unwrapped)  # Env.unwrapped is typed Env; this wrapper wraps MiniGrid envs
        if view in ("partial", "full"):  # [x, y, c] → [c, y, x]
            width, height = (base.agent_view_size,) * 2 if view == "partial" else (base.width, base.height)
            shape = (3, height, width)
            high = np.broadcast_to(SYMBOLIC_HIGH[:, None, None], shape)
        else:  # rendered [y, x, c] → [c, y, x]
            cells = (base.agent_view_size,) * 2 if view == "rgb_partial" else (base.height, base.width)
            shape = (3, cells[0] * tile_size, cells[1] * tile_size)
            high = np.full(shape, 255, dtype=np.uint8)
        image = spaces.Box(np.zeros(shape, dtype=np.uint8), high.copy(), dtype=np.uint8)
        self.observation_space = spaces.Dict({"direction": spaces.Discrete(4), "image": image}) if direction else image

    def observation(self, observation: dict) -> np.ndarray | dict:
        image = self._view(observation)
        if self.direction:
            return {"direction": int(cast("MiniGridEnv", self.env.unwrapped).agent_dir), "image": image}
        return image

    def _view(self, observation: dict) -> np.ndarray:
        base = cast("MiniGridEnv", self.env.unwrapped)
        if self.view == "partial":
            return observation["image"].transpose(2, 1, 0)  # a view; the vector env copies it into its batch
        if self.view == "full":
            grid = base.grid.encode()
            grid[base.agent_pos[0], base.agent_pos[1]] = (OBJECT_TO_IDX["agent"], COLOR_TO_IDX["red"], base.agent_dir)
            return grid.transpose(2, 1, 0)
        pov = self.view == "rgb_partial"
        frame = base.get_frame(highlight=base.highlight, tile_size=self.tile_size, agent_pov=pov)
        return frame.transpose(2, 0, 1)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated and not terminated, info


def make_env(env_id: str, kwargs: dict, view: str = "partial", tile_size: int = 8, direction: bool = False) -> gym.Env:
    """One MiniGrid env with the chosen view (what each sub-env of the vector env runs)."""
    return MiniGridImage(gym.make(env_id, **kwargs), view, tile_size, direction)
