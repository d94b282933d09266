"""Asynchronous SAC (algo.async_actors): actor processes step the envs while the learner trains.

It learns Pendulum-v1 (evaluation return ≥ −250 within 15k steps, the synchronous test's bound; measured:
solved at 4k steps, 35 s on 2 cores), and its actor processes are gone after the run, after a failure in the learner,
after an actor dies, and after a SIGTERM stop; a stopped async run resumes with its weights, optimizers and
replay, its envs started afresh (run.log says so, as for other envs whose state cannot be captured).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlfoundry
from rlfoundry.algos.sac import SAC
from rlfoundry.run.trainer import RunFailed
from tests.conftest import output_of

# Actor processes: under pytest-xdist these tests take turns on one worker (with the resume ones).
pytestmark = pytest.mark.xdist_group("processes")

# two actors of one env each, short and small: the process handling is what these runs test
SHORT = ["env.num_envs=2", "algo.async_actors=2", "algo.learning_starts=64", "algo.batch_size=32",
         "network.hidden_sizes=[32,32]", "train.total_timesteps=400", "eval.every_steps=0", "eval.episodes=1"]


@pytest.mark.slow
def test_async_sac_learns_pendulum(tmp_path, quiet):
    _, summary = rlfoundry.train(
        "Pendulum-v1:sac", [*quiet, "algo.async_actors=1", "train.total_timesteps=15000"], tmp_path / "run"
    )
    assert summary["best_eval_return"] >= -250, summary
    assert multiprocessing.active_children() == []


def test_actor_processes_end_with_the_run(tmp_path, quiet):
    _, summary = rlfoundry.train("Pendulum-v1:sac", [*quiet, *SHORT], tmp_path / "run")
    assert summary["status"] == "finished" and summary["total_steps"] >= 400
    assert summary["train_return_mean"] is not None  # episode statistics come back from the actors
    assert multiprocessing.active_children() == []


def test_actor_processes_end_when_the_learner_fails(tmp_path, quiet, monkeypatch):
    def fail(self):
        raise RuntimeError("boom in the learner")

    monkeypatch.setattr(SAC, "_update", fail)
    with pytest.raises(RunFailed, match="boom in the learner"):
        rlfoundry.train("Pendulum-v1:sac", [*quiet, *SHORT], tmp_path / "run")
    assert multiprocessing.active_children() == []


def test_a_dead_actor_fails_the_run(tmp_path, quiet, monkeypatch):
    update = SAC.update

    def kill_an_actor_first(self, progress):
        if self.gradient_steps_done == 0:
            os.kill(self.pool.processes[1].pid, signal.SIGKILL)
        return update(self, progress)

    monkeypatch.setattr(SAC, "update", kill_an_actor_first)
    with pytest.raises(RunFailed, match="actor process 1 exited with code -9"):
        rlfoundry.train("Pendulum-v1:sac", [*quiet, *SHORT, "train.total_timesteps=5000"], tmp_path / "run")
    assert multiprocessing.active_children() == []


def actor_pids(parent: int) -> list[int]:
    """The spawned actor processes of `parent` (not its multiprocessing resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        return "Z" not in (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


@pytest.mark.slow
def test_sigterm_stops_an_async_run_which_then_resumes(tmp_path):
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "rlfoundry.cli", "train"]
    args = ["Pendulum-v1:sac", "--run-dir", str(run), "--total-timesteps", "1500", "algo.async_actors=1",
            "algo.learning_starts=200", "network.hidden_sizes=[64,64]", "checkpoint.every_steps=200",
            "eval.every_steps=0", "eval.episodes=1", "eval.stop_at_threshold=false", "logging.progress=false",
            "logging.tensorboard=false", "train.device=cpu", "logging.every_steps=0"]  # a row per iteration: read below
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([*cli, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics, deadline, actors = run / "metrics.csv", time.time() + 120, []
    while True:
        assert proc.poll() is None and time.time() < deadline, output_of(proc)
        actors = actors or actor_pids(proc.pid)
        if metrics.exists() and len(metrics.read_text().splitlines()) > 400:
            break
        time.sleep(0.1)
    assert len(actors) == 1
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err  # the CLI's status for a run stopped by a signal
    assert json.loads((run / "summary.json").read_text())["status"] == "stopped"
    assert not any(alive(pid) for pid in actors)

    resumed = subprocess.run([*cli, "--resume", str(run)], env=env, capture_output=True, text=True, timeout=300,
                             check=False)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["total_steps"] >= 1500
    log = (run / "run.log").read_text()
    assert "resumed from" in log and "the envs live in the async actor processes" in log
