"""`rlfoundry runs verify` on a short CartPole PPO run: it reproduces (all of it, its first steps, a stopped run);
with another thread count it names the first diverging step, the metrics and the cause; bad input exits 2 with one
line; and the original run directory and the user's run registry stay as they were.

Driven through `runs_app` with typer's CliRunner, as tests/e2e/test_cli_runs.py. The preset's learning rate and
clip range are linear schedules over train.total_timesteps, so a `--steps` re-run that reproduces also shows that it
kept the run's total.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli.runs import runs_app
from rlfoundry.records.registry import Registry

TOTAL = 1536  # 6 iterations of 8 envs x 32 steps, evaluated at 768 and at the end


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A runs root with one finished run; its 64-wide MLP resolves `auto` threads to 1."""
    root = tmp_path_factory.mktemp("verify") / "runs"
    rlfoundry.train("CartPole-v1:ppo", [
        "logging.progress=false", "logging.tensorboard=false", "train.device=cpu", f"train.total_timesteps={TOTAL}",
        "eval.every_steps=768", "eval.episodes=2", f"logging.runs_root={root}",
    ])
    return root


@pytest.fixture
def run(root, tmp_path, monkeypatch) -> Path:
    """The run's directory; the working directory and the re-runs' temporary directories under this test's."""
    monkeypatch.chdir(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (path,) = [p for p in root.iterdir() if p.is_dir()]
    return path


def invoke(*args):
    result = CliRunner().invoke(runs_app, ["verify", *map(str, args)], env={"COLUMNS": "250", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def fingerprint(path: Path) -> dict[str, str]:
    return {str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.rglob("*")) if f.is_file()}


def copy_run(run: Path, where: Path, status: str, rows: int | None = None) -> Path:
    """A copy of the run marked `status`, its metrics.csv cut to its first `rows` rows."""
    copy = where / run.name
    shutil.copytree(run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    (copy / "summary.json").write_text(json.dumps({**summary, "status": status}))
    if rows is not None:
        lines = (copy / "metrics.csv").read_text().splitlines(keepends=True)
        (copy / "metrics.csv").write_text("".join(lines[: rows + 1]))
    return copy


def test_whole_run_reproduces_and_leaves_run_and_registry_alone(root, run, tmp_path):
    before = fingerprint(run)
    result = invoke(run)
    assert result.exit_code == 0, result.output
    assert "reproduced: 6 metrics rows (steps 256..1,536)" in result.stdout
    assert fingerprint(run) == before
    assert [record.run_dir for record in Registry(root).query()] == [str(run.resolve())]
    assert not (tmp_path / "runs").exists()
    assert not list((tmp_path / "tmp").iterdir())  # the re-run's directory is gone


def test_first_steps_of_the_last_run_reproduce(root, run, tmp_path):
    result = invoke("@last", "--runs-root", root, "--steps", 600, "--keep")
    assert result.exit_code == 0, result.output
    assert "reproduced: 3 metrics rows (steps 256..768)" in result.stdout  # through the iteration that reaches 600
    (kept,) = (tmp_path / "tmp").iterdir()
    rerun = kept / run.name
    assert f"re-run kept in {rerun}" in result.stdout
    assert json.loads((rerun / "summary.json").read_text())["status"] == "stopped"
    assert len(Registry(root).query()) == 1


def test_stopped_run_verifies_its_recorded_steps(run, tmp_path):
    stopped = copy_run(run, tmp_path, "stopped", rows=4)
    result = invoke(stopped, "--steps", 100_000)
    assert result.exit_code == 0, result.output
    assert "reproduced: 4 metrics rows (steps 256..1,024)" in result.stdout
    assert "the run recorded 1,024 steps; all of them are verified" in result.stdout


def test_a_finished_run_with_its_last_rows_cut_off_is_not_reproduced(run, tmp_path):
    """summary.json says the run finished at 1,536 steps; metrics.csv was cut after step 1,024: the re-run goes to
    the end and names the first row the file lacks."""
    cut = copy_run(run, tmp_path, "finished", rows=4)
    result = invoke(cut)
    assert result.exit_code == 1, result.output
    assert "diverged at step 1,280 after 4 matching rows" in result.stdout
    assert "the original has no metrics row there" in result.stdout
    assert "summary.json says the run finished at 1,536: its last rows are missing" in result.stdout


def test_last_finds_runs_that_trials_and_sweeps_keep_in_folders(run, tmp_path):
    root = tmp_path / "other-runs"
    nested = root / "trials" / "20261129_set" / "CartPole-v1_ppo"
    nested.mkdir(parents=True)
    copy = copy_run(run, nested, "finished")
    result = invoke("@last", "--runs-root", root, "--steps", 300)
    assert result.exit_code == 0, result.output
    assert "reproduced: 2 metrics rows (steps 256..512)" in result.stdout and copy.is_dir()


@pytest.fixture
def threads_restored():
    """A re-run sets this process's torch threads: the next tests in this process get their count back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_a_changed_row_is_named_with_both_values(run, tmp_path):
    changed = copy_run(run, tmp_path, "finished")
    lines = (changed / "metrics.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    row = lines[3].rstrip("\n").split(",")  # step 768
    column = header.index("loss/value")
    original, row[column] = row[column], "12345.0"
    lines[3] = ",".join(row) + "\n"
    (changed / "metrics.csv").write_text("".join(lines))
    result = invoke(changed)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[0] == "diverged at step 768 after 2 matching rows (verifying steps 256..1,536)"
    assert f"  loss/value: 12345.0 (original) != {original} (re-run)" in result.stdout
    assert "provenance: no recorded field differs" in result.stdout


def test_another_thread_count_is_named_when_it_changes_the_numbers(run, threads_restored):
    before = fingerprint(run)
    result = invoke(run, "--steps", 256, "--threads", 2)
    if result.exit_code == 0:  # this CPU's kernels split a 64-wide MLP's work without changing a bit
        assert "reproduced: 1 metrics rows" in result.stdout
        pytest.skip("2 threads give bit-identical results for CartPole PPO on this CPU")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "diverged at step 256, the first row (verifying steps 256..256)"
    assert any(line.startswith("  loss/") and "(original) != " in line for line in lines), result.stdout
    assert "provenance differs: torch_threads 1 -> 2" in result.stdout
    assert fingerprint(run) == before


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such run directory"),
    ("no metrics", "(no metrics.csv)"),
    ("running", "the run is still running"),
    ("steps 0", "--steps 0: must be at least 1"),
    ("threads 0", "--threads 0: must be at least 1"),
    ("empty runs root", "@last: no run with a metrics.csv under"),
])
def test_bad_input_exits_2_with_one_line(run, tmp_path, case, expected):
    args = {
        "missing": lambda: [tmp_path / "nope"],
        "no metrics": lambda: [copy_run(run, tmp_path, "finished")],
        "running": lambda: [copy_run(run, tmp_path, "running")],
        "steps 0": lambda: [run, "--steps", 0],
        "threads 0": lambda: [run, "--threads", 0],
        "empty runs root": lambda: ["@last", "--runs-root", tmp_path],
    }[case]()
    if case == "no metrics":
        (args[0] / "metrics.csv").unlink()
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:"), result.stderr
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert not list((tmp_path / "tmp").iterdir())
