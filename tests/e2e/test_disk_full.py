"""A full disk (ENOSPC) while a checkpoint, a metrics row or the report is written: the run stops with one
clear line naming the file, leaves no temporary files, keeps its last checkpoint loadable, and resumes once
there is space again."""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli import app
from rlfoundry.records import rundir
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run.trainer import RunFailed
from rlfoundry.sinks import csv as csv_sink

SMALL = ["train.total_timesteps=3072", "env.num_envs=4", "algo.num_steps=128", "checkpoint.every_steps=1024",
         "eval.every_steps=0", "eval.at_end=false"]


class FullDisk:
    """`open` for the modules that write a run's files: once `after` write calls to files whose name contains
    `name` have gone through, every further one fails as a full disk does (OSError ENOSPC, no file name)."""

    def __init__(self, name: str, after: int):
        self.name, self.after, self.writes = name, after, 0

    def open(self, file, mode="r", *args, **kwargs):
        handle = builtins.open(file, mode, *args, **kwargs)
        path = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else str(file)
        if any(m in mode for m in "wax") and self.name in Path(path).name:
            return _Filling(handle, self)
        return handle

    def install(self, monkeypatch) -> None:
        for module in (ckpt, rundir, csv_sink):
            monkeypatch.setattr(module, "open", self.open, raising=False)


class _Filling:
    def __init__(self, handle, disk: FullDisk):
        self._handle, self._disk = handle, disk

    def write(self, data):
        self._disk.writes += 1
        if self._disk.writes > self._disk.after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._handle.write(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def _status(run_dir: Path) -> str:
    return json.loads((run_dir / "summary.json").read_text())["status"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="the fake disk finds file names in /proc/self/fd")
def test_disk_full_in_a_checkpoint_exits_1_cleans_up_and_resumes(tmp_path, quiet, monkeypatch):
    FullDisk("agent.pt", after=1).install(monkeypatch)  # the second checkpoint's agent.pt does not fit
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "CartPole-v1:ppo", "--run-dir", str(run_dir), *quiet, *SMALL])
    assert result.exit_code == 1, result.output
    assert f"disk full while writing {run_dir / 'checkpoints' / ckpt.step_dir_name(2048) / 'agent.pt'}" in result.output
    assert "checkpoint of step 1,024 is intact" in result.output and "Traceback" not in result.output
    root = run_dir / "checkpoints"
    assert not list(root.glob(".tmp-*")), "the failed save left its temporary directory"
    assert sorted(p.name for p in root.glob("step_*")) == [ckpt.step_dir_name(1024)]
    assert ckpt.load(ckpt.resolve(run_dir, "last")).state["step"] == 1024
    assert _status(run_dir) == "failed"

    monkeypatch.undo()  # space again
    _, summary = rlfoundry.train(resume=run_dir)
    assert summary["status"] == "finished" and summary["total_steps"] == 3072
    assert ckpt.last_step(root) == 3072


def test_disk_full_in_a_metrics_row_names_metrics_csv(tmp_path, quiet, monkeypatch):
    FullDisk("metrics.csv", after=3).install(monkeypatch)  # the header and two rows fit
    with pytest.raises(RunFailed, match=r"disk full while writing \S*metrics\.csv; the checkpoint of step 1,024"):
        rlfoundry.train("CartPole-v1:ppo", [*quiet, *SMALL], tmp_path / "run")
    assert _status(tmp_path / "run") == "failed"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="the fake disk finds file names in /proc/self/fd")
def test_disk_full_in_the_report_fails_a_finished_run_and_says_how_to_redo_it(tmp_path, quiet, monkeypatch):
    FullDisk("report.md", after=0).install(monkeypatch)
    run_dir = tmp_path / "run"
    with pytest.raises(RunFailed, match=r"disk full while writing \S*report\.md\S*; training finished"):
        rlfoundry.train("CartPole-v1:ppo", [*quiet, *SMALL], run_dir)
    assert _status(run_dir) == "finished"  # trained to the end: only the report is missing
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".report.md")]
