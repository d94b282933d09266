"""Exact resume on a DeepMind Control id: PPO on cartpole-swingup killed with SIGKILL mid-run and resumed writes the
same metrics.csv rows, timing columns aside, as the same run never interrupted. The envs' state (MuJoCo's
integration state, the task's RandomState, dm_control's step counter, the action repeat's episode position) travels
in the checkpoint; at action repeat 8 an episode is 125 agent steps, so episodes end and restart on both sides of
the kill."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.conftest import output_of
from tests.e2e.test_resume import COMMON, cli, last_step, rows

pytest.importorskip("rlfoundry.envs.dm_control", exc_type=ImportError)
pytestmark = pytest.mark.xdist_group("processes")

SPEC, TOTAL, KILL_AT = "dm_control/cartpole-swingup-v0:ppo", 2_048, 700
OVERRIDES = ["env.num_envs=2", "env.vectorization=sync", "env.action_repeat=8", "algo.num_steps=64",
             "algo.minibatch_size=64", "algo.update_epochs=2", "checkpoint.every_steps=256", "eval.every_steps=1024",
             "eval.episodes=1"]


def test_killed_and_resumed_run_equals_uninterrupted(tmp_path):
    args = [SPEC, "--total-timesteps", str(TOTAL), *COMMON, *OVERRIDES]
    whole = cli("train", *args, "--run-dir", str(tmp_path / "whole"), cwd=tmp_path)
    cut = cli("train", *args, "--run-dir", str(tmp_path / "cut"), cwd=tmp_path)
    metrics, saved = tmp_path / "cut" / "metrics.csv", tmp_path / "cut" / "checkpoints" / "last.json"
    deadline = time.time() + 120
    while last_step(metrics) < KILL_AT or not saved.exists():
        assert cut.poll() is None and time.time() < deadline, output_of(cut)
        time.sleep(0.05)
    cut.send_signal(signal.SIGKILL)
    cut.communicate(timeout=60)
    assert json.loads((tmp_path / "cut" / "summary.json").read_text())["total_steps"] < TOTAL

    resumed = cli("train", "--resume", str(tmp_path / "cut"), cwd=tmp_path)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert whole.wait(timeout=300) == 0, whole.communicate()[1]

    expected, got = rows(tmp_path / "whole" / "metrics.csv"), rows(metrics)
    assert len(got) == len(expected) and got[-1]["global_step"] == str(TOTAL)
    assert any(row.get("train/episode_return") for row in expected)  # episodes ended within the run
    for want, have in zip(expected, got):
        assert have == want, f"first difference at global_step {want['global_step']}"
    log = (tmp_path / "cut" / "run.log").read_text()
    assert "resumed from" in log and "not captured" not in log
