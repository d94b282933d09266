"""Gymnasium-Robotics' mazes (`rlfoundry.envs.robotics`): the family loads when one of its ids is asked for, its Dict
observations reach the agents as one float32 vector in sorted key order, `info["success"]` passes through, the maze
files are cleaned up, and unknown ids get a did-you-mean. check_env, the rebuilt spec (test_check_env.py), exact
resume (test_env_state.py) and a few PPO iterations (test_family_training.py) are with the other families'."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gymnasium import spaces

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import EnvConfig
from rlfoundry.envs import family_of, make, make_single, probe_spaces
from rlfoundry.experiment.load import check_env_id

pytest.importorskip("gymnasium_robotics")

POINT = "PointMaze_UMaze-v3"

ON_DEMAND = f"""
import sys
import gymnasium as gym
from rlfoundry.envs import register_optional_families
register_optional_families()
assert "gymnasium_robotics" not in sys.modules and "{POINT}" not in gym.registry
register_optional_families("{POINT}")
assert "gymnasium_robotics" in sys.modules and "{POINT}" in gym.registry
print("on demand ok")
"""


def test_the_family_loads_when_one_of_its_ids_is_asked_for():
    """In a fresh process: importing rlfoundry does not import gymnasium_robotics (nor print its Adroit notice)."""
    proc = subprocess.run([sys.executable, "-c", ON_DEMAND], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy())
    assert proc.returncode == 0 and "on demand ok" in proc.stdout, proc.stdout + proc.stderr
    assert "Adroit" not in proc.stderr
    for env_id in (POINT, "PointMaze_LargeDense-v3", "AntMaze_UMaze-v5"):
        family = family_of(env_id)
        assert family is not None and family.module == "rlfoundry.envs.robotics" and family.extra == "robotics"


def test_make_gives_float32_vectors_in_sorted_key_order():
    """{observation: [x, y, vx, vy], achieved_goal: [x, y], desired_goal} as [achieved_goal, desired_goal,
    observation]: 2 + 2 + 4 floats."""
    envs = make(POINT, num_envs=2)
    try:
        assert envs.single_observation_space == spaces.Box(-np.inf, np.inf, (8,), np.float32)
        assert envs.single_action_space == spaces.Box(-1.0, 1.0, (2,), np.float32)
        obs, _ = envs.reset(seed=0)
        envs.action_space.seed(0)
        for _ in range(3):
            obs, rewards, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert obs.shape == (2, 8) and obs.dtype == np.float32
        mazes = [sub.unwrapped for sub in envs.unwrapped.envs]
        np.testing.assert_allclose(obs[:, 2:4], [maze.goal for maze in mazes], rtol=1e-6)
        np.testing.assert_allclose(obs[:, 4:], [maze.point_env.data.qpos.tolist() + maze.point_env.data.qvel.tolist()
                                                for maze in mazes], rtol=1e-6)
        np.testing.assert_array_equal(obs[:, :2], obs[:, 4:6])  # the achieved goal is the point's position
        assert info["success"].dtype == bool and info["success"].shape == (2,)
        assert np.array_equal(rewards, info["success"].astype(np.float64))  # the sparse id: 1 within 0.45 of the goal
    finally:
        envs.close()


@pytest.mark.parametrize(("env_id", "size", "actions"), [
    ("PointMaze_MediumDense-v3", 2 + 2 + 4, 2),
    ("AntMaze_UMaze-v4", 2 + 2 + 27, 8),
    ("AntMaze_UMaze-v5", 2 + 2 + 105, 8),  # Gymnasium's Ant-v5 observation, its contact forces included
])
def test_spaces_of_the_mazes(env_id, size, actions):
    observation_space, action_space = probe_spaces(env_id)
    assert observation_space.shape == (size,) and observation_space.dtype == np.float32
    assert isinstance(action_space, spaces.Box) and action_space.shape == (actions,)


def test_the_maze_file_is_removed_once_the_env_is_built():
    env = make_single(EnvConfig(id=POINT))
    try:
        path = env.unwrapped.tmp_xml_file_path
        assert path.endswith(".xml") and not os.path.exists(path)
        env.reset(seed=0)  # the model was read before: the env runs without its file
        env.step(env.action_space.sample())
    finally:
        env.close()


@pytest.mark.parametrize(("env_id", "nearest"), [
    ("PointMaze_UMaze-v2", "PointMaze_UMaze-v3"),
    ("PointMaze_Umaze_Dense-v3", "PointMaze_UMazeDense-v3"),
    ("AntMaze_Medum-v5", "AntMaze_Medium-v5"),
])
def test_an_unknown_maze_id_names_the_nearest(env_id, nearest):
    with pytest.raises(ConfigError, match=rf"env.id = '{env_id}': not a Gymnasium-Robotics maze id; did you mean "
                                          rf"[^?]*\b{nearest}\b"):
        check_env_id(env_id)
