"""Callbacks (`rlfoundry.run.hooks`): a user's callback sees every row in the order of the events, an early stop
ends a short CartPole PPO run as a stop signal does (a checkpoint, status `stopped`) and the run resumes to the
same rows as an uninterrupted one; the documentation's example runs."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

import rlfoundry
from rlfoundry.config.errors import ConfigError
from rlfoundry.run.checkpoint import last_step
from rlfoundry.run.monitors import ALERTS
from tests.conftest import is_timing

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "early_stop.py"
# 8 envs x 32 steps: 256 steps an iteration
SHORT = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.torch_threads=1",
         "eval.episodes=2", "eval.stop_at_threshold=false", "checkpoint.every_steps=1024"]


class Recorder(rlfoundry.Callback):
    """Every event, and a copy of every row."""

    def __init__(self):
        self.events: list[str] = []
        self.rows: list[dict] = []

    def on_start(self, ctx):
        self.events.append(f"start {ctx.step}")

    def around_iteration(self, ctx):
        self.events.append("iterate")
        return super().around_iteration(ctx)

    def on_result(self, ctx, result):
        self.events.append(f"result {result.steps}")
        return result

    def on_iteration(self, ctx, row):
        self.events.append(f"row {ctx.step}")
        self.rows.append(dict(row))

    def on_end(self, ctx):
        self.events.append(f"end {ctx.step} {ctx.ending.status}")


class StopAt(rlfoundry.Callback):
    def __init__(self, step: int):
        self.step = step

    def on_iteration(self, ctx, row):
        if ctx.step >= self.step:
            ctx.stop(f"step {ctx.step} reached")


def train(tmp_path, name, overrides, **kwargs):
    return rlfoundry.train("CartPole-v1:ppo", [*SHORT, *overrides], tmp_path / name,
                           console=Console(file=StringIO(), width=200), **kwargs)


def csv_rows(run_dir: Path, timing: bool = True) -> list[dict]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [{k: v for k, v in row.items() if timing or not is_timing(k)} for row in csv.DictReader(f)]


def test_a_callback_sees_every_row_after_its_columns_and_the_events_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the runs registry (logging.runs_root)
    recorder = Recorder()
    run_dir, summary = train(tmp_path, "run", ["train.total_timesteps=1536", "eval.every_steps=768"],
                             callbacks=[recorder])
    assert summary["status"] == "finished"
    per_iteration = [f"iterate,result 256,row {step}" for step in range(256, 1537, 256)]
    assert recorder.events == ["start 0", *",".join(per_iteration).split(","), "end 1536 finished"]
    written = csv_rows(run_dir)
    assert [int(row["global_step"]) for row in written] == list(range(256, 1537, 256))
    for seen, row in zip(recorder.rows, written, strict=True):  # the rows the sinks wrote, all their columns
        assert {key for key, value in row.items() if value != ""} - {"global_step"} <= set(seen) <= set(row)
        assert ALERTS in seen
        assert int(row["train/episodes"]) == seen["train/episodes"]
    evaluated = [row["eval/return_mean"] for row in recorder.rows if "eval/return_mean" in row]
    assert evaluated == [float(row["eval/return_mean"]) for row in written if row["eval/return_mean"]]
    assert len(evaluated) == 2  # steps 768 and 1536


def test_an_early_stop_saves_a_checkpoint_says_why_and_resumes_as_if_never_stopped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    budget = ["train.total_timesteps=2048", "eval.every_steps=1024"]
    run_dir, stopped = train(tmp_path, "cut", budget, callbacks=[StopAt(700)])
    assert (stopped["status"], stopped["total_steps"]) == ("stopped", 768)
    assert last_step(run_dir / "checkpoints") == 768
    log = (run_dir / "run.log").read_text()
    assert re.search(r"INFO checkpoint at step 768: .*\n.* INFO stopped at step 768 by a callback: step 768 "
                     r"reached; checkpoint saved", log), log
    _, resumed = rlfoundry.train(resume=run_dir, console=Console(file=StringIO()))
    assert (resumed["status"], resumed["total_steps"]) == ("finished", 2048)
    whole, _ = train(tmp_path, "whole", budget)
    assert csv_rows(run_dir, timing=False) == csv_rows(whole, timing=False)


def test_a_stop_asked_at_the_last_iteration_leaves_the_run_finished(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, summary = train(tmp_path, "run", ["train.total_timesteps=512", "eval.every_steps=0"], callbacks=[StopAt(512)])
    assert summary["status"] == "finished"


def test_a_callback_must_be_a_callback(tmp_path):
    with pytest.raises(ConfigError, match="is not a rlfoundry.Callback"):
        rlfoundry.train("CartPole-v1:ppo", SHORT, tmp_path / "run", callbacks=[lambda ctx, row: None])
    assert not (tmp_path / "run").exists()


def test_the_documented_example_is_the_script_and_it_runs(tmp_path):
    page = (ROOT / "docs" / "guide" / "getting-started.md").read_text()
    block = re.search(r"^## Callbacks\n.*?```python\n(.*?)```", page, re.S | re.M).group(1)
    assert block.strip() in EXAMPLE.read_text()  # Getting started shows the script's callback and call
    done = subprocess.run([sys.executable, str(EXAMPLE), "25", *SHORT, "train.total_timesteps=8192",
                           "eval.every_steps=0"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.match(r"stopped at step [\d,]+: ", done.stdout), done.stdout
    run_dir = Path(tmp_path, done.stdout.split(": ")[-1].strip())
    assert "by a callback: train/return_mean " in (run_dir / "run.log").read_text()


def test_a_run_solved_before_a_resume_ends_on_its_next_row_without_an_evaluation():
    """A stop signal on the iteration a run was solved at leaves it `stopped` and solved; resumed with
    eval.stop_at_threshold, its next row (no evaluation in it) ends it, and the line names the solving evaluation."""
    from types import SimpleNamespace

    from rlfoundry.run.hooks import Solved

    endings = []
    ctx = SimpleNamespace(ending=None, cfg=SimpleNamespace(threshold=475.0),
                          summary={"solved_at_step": 8192, "best_eval_return": 500.0},
                          end=lambda status, line: endings.append((status, line)))
    Solved().on_iteration(ctx, {"train/return_mean": 480.0})  # a row without eval/ columns
    assert endings == [("finished", "solved: evaluation return 500.00 ≥ 475.00 at step 8192")]
