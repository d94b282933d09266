"""Gymnasium-Robotics (de Lazcano et al. 2024): its goal-conditioned mazes, the `PointMaze_<Maze>[Dense]-v3` ids (the
point mass of D4RL's mazes, Fu et al. 2020) and the `AntMaze_<Maze>[Dense]-v3/v4/v5` ids (Gymnasium's Ant in the same
mazes), on the MuJoCo bindings rlfoundry pins.

Importing this module registers the package's ids (`gym.register_envs(gymnasium_robotics)`), without the notice the
package prints on import about its Adroit ids, which this family does not cover. The maze envs observe a Dict
{observation, achieved_goal, desired_goal}, which `rlfoundry.envs.spaces` flattens like any Dict: one float32 vector,
the keys in sorted order. `make_env` builds the registered env as it is (reward, time limit, continuing task) and
removes the XML file of the maze the package writes to the temporary directory for every env it builds.

The package's other ids are not this family's: Fetch, Shadow Hand and Franka Kitchen fail with MuJoCo 3.17 (a
joint-type check in gymnasium_robotics.utils.mujoco_utils tests a numpy integer for membership in a tuple of MuJoCo
enum members, which never compare equal to it), their older versions and the locomotion `-v2`/`-v3` ids the package
registers again need the retired mujoco_py, and the Adroit ids changed their rewards without a new version.
docs/environments/robotics.md has the details.
"""

from __future__ import annotations

import contextlib
import io
import os

import gymnasium as gym

from rlfoundry.config.errors import unknown_id
from rlfoundry.config.sections import EnvConfig

with contextlib.redirect_stderr(io.StringIO()):  # farama_notifications' Adroit notice, printed on every import
    import gymnasium_robotics

gym.register_envs(gymnasium_robotics)

MAZES = "gymnasium_robotics.envs.maze."  # the entry points of the ids this family covers
SHARED_XML = "ant_maze.xml"  # AntMaze v3's maze file: one path for every env, which another may be reading


def maze_ids() -> list[str]:
    """The point and ant maze ids the package registers."""
    return sorted(env_id for env_id, spec in gym.registry.items()
                  if isinstance(spec.entry_point, str) and spec.entry_point.startswith(MAZES))


def check_id(env_id: str) -> None:
    """ConfigError for a maze id Gymnasium-Robotics does not register, naming the nearest ones."""
    if env_id in gym.registry:
        return
    body = env_id.partition("_")[0]  # PointMaze or AntMaze: an unknown maze lists the body's own ids
    known = [name for name in maze_ids() if name.partition("_")[0] == body] or maze_ids()
    raise unknown_id(env_id, known, "a Gymnasium-Robotics maze id")


def make_env(env_id: str, kwargs: dict, env_cfg: EnvConfig) -> gym.Env:
    """One maze env, as registered; the maze's XML file, read once the env is built, is removed."""
    check_id(env_id)
    env = gym.make(env_id, **kwargs)
    path = getattr(env.unwrapped, "tmp_xml_file_path", None)
    if isinstance(path, str) and os.path.basename(path) != SHARED_XML:
        with contextlib.suppress(OSError):
            os.remove(path)
    return env
