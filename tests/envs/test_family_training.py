"""Each optional env family trains a few PPO iterations end to end, through the same trainer as
`rlfoundry presets --smoke` (`rlfoundry.run.smoke`), with the generic defaults its spaces call for, and records the
vectorization the family needs; the trained policy then plays in its single env (`load_policy(run).make_env()`, the
env `rlfoundry play` uses), Brax's and Retro's included."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from rlfoundry import load_policy
from rlfoundry.run.smoke import smoke
from rlfoundry.trained.play import play

CASES = {
    # id: (overrides, the vectorization the run must record)
    # one torch thread next to env worker processes: with two on 2 cores the run was 10x slower
    "VizdoomBasic-v1": (["env.vizdoom.img_size=42", "env.max_episode_steps=20", "train.torch_threads=1"], None),
    "retro/Airstriker-Genesis-v0": (["env.retro.img_size=42", "env.max_episode_steps=20", "train.torch_threads=1"],
                                    "async"),  # one emulator per process: even `auto` uses a worker
    "dm_control/pendulum-swingup-v0": (["env.action_repeat=4"], None),
    "brax/fast-v0": (["eval.num_envs=2"], "vector_entry_point"),
    # MultiDiscrete actions flattened to one Discrete(64), a one-hot observation with the previous action
    "popgym-BattleshipEasy-v0": ([], None),
    # a Dict observation (the ant's state, where it is, where to go) flattened to one vector
    "AntMaze_UMaze-v5": (["env.max_episode_steps=20"], None),
}


@pytest.mark.parametrize("env_id", CASES)
def test_a_few_ppo_iterations(tmp_path, monkeypatch, quiet, env_id):
    monkeypatch.chdir(tmp_path)  # vizdoom writes _vizdoom.ini into the working directory
    overrides, vectorization = CASES[env_id]
    result = smoke(env_id, "ppo", tmp_path / "run", [*quiet, *overrides])
    assert result.ok, result.detail
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["total_steps"] == 128 and summary["eval_return_mean"] is not None
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    if vectorization:
        assert config["provenance"]["vectorization"] == vectorization
    policy = load_policy(tmp_path / "run")
    env = policy.make_env()
    try:
        assert env.observation_space.shape == policy.spec.observation_space.shape
    finally:
        env.close()  # Retro: one emulator per process, and play opens its own
    [episode] = play(policy, episodes=1, render="none", seed=0, max_steps=5)
    assert episode["length"] >= 1 and np.isfinite(episode["return"])
