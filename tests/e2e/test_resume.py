"""Exact resume: a run killed with SIGKILL (or stopped by SIGTERM) and resumed from its last checkpoint
writes the same metrics.csv rows, timing columns aside, as the same run never interrupted — for PPO on
CartPole and on MuJoCo's Hopper, and for DQN, SAC, DreamerV3 and PlaNet, whose replay buffers travel in the checkpoint's .npz."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import is_timing, output_of

CASES = {
    # spec, total steps, overrides, kill once metrics.csv has a row at or past this step
    "cartpole": ("CartPole-v1:ppo", 24_576, ["checkpoint.every_steps=2048", "eval.every_steps=4096"], 9_000),
    "sac": ("Pendulum-v1:sac", 1_200, ["algo.learning_starts=200", "checkpoint.every_steps=200", "eval.every_steps=400",
                                       "eval.episodes=1"], 500),
    # TD3 (small networks): the delay counter, both target networks and the replay travel in the checkpoint
    "td3": ("Pendulum-v1:td3", 1_200, ["algo.learning_starts=200", "network.hidden_sizes=[32,32]",
                                       "checkpoint.every_steps=200", "eval.every_steps=400", "eval.episodes=1"], 500),
    "dqn": ("CartPole-v1:dqn", 6_144, ["algo.train_freq=64", "algo.gradient_steps=16", "checkpoint.every_steps=1024",
                                       "eval.every_steps=2048", "eval.episodes=2"], 2_200),
    "hopper": ("Hopper-v5:ppo", 6_144, ["env.num_envs=2", "env.vectorization=sync", "algo.num_steps=256",
                                        "algo.minibatch_size=128", "algo.update_epochs=2", "checkpoint.every_steps=1024",
                                        "eval.every_steps=2048", "eval.episodes=2", "env.max_episode_steps=300"], 2_600),
    # DreamerV3 (a tiny model): the sequence replay with its stored latents, the acting state, the slow critic, the
    # return scale and the update ratio's carried fraction travel in the checkpoint
    "dreamer": ("MountainCarContinuous-v0:dreamer", 480, [
        "algo.model.rssm.deter=32", "algo.model.rssm.hidden=16", "algo.model.rssm.blocks=4", "algo.model.units=32",
        "algo.units=32", "algo.batch_size=4", "algo.batch_length=8", "algo.train_ratio=16", "algo.collect_steps=8",
        "checkpoint.every_steps=64", "eval.every_steps=160", "eval.episodes=1", "env.max_episode_steps=100"], 200),
    # PlaNet (a tiny model and planner): its replay, acting state and owed updates travel in the checkpoint
    "planet": ("rlfoundry/Reach-v0:planet", 400, [
        "algo.model.rssm.deter=32", "algo.model.rssm.hidden=32", "algo.model.rssm.stoch=8", "algo.model.units=32",
        "algo.batch_size=4", "algo.batch_length=8", "algo.updates_per_episode=5", "algo.seed_episodes=2",
        "algo.candidates=50", "algo.top_k=5", "algo.iterations=3", "algo.plan_horizon=5", "algo.collect_steps=8",
        "checkpoint.every_steps=48", "eval.every_steps=160", "eval.episodes=1"], 150),
    # one run across two processes (--nproc 2), normalisation statistics merged over the ranks every iteration
    "cartpole-2ranks": ("CartPole-v1:ppo", 24_576, ["--nproc", "2", "env.normalize_obs=true", "env.normalize_reward=true",
                                                    "checkpoint.every_steps=2048", "eval.every_steps=4096"], 9_000),
}
# Many processes at once: under pytest-xdist these tests take turns on one worker (with the async SAC ones).
pytestmark = pytest.mark.xdist_group("processes")

COMMON = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "eval.stop_at_threshold=false"]


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    # Two runs train at once here (whole and cut): they share the cores (this test worker's share, under xdist),
    # as `auto` threads are told this way.
    shared = 2 * int(os.environ.get("RLFOUNDRY_CONCURRENT_RUNS", "1"))
    env = {**os.environ, "NO_COLOR": "1", "RLFOUNDRY_CONCURRENT_RUNS": str(shared)}
    return subprocess.Popen([sys.executable, "-m", "rlfoundry.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [{k: v for k, v in row.items() if not is_timing(k)} for row in csv.DictReader(f)]


def last_step(path: Path) -> int:
    try:
        lines = path.read_text().strip().splitlines()
        return int(lines[-1].split(",")[0]) if len(lines) > 1 else 0
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("case, stop", [("cartpole", "SIGKILL"), ("cartpole", "SIGTERM"), ("hopper", "SIGKILL"),
                                        ("dm_control", "SIGKILL"), ("dreamer", "SIGKILL"), ("planet", "SIGKILL"),
                                        ("dqn", "SIGKILL"), ("sac", "SIGKILL"), ("td3", "SIGKILL"),
                                        ("cartpole-2ranks", "SIGKILL"),
                                        ("cartpole-2ranks", "SIGTERM")])
def test_resumed_run_equals_uninterrupted(tmp_path, case, stop):
    spec, total, overrides, kill_at = CASES[case]
    args = [spec, "--total-timesteps", str(total), *COMMON, *overrides]
    whole = cli("train", *args, "--run-dir", str(tmp_path / "whole"), cwd=tmp_path)
    cut = cli("train", *args, "--run-dir", str(tmp_path / "cut"), cwd=tmp_path)
    metrics = tmp_path / "cut" / "metrics.csv"
    deadline = time.time() + 120
    saved = tmp_path / "cut" / "checkpoints" / "last.json"
    while last_step(metrics) < kill_at or not saved.exists():  # killed after a row and with a checkpoint to resume
        assert cut.poll() is None and time.time() < deadline, output_of(cut)
        time.sleep(0.05)
    cut.send_signal(getattr(signal, stop))
    cut.communicate(timeout=60)
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["status"] == ("stopped" if stop == "SIGTERM" else "running")  # kill -9 leaves it running
    assert summary["total_steps"] < total

    resumed = cli("train", "--resume", str(tmp_path / "cut"), cwd=tmp_path)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert whole.wait(timeout=300) == 0, whole.communicate()[1]

    expected, got = rows(tmp_path / "whole" / "metrics.csv"), rows(metrics)
    assert len(got) == len(expected) and got[-1]["global_step"] == str(total)
    for want, have in zip(expected, got):
        assert have == want, f"first difference at global_step {want['global_step']}"
    assert json.loads((tmp_path / "cut" / "summary.json").read_text())["status"] == "finished"
    log = (tmp_path / "cut" / "run.log").read_text()
    assert "resumed from" in log
    if case != "simple":  # (SimPLe restarts its real env every epoch from a seed it draws: nothing to capture)
        assert "not captured" not in log  # the envs continued, not reset


def test_a_signal_during_an_evaluation_ends_it_and_the_resumed_run_evaluates_that_step_again(tmp_path):
    """DreamerV3's evaluation samples from torch's global generator: the checkpoint taken when a SIGTERM cuts the
    evaluation at step 160 short holds the random state from before it, so the resumed run repeats it exactly."""
    spec, _, overrides, _ = CASES["dreamer"]
    args = [spec, "--total-timesteps", "320", *COMMON, *overrides, "eval.episodes=40"]  # 4,000 steps per evaluation
    whole = cli("train", *args, "--run-dir", str(tmp_path / "whole"), cwd=tmp_path)
    cut = cli("train", *args, "--run-dir", str(tmp_path / "cut"), cwd=tmp_path)
    log = tmp_path / "cut" / "run.log"
    deadline = time.time() + 120
    while "evaluating at step 160" not in (log.read_text() if log.exists() else ""):
        assert cut.poll() is None and time.time() < deadline, output_of(cut)
        time.sleep(0.05)
    cut.send_signal(signal.SIGTERM)
    cut.communicate(timeout=60)
    assert "during the evaluation at step 160" in log.read_text()
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert (summary["status"], summary["total_steps"], summary["eval_return_mean"]) == ("stopped", 160, None)
    assert last_step(tmp_path / "cut" / "metrics.csv") < 160  # the cut row waits in the checkpoint

    resumed = cli("train", "--resume", str(tmp_path / "cut"), cwd=tmp_path)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert whole.wait(timeout=300) == 0, whole.communicate()[1]
    expected, got = rows(tmp_path / "whole" / "metrics.csv"), rows(tmp_path / "cut" / "metrics.csv")
    assert [row["global_step"] for row in got] == [row["global_step"] for row in expected]
    assert got == expected
    assert "eval at step 160" in log.read_text().split("resumed from")[1]


# DeepMind Control: MuJoCo's integration state, the task's RandomState, dm_control's step counter and the action
# repeat's position travel in the checkpoint; at action repeat 8 an episode is 125 agent steps, so episodes end and
# restart on both sides of the kill.
CASES["dm_control"] = ("dm_control/cartpole-swingup-v0:ppo", 2_048, [
    "env.num_envs=2", "env.vectorization=sync", "env.action_repeat=8", "algo.num_steps=64", "algo.minibatch_size=64",
    "algo.update_epochs=2", "checkpoint.every_steps=256", "eval.every_steps=1024", "eval.episodes=1"], 700)

# ALE on the single backend (env.atari.backend=single): emulators, sticky actions and frame stacks are captured.
# Short games (max_episode_frames) so that games end and restart within the run and the final evaluation is quick.
CASES["breakout"] = ("ALE/Breakout-v5:ppo", 640, ["env.atari.backend=single", "env.num_envs=2", "algo.num_steps=32",
                                                  "algo.minibatch_size=32", "checkpoint.every_steps=64",
                                                  "eval.every_steps=0", "eval.episodes=1",
                                                  "env.atari.max_episode_frames=4000"], 256)


def test_resumed_atari_run_equals_uninterrupted(tmp_path):
    test_resumed_run_equals_uninterrupted(tmp_path, "breakout", "SIGKILL")


# SimPLe (the simple agent) at its tiny size: 600 random steps and two epochs of 300 real steps on Breakout, killed
# in the second epoch. A checkpoint holds the world model, both Adafactor states, the policy, the frame replay, the
# simulator's random streams and the epoch counters; every epoch restarts the real env from a seed the agent draws.
CASES["simple"] = ("ALE/Breakout-v5:simple-tiny", 1_200, ["eval.every_steps=600", "train.torch_threads=1"], 900)


def test_resumed_simple_run_equals_uninterrupted(tmp_path):
    test_resumed_run_equals_uninterrupted(tmp_path, "simple", "SIGKILL")
    whole = tmp_path / "whole"
    for name in ("config.yaml", "metrics.csv", "summary.json", "run.log", "report.md", "curves.png"):
        assert (whole / name).is_file(), name
    assert json.loads((whole / "summary.json").read_text())["eval_return_mean"] is not None
    header = (whole / "metrics.csv").read_text().splitlines()[0].split(",")
    for column in ("loss/frame", "loss/value", "loss/bits", "loss/reward_head", "diag/pixel_accuracy",
                   "diag/sim_return_mean", "loss/policy", "time/world_model", "time/policy"):
        assert column in header, column
