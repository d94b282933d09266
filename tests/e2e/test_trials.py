"""`rlfoundry trials`: every (spec, seed) an ordinary run in worker processes, registry rows with the group, a
failing run reported without stopping the others, the report; a killed command continued without redoing finished
runs; `train --seed 1,2` as shorthand; bad input exits 2 with nothing created."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlfoundry.records.registry import Registry
from tests.conftest import output_of

# Each test starts several training processes: under pytest-xdist they take turns on one worker.
pytestmark = pytest.mark.xdist_group("processes")

SMALL = ["train.total_timesteps=4096", "eval.every_steps=2048", "eval.episodes=3", "logging.tensorboard=false",
         "train.device=cpu", "eval.stop_at_threshold=false"]


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlfoundry.cli", *args], cwd=cwd, env={**os.environ, "NO_COLOR": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout + stderr


def status(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "summary.json").read_text())["status"]
    except (OSError, ValueError):
        return None


def digest(run_dir: Path) -> str:
    """The finished run's files that a redo would rewrite."""
    return hashlib.sha256(b"".join((run_dir / name).read_bytes() for name in ("summary.json", "metrics.csv"))).hexdigest()


def test_two_workers_run_every_seed_report_a_failure_and_record_the_group(tmp_path):
    bad = tmp_path / "diverges.yaml"
    bad.write_text("preset: CartPole-v1:ppo\nalgo:\n  lr: 1.0e+30\n")  # the first update's loss is NaN
    out = tmp_path / "set"
    # (a spec that is bad input for its env, Acrobot-v1:planet, now stops the set before any run: see below)
    code, text = finish(cli("trials", "CartPole-v1:ppo", str(bad), "--seeds", "2", "--workers", "2", "--out",
                            str(out), *SMALL, cwd=tmp_path))
    assert code == 1, text  # a run failed: reported, and the others still ran
    assert "diverges.yaml seed 1" in text and "nan" in text.lower(), text
    for seed in (1, 2):
        assert status(out / "CartPole-v1_ppo" / f"s{seed}") == "finished"
        assert status(out / "diverges" / f"s{seed}") == "failed"
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert sorted(row["status"] for row in rows) == ["failed", "failed", "finished", "finished"]
    assert (out / "trials.md").is_file() and (out / "curves.png").is_file()
    # every run is an ordinary run in the registry, with the set's name as its group
    records = Registry(tmp_path / "runs").query({"group": "set"})
    assert sorted((r.variant, r.seed, r.status) for r in records) == [
        ("ppo", 1, "failed"), ("ppo", 1, "finished"), ("ppo", 2, "failed"), ("ppo", 2, "finished")]


def test_a_run_refused_at_its_start_is_reported_as_refused_with_no_directory(tmp_path):
    """A spec the loader accepts but the run refuses as bad input (a train.init that is not there): exit 2 in its
    process, no run directory; the set reports it as refused everywhere and does not advise running it again."""
    bad = tmp_path / "from-nowhere.yaml"
    bad.write_text("preset: CartPole-v1:ppo\ntrain:\n  init: nowhere\n")
    out = tmp_path / "set"
    code, text = finish(cli("trials", "CartPole-v1:ppo", str(bad), "--seeds", "1", "--out", str(out),
                            "train.total_timesteps=1024", *SMALL[1:], cwd=tmp_path))
    assert code == 1, text
    assert "refused" in text and "fix the spec or the overrides" in text and "continue them" not in text, text
    assert "train.init: nowhere: no such run directory" in text, text
    rows = {row["spec"]: row for row in csv.DictReader((out / "trials.csv").open())}
    assert (rows[str(bad)]["status"], rows["CartPole-v1:ppo"]["status"]) == ("refused", "finished")
    assert not (out / "from-nowhere").exists()  # neither its run directory nor the spec's
    report = (out / "trials.md").read_text()
    (row,) = [line for line in report.splitlines() if line.startswith(f"| `{bad}`")]
    assert row.split("|")[2:5] == [" 1 ", " 0 ", " 1 "]  # runs, counted, failed
    assert "from-nowhere/s1" not in report  # no link to a directory that does not exist


def test_a_killed_set_continues_and_keeps_finished_runs(tmp_path):
    out = tmp_path / "set"
    args = ("trials", "CartPole-v1:ppo", "--seeds", "3", "--workers", "1", "--out", str(out), *SMALL,
            "train.total_timesteps=12288", "checkpoint.every_steps=2048")
    first = cli(*args, cwd=tmp_path)
    runs = [out / "CartPole-v1_ppo" / f"s{seed}" for seed in (1, 2, 3)]
    deadline = time.monotonic() + 180
    while not (status(runs[0]) == "finished" and (runs[1] / "checkpoints" / "last.json").exists()):
        assert first.poll() is None and time.monotonic() < deadline, output_of(first)
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)  # the whole command, without a chance to clean up
    first.communicate(timeout=30)
    kept = digest(runs[0])
    deadline = time.monotonic() + 60  # the run under way got SIGTERM from its dying parent: it checkpoints, stops
    while status(runs[1]) == "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert status(runs[1]) == "stopped"
    assert not (runs[2] / "summary.json").exists()

    code, text = finish(cli(*args, cwd=tmp_path))
    assert code == 0, text
    assert digest(runs[0]) == kept  # not redone
    assert all(status(run) == "finished" for run in runs)
    assert "resumed" in (runs[1] / "run.log").read_text().lower()
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert [row["status"] for row in rows] == ["finished"] * 3


def test_sigterm_ends_the_set_after_its_runs_checkpointed(tmp_path):
    """As Ctrl-C does: a scheduler's or `timeout`'s SIGTERM returns only once the runs under way have stopped."""
    out = tmp_path / "set"
    first = cli("trials", "CartPole-v1:ppo", "--seeds", "1", "--workers", "1", "--out", str(out), *SMALL,
                "train.total_timesteps=200000", "checkpoint.every_steps=2048", cwd=tmp_path)
    run = out / "CartPole-v1_ppo" / "s1"
    deadline = time.monotonic() + 120
    while not (run / "checkpoints" / "last.json").exists():
        assert first.poll() is None and time.monotonic() < deadline, output_of(first)
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    code, text = finish(first, timeout=90)
    assert code == 130 and f"--out {out}" in text, text
    assert status(run) == "stopped"  # already: the command waited for its run


def test_train_with_a_seed_list_runs_trials(tmp_path):
    code, text = finish(cli("train", "CartPole-v1:ppo", "--seed", "3,5", *SMALL, "train.total_timesteps=2048",
                            cwd=tmp_path))
    assert code == 0, text
    (folder,) = (tmp_path / "runs" / "trials").iterdir()
    assert sorted(p.name for p in (folder / "CartPole-v1_ppo").iterdir()) == ["s3", "s5"]
    assert (folder / "trials.md").is_file()
    # how to continue it names a command that exists (train has no --out), and that command continues the set
    hint = next(line for line in text.splitlines() if line.startswith("trials in "))
    command = shlex.split(hint[hint.index("(rlfoundry ") + 1:hint.rindex(" continues them)")])
    assert command[:5] == ["rlfoundry", "trials", "CartPole-v1:ppo", "--seeds", "3,5"] and "--out" in command
    code, again = finish(cli(*command[1:], cwd=tmp_path))
    assert code == 0, again
    assert sorted(p.name for p in (folder / "CartPole-v1_ppo").iterdir()) == ["s3", "s5"]


@pytest.mark.parametrize("args, message", [
    (["Nope-v0:ppo", "--seeds", "2"], "Nope-v0"),
    (["CartPole-v1:ppo", "--seeds", "0"], "at least 1"),
    (["CartPole-v1:ppo", "--seeds", "1,1"], "twice"),
    (["CartPole-v1:ppo", "--seeds", "x"], "comma-separated"),
    (["CartPole-v1:ppo", "--workers", "0"], "--workers"),
    (["CartPole-v1:ppo", "train.seed=4"], "train.seed"),
    (["CartPole-v1:ppo", "algo.lrr=1"], "algo.lrr"),
    # a spec whose agent cannot act in its env stops the set before the others train
    (["CartPole-v1:ppo", "CartPole-v1:planet"], "CartPole-v1:planet: algo.name = 'planet' acts in Box action spaces"),
])
def test_bad_input_exits_2_and_creates_nothing(tmp_path, args, message):
    code, text = finish(cli("trials", *args, "--out", str(tmp_path / "set"), cwd=tmp_path), timeout=60)
    assert code == 2, text
    assert message in text and "Traceback" not in text
    assert not (tmp_path / "set").exists() and not (tmp_path / "runs").exists()


def test_a_continuation_with_other_overrides_is_refused(tmp_path):
    out = tmp_path / "set"
    code, text = finish(cli("trials", "CartPole-v1:ppo", "--seeds", "1", "--out", str(out), *SMALL,
                            "train.total_timesteps=1024", cwd=tmp_path))
    assert code == 0, text
    before = digest(out / "CartPole-v1_ppo" / "s1")
    code, text = finish(cli("trials", "CartPole-v1:ppo", "--seeds", "1", "--out", str(out), *SMALL,
                            "train.total_timesteps=2048", cwd=tmp_path), timeout=60)
    assert code == 2 and "overrides" in text, text
    assert digest(out / "CartPole-v1_ppo" / "s1") == before
