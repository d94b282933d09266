"""A run directory has one writer: the training process holds a lock on it from its first write to its end, so a
second `train --resume` while the first still writes is refused with one line (exit 2 from the CLI); the lock goes
with the process (kill -9 leaves none), and a run refused as bad input leaves no directory behind."""

import json

import pytest

import rlfoundry
from rlfoundry.config.errors import ConfigError
from rlfoundry.records.rundir import LOCK, held, run_lock

TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=512",
        "eval.every_steps=256", "eval.episodes=1"]


def test_a_held_directory_refuses_a_second_holder_until_released(tmp_path):
    with held(tmp_path, "busy"):
        with pytest.raises(ConfigError, match="^busy$"), held(tmp_path, "busy"):
            pass
    with held(tmp_path, "busy"):  # released: free again
        pass
    assert (tmp_path / LOCK).is_file()  # a directory that holds other things keeps its lock file


def test_a_resume_beside_a_process_still_training_is_refused(tmp_path):
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo", [*TINY, f"logging.runs_root={tmp_path}"], tmp_path / "run")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "stopped"}))  # resumable
    before = (run_dir / "metrics.csv").read_text()
    with run_lock(run_dir):  # another process training in it, as far as the lock tells
        with pytest.raises(ConfigError, match="another process is training in this run directory"):
            rlfoundry.train(resume=run_dir)
        assert (run_dir / "metrics.csv").read_text() == before  # untouched
    path, resumed = rlfoundry.train(resume=run_dir)  # the lock released: the resume goes ahead
    assert path == run_dir and resumed["status"] == "finished"


def test_a_new_run_refused_as_bad_input_leaves_no_directory(tmp_path):
    root = tmp_path / "runs"
    with pytest.raises(ConfigError, match="planet"):
        rlfoundry.train("CartPole-v1:planet", [*TINY, f"logging.runs_root={root}"])
    assert not root.exists()
