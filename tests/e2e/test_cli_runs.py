"""`rlfoundry runs ...` on three real (tiny) CartPole runs: list, show, compare, export, clean, bad input.

The commands are driven through `runs_app` with typer's CliRunner; each test works on its own copy of
the runs (without any registry.sqlite, so every test also exercises the scan of unknown runs).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli.runs import runs_app
from rlfoundry.records.registry import DB_NAME, Registry

SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trained") / "runs"
    for seed in SEEDS:
        rlfoundry.train("CartPole-v1:ppo", [
            "logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=512",
            "eval.every_steps=256", "eval.episodes=2", f"logging.runs_root={root}", f"train.seed={seed}",
        ])
    return root


@pytest.fixture
def root(trained, tmp_path, monkeypatch) -> Path:
    """A private copy of the runs, and the working directory set beside it (where `compare` writes its plot)."""
    copy = tmp_path / "runs"
    shutil.copytree(trained, copy, ignore=shutil.ignore_patterns(f"{DB_NAME}*"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return copy


def invoke(*args: str):
    result = CliRunner().invoke(runs_app, [str(a) for a in args], env={"COLUMNS": "250", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def ids_by_seed(root: Path) -> dict[int, int]:
    return {record.seed: record.id for record in Registry(root).query()}


def table_ids(stdout: str) -> list[int]:
    """The id column of a rich table's body rows."""
    return [int(line.split("│")[1]) for line in stdout.splitlines() if line.startswith("│")]


def test_list_scans_and_shows_every_run(root):
    result = invoke("list", "--runs-root", root)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("│ CartPole-v1 ") == 3  # the env column (the dir column names it too)
    assert table_ids(result.stdout) == [1, 2, 3]
    assert (root / DB_NAME).exists()
    assert sorted(ids_by_seed(root)) == list(SEEDS)


def test_list_shows_group_directory_and_chosen_config_keys(root):
    result = invoke("list", "--runs-root", root, "--keys", "algo.lr,train.seed,algo.nope", "--sort", "seed")
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "algo.lr" in line)
    assert all(name in header for name in ("group", "train.seed", "algo.nope", "dir"))
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    for seed, row in zip(SEEDS, rows):
        cells = [part.strip() for part in row.split("│")[1:-1]]
        assert cells[-1] in names and cells[-5:-2] == [cells[-5], str(seed), "-"], cells  # dir, seed, missing key
        assert cells[-5] not in ("0.00", "-")  # the learning rate as written, not rounded away
    bad = invoke("list", "--runs-root", root, "--keys", " , ")
    assert bad.exit_code == 2 and "--keys" in bad.output


def test_list_filter_and_sort(root):
    result = invoke("list", "--runs-root", root, "--env", "cartpole", "--sort", "seed", "--desc")
    assert result.exit_code == 0, result.output
    by_seed = ids_by_seed(root)
    assert table_ids(result.stdout) == [by_seed[3], by_seed[2], by_seed[1]]

    result = invoke("list", "--runs-root", root, "--env", "Pendulum")
    assert result.exit_code == 0 and "no runs match" in result.stdout
    result = invoke("list", "--runs-root", root, "--status", "finished", "--seed", "2")
    assert table_ids(result.stdout) == [by_seed[2]]


def test_show_prints_every_field_and_the_run_dir(root):
    invoke("list", "--runs-root", root)
    run_id = ids_by_seed(root)[2]
    result = invoke("show", run_id, "--runs-root", root)
    assert result.exit_code == 0, result.output
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())
    record = Registry(root).get(run_id)
    assert fields["run_dir"] == record.run_dir and Path(record.run_dir).is_dir()
    assert Path(record.run_dir).parent == root.resolve()
    assert fields["seed"] == "2" and fields["status"] == "finished" and fields["total_steps"] == "512"
    assert fields["config_hash"] == record.config_hash and len(record.config_hash) == 64
    summary = json.loads((Path(record.run_dir) / "summary.json").read_text())
    assert float(fields["best_eval_return"]) == summary["best_eval_return"]
    for name in ("env_id", "algo", "variant", "git_commit", "started_at", "ended_at", "sps", "eval_return_mean"):
        assert name in fields


def test_compare_prints_a_table_and_writes_a_plot(root):
    invoke("list", "--runs-root", root)
    out = root.parent / "cmp.png"
    result = invoke("compare", "1", "2", "3", "--out", out, "--runs-root", root)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "#1" in result.stdout and "#3" in result.stdout and "best_eval_return" in result.stdout
    assert f"plot: {out}" in result.stdout
    assert not list(root.parent.glob(".cmp.png*"))  # no temporary file left behind

    result = invoke("compare", "1", "2", "--runs-root", root)  # default name, in the working directory
    assert result.exit_code == 0, result.output
    assert Path("compare_1_2.png").stat().st_size > 0


@pytest.mark.parametrize("fmt", ["csv", "markdown", "latex"])
def test_export(root, fmt):
    result = invoke("export", "--format", fmt, "--runs-root", root, "--sort", "seed")
    assert result.exit_code == 0, result.output
    text = result.stdout
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [int(row["seed"]) for row in rows] == list(SEEDS)
        assert all(row["status"] == "finished" and int(row["total_steps"]) == 512 for row in rows)
        assert all(float(row["best_eval_return"]) > 0 for row in rows)
    elif fmt == "markdown":
        lines = text.strip().splitlines()
        assert len(lines) == 2 + len(SEEDS)
        assert lines[0].startswith("| id | env |") and set(lines[1]) <= set("|-: ")
        assert all(line.count("|") == lines[0].count("|") for line in lines)
    else:
        assert text.startswith(r"\begin{tabular}") and text.rstrip().endswith(r"\end{tabular}")
        assert text.count(r" \\") == 1 + len(SEEDS)

    out = root.parent / f"export.{fmt}"
    result = invoke("export", "--format", fmt, "--runs-root", root, "--sort", "seed", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_text() == text


def test_export_filters(root):
    result = invoke("export", "--runs-root", root, "--seed", "3")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["seed"] for row in rows] == ["3"]


def snapshot(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if DB_NAME not in path.name)


def test_clean_dry_run_deletes_nothing(root):
    invoke("list", "--runs-root", root)
    before = snapshot(root)
    result = invoke("clean", "--keep-best", "1", "--keep-recent-days", "0", "--runs-root", root)
    assert result.exit_code == 0, result.output
    assert "would delete 2 of 3 runs" in result.stdout and "dry run" in result.stdout
    assert snapshot(root) == before
    assert len(Registry(root).query()) == 3


def test_clean_yes_deletes_directories_and_rows(root):
    invoke("list", "--runs-root", root)
    records = Registry(root).query()
    best = max(records, key=lambda r: (r.best_eval_return, -r.id))

    result = invoke("clean", "--keep-best", "1", "--keep-recent-days", "1", "--yes", "--runs-root", root)
    assert result.exit_code == 0 and "nothing to delete" in result.stdout  # all of them are recent

    result = invoke("clean", "--keep-best", "1", "--keep-recent-days", "0", "--yes", "--runs-root", root)
    assert result.exit_code == 0, result.output
    assert "deleted 2 runs" in result.stdout
    left = Registry(root).query()
    assert [r.id for r in left] == [best.id]
    for record in records:
        assert Path(record.run_dir).is_dir() == (record.id == best.id)


def test_clean_never_deletes_a_running_run(root):
    invoke("list", "--runs-root", root)
    records = Registry(root).query()
    running = Path(records[0].run_dir)
    summary = json.loads((running / "summary.json").read_text())
    (running / "summary.json").write_text(json.dumps({**summary, "status": "running"}))

    result = invoke("clean", "--keep-best", "0", "--keep-recent-days", "0", "--yes", "--runs-root", root)
    assert result.exit_code == 0, result.output
    assert "deleted 2 runs" in result.stdout
    assert running.is_dir()
    assert [r.id for r in Registry(root).query()] == [records[0].id]


BAD_INPUT = {
    "unknown id": (["show", "99"], "unknown run id 99"),
    "unknown id in compare": (["compare", "1", "99"], "unknown run id 99"),
    "unknown sort key": (["list", "--sort", "colour"], "unknown sort key 'colour'"),
    "unknown sort key in export": (["export", "--sort", "colour"], "unknown sort key 'colour'"),
    "unknown format": (["export", "--format", "xml"], "--format xml: unknown format; available: csv, markdown, latex"),
    "unknown plot format": (["compare", "1", "--out", "plot.bogus"], "unknown plot format '.bogus'"),
    "missing runs root": (["list", "--runs-root", "{missing}"], "no such directory"),
    "missing runs root in clean": (["clean", "--keep-best", "1", "--keep-recent-days", "1", "--yes",
                                    "--runs-root", "{missing}"], "no such directory"),
}


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_exits_2_with_one_message(root, name):
    args, expected = BAD_INPUT[name]
    args = [arg.replace("{missing}", str(root.parent / "nope")) for arg in args]
    if "--runs-root" not in args:
        args += ["--runs-root", str(root)]
    invoke("list", "--runs-root", root)
    before = snapshot(root)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:"), result.stderr
    assert expected in " ".join(result.stderr.split()), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert snapshot(root) == before
    assert not list(Path.cwd().iterdir())  # no plot written
    assert not (root.parent / "nope").exists()


def test_usage_errors_exit_2(root):
    for args in (["show", "abc"], ["clean", "--keep-best", "1"], ["clean", "--keep-best", "-1", "--keep-recent-days", "1"]):
        result = invoke(*args, "--runs-root", root)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output


def test_rebuild_after_the_registry_is_garbled_deleted_or_moved(root, tmp_path):
    invoke("list", "--runs-root", root)  # a registry with the three runs
    (root / DB_NAME).write_bytes(b"this is not a database" * 100)
    broken = invoke("list", "--runs-root", root)
    assert broken.exit_code == 2 and "rlfoundry runs rebuild" in broken.output, broken.output
    rebuilt = invoke("rebuild", "--runs-root", root)
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "registry rebuilt: 3 run(s) recorded" in rebuilt.stdout and "the old database is kept as" in rebuilt.stdout
    (aside,) = root.glob(f"{DB_NAME}.*.bak")
    assert aside.read_bytes().startswith(b"this is not a database")  # kept, never deleted
    assert table_ids(invoke("list", "--runs-root", root).stdout) == [1, 2, 3]
    (root / DB_NAME).unlink()
    assert "3 run(s) recorded" in invoke("rebuild", "--runs-root", root).stdout
    moved = Path(shutil.move(str(root), tmp_path / "moved"))  # the records now point at the old place
    rebuilt = invoke("rebuild", "--runs-root", moved)
    assert rebuilt.exit_code == 0 and "3 run(s) recorded" in rebuilt.stdout
    assert all(Path(record.run_dir).is_relative_to(moved.resolve()) for record in Registry(moved).query())


def test_a_run_with_a_broken_registry_trains_on_and_says_so_once(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    (root / DB_NAME).write_bytes(b"garbage" * 1000)
    from rich.console import Console

    console = Console(file=io.StringIO(), width=300)
    _, summary = rlfoundry.train("CartPole-v1:ppo", [
        "logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=256",
        "eval.every_steps=256", "eval.episodes=1", f"logging.runs_root={root}"], console=console)
    assert summary["status"] == "finished"
    said = console.file.getvalue()
    assert said.count("the run trains on without a record") == 1 and "rlfoundry runs rebuild" in said
