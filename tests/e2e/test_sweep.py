"""`rlfoundry sweep` end to end: a grid picks the good setting, a failing run fails only its trial, best.yaml repeats
the best run row for row; a sweep killed with SIGKILL continues without losing or repeating a trial; a pruner stops
a bad trial early."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlfoundry.records.registry import Registry
from tests.conftest import is_timing, output_of

# Each test starts several training processes: under pytest-xdist they take turns on one worker.
pytestmark = pytest.mark.xdist_group("processes")

SMALL = ["train.total_timesteps=4096", "eval.every_steps=2048", "eval.episodes=3", "logging.tensorboard=false",
         "train.device=cpu", "eval.stop_at_threshold=false"]


def write_sweep(tmp_path: Path, lrs: str, *extra: str, overrides: list[str] = SMALL) -> Path:
    """A grid over algo.lr on a short CartPole PPO; 1e-12 never learns (greedy return about 9), 3e-3 reaches
    about 300 in 4096 steps."""
    path = tmp_path / "grid.yaml"
    path.write_text("\n".join(["base: CartPole-v1:ppo", f"overrides: {json.dumps(overrides)}", "method: grid",
                               *extra, "parameters:", f"  algo.lr: {{choice: {lrs}}}", ""]))
    return path


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlfoundry.cli", *args], cwd=cwd,
                            env={**os.environ, "NO_COLOR": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(process: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout + stderr


def trials(out: Path) -> list:
    """The study's trials, read from its journal as any other process may while the sweep runs."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(out / "study.journal")))
    return optuna.load_study(study_name="sweep", storage=storage).get_trials()


def summary(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{key: value for key, value in row.items() if not is_timing(key)} for row in csv.DictReader(f)]


def digest(run_dir: Path) -> str:
    """The finished run's files that a redo would rewrite."""
    files = (run_dir / name for name in ("summary.json", "metrics.csv"))
    return hashlib.sha256(b"".join(path.read_bytes() for path in files)).hexdigest()


def test_a_grid_picks_the_good_setting_fails_only_the_failing_trial_and_best_yaml_repeats_its_run(tmp_path):
    out = tmp_path / "grid"
    code, text = finish(cli("sweep", str(write_sweep(tmp_path, "[1.0e-12, 3.0e-3, 1.0e+30]")), "--workers", "2",
                            "--out", str(out), cwd=tmp_path))
    assert code == 0, text
    by_lr = {trial.params["algo.lr"]: trial for trial in trials(out)}
    assert by_lr[3e-3].state.name == by_lr[1e-12].state.name == "COMPLETE"
    assert by_lr[3e-3].value > 100 > by_lr[1e-12].value
    assert by_lr[1e30].state.name == "FAIL" and "nan" in by_lr[1e30].user_attrs["error"].lower()  # the sweep went on
    best = by_lr[3e-3].number
    report = (out / "sweep.md").read_text()
    assert f"## Best: trial {best}" in report and (out / "history.png").is_file() and (out / "parallel.png").is_file()
    # every run is an ordinary run in the registry, with the sweep's name as its group
    records = Registry(tmp_path / "runs").query({"group": "grid"})
    assert sorted(record.status for record in records) == ["failed", "finished", "finished"]

    code, text = finish(cli("train", str(out / "best.yaml"), "--run-dir", str(tmp_path / "again"), cwd=tmp_path))
    assert code == 0, text
    assert rows(tmp_path / "again") == rows(out / "trials" / str(best) / "s1")


def test_a_killed_sweep_continues_without_losing_or_repeating_a_trial(tmp_path):
    out = tmp_path / "grid"
    overrides = [*SMALL, "train.total_timesteps=8192", "checkpoint.every_steps=2048"]
    args = ("sweep", str(write_sweep(tmp_path, "[1.0e-3, 3.0e-3]", overrides=overrides)), "--workers", "1",
            "--out", str(out))
    first = cli(*args, cwd=tmp_path)
    done, under_way = out / "trials" / "0" / "s1", out / "trials" / "1" / "s1"
    deadline = time.monotonic() + 180
    while not (summary(done).get("status") == "finished" and (under_way / "checkpoints" / "last.json").exists()):
        assert first.poll() is None and time.monotonic() < deadline, output_of(first)
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)  # no chance to tell Optuna anything
    first.communicate(timeout=30)
    kept = digest(done)
    deadline = time.monotonic() + 60  # the run under way got SIGTERM from its dying parent: it checkpoints, stops
    while summary(under_way).get("status") == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert summary(under_way)["status"] == "stopped"
    assert [trial.state.name for trial in trials(out)][1] == "RUNNING"

    code, text = finish(cli(*args, cwd=tmp_path))
    assert code == 0, text
    found = trials(out)
    assert [(trial.number, trial.state.name) for trial in found] == [(0, "COMPLETE"), (1, "COMPLETE")]
    assert found[1].user_attrs["interrupted"] == 1 and "interrupted 1x" in (out / "sweep.md").read_text()
    assert digest(done) == kept  # the finished trial's run was not redone
    assert "resumed" in (under_way / "run.log").read_text().lower()
    assert summary(under_way)["total_steps"] == 8192


def test_a_pruner_stops_a_bad_trial_early_and_the_sweep_goes_on(tmp_path, slow_steps):
    # The sweep reads the runs' evaluations every POLL_S (0.5 s); a CartPole run on a Zen 5 would do the rest of its
    # steps in under a second. Slow steps make them last over six seconds on any machine.
    out = tmp_path / "grid"
    overrides = [*SMALL, "train.total_timesteps=8192", *slow_steps]
    sweep = write_sweep(tmp_path, "[1.0e-12, 3.0e-3, 2.0e-3]", "seed: 3", "pruner: {kind: median, startup_trials: 1}",
                        overrides=overrides)
    code, text = finish(cli("sweep", str(sweep), "--workers", "1", "--out", str(out), cwd=tmp_path))
    assert code == 0, text
    good, bad, last = trials(out)
    assert [good.params["algo.lr"], bad.params["algo.lr"]] == [3e-3, 1e-12], "the grid's seed 3 orders them so"
    assert good.state.name == "COMPLETE" and bad.state.name == "PRUNED"
    pruned_dir = out / "trials" / str(bad.number) / "s1"
    stopped = summary(pruned_dir)
    assert stopped["status"] == "pruned" and stopped["total_steps"] < 8192  # told from a user's stop
    (record,) = Registry(tmp_path / "runs").query({"status": "pruned"})
    assert Path(record.run_dir) == pruned_dir.resolve()
    assert "pruned at step 2,048" in (out / "sweep.md").read_text()
    assert last.state.name in ("COMPLETE", "PRUNED")  # started once the pruned run had stopped and freed the worker
    # a pruned run is resumable as a stopped one
    code, text = finish(cli("train", "--resume", str(pruned_dir), cwd=tmp_path))
    assert code == 0, text
    assert summary(pruned_dir)["status"] == "finished"
