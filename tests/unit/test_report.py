"""report.md and curves.png: from a real tiny run, from hand-written metrics.csv edge cases, and via the CLI."""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import rlfoundry
from rlfoundry.cli.report import report
from rlfoundry.config.errors import ConfigError
from rlfoundry.records import rundir
from rlfoundry.records.report import DPI, FIGSIZE, read_metrics, write_report

TINY = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "train.total_timesteps=1024",
        "eval.every_steps=256", "eval.episodes=2"]
HEADER = "global_step,wall_time,sps,train/episode_return,eval/return_mean,eval/return_std,loss/policy,loss/value," \
         "sps_run,time/act,time/env,time/learn,train/return_mean"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One real CartPole run (about a second), shared; tests that change files work on a copy."""
    run_dir, summary = rlfoundry.train("CartPole-v1:ppo", TINY, tmp_path_factory.mktemp("trained") / "run")
    assert summary["status"] == "finished"
    return run_dir


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(trained, target)
    for name in ("report.md", "curves.png"):  # in case the trainer already wrote them
        (target / name).unlink(missing_ok=True)
    return target


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def expected_size() -> tuple[int, int]:
    return round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI)


def leftovers(run_dir: Path) -> list[str]:
    return [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- a real run


def test_report_of_a_real_run(run_copy):
    md, png = write_report(run_copy)
    assert (md, png) == (run_copy / "report.md", run_copy / "curves.png")
    assert md.stat().st_size > 0 and png.stat().st_size > 0
    assert png_size(png) == expected_size()

    text = md.read_text(encoding="utf-8")
    summary = json.loads((run_copy / "summary.json").read_text())
    assert text.startswith("# CartPole-v1 · ppo · seed 1\n")
    assert "![curves](curves.png)" in text
    assert "**Status:** finished · 1,024 steps" in text
    assert "| `total_steps` | 1,024 |" in text
    assert f"| `eval_return_mean` | {summary['eval_return_mean']:.4g} |" in text
    assert "| `solved_at_step` | – |" in text
    assert "**Not solved**: threshold 475" in text  # the preset's threshold and where it comes from
    assert "| `env.num_envs` | 8 |" in text and "| `algo.lr` | lin_0.001 |" in text
    assert "| `network.hidden_sizes` | [64, 64] |" in text
    assert f"| `torch` | {summary['versions']['torch']} |" in text
    assert "4 logged iterations, 4 evaluations." in text
    assert leftovers(run_copy) == []


def test_regeneration_overwrites_in_place(run_copy):
    write_report(run_copy)
    summary = json.loads((run_copy / "summary.json").read_text())
    summary.update(solved_at_step=768, status="stopped")
    (run_copy / "summary.json").write_text(json.dumps(summary))
    before = sorted(p.name for p in run_copy.iterdir())

    md, _ = write_report(run_copy)
    text = md.read_text(encoding="utf-8")
    assert "**Status:** stopped" in text and "**Solved** at step 768: evaluation return ≥ 475" in text
    assert sorted(p.name for p in run_copy.iterdir()) == before  # overwritten, nothing added
    assert leftovers(run_copy) == []


def test_a_failed_rename_leaves_the_old_files_and_no_temporaries(run_copy, monkeypatch):
    md, png = write_report(run_copy)
    old_md, old_png = md.read_bytes(), png.read_bytes()
    (run_copy / "summary.json").write_text(json.dumps({"status": "failed", "env_id": "Other-v0"}))

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(rundir.os, "replace", refuse)  # the atomic writer report.py uses
    with pytest.raises(OSError, match="disk full"):
        write_report(run_copy)
    assert md.read_bytes() == old_md and png.read_bytes() == old_png
    assert leftovers(run_copy) == []


# ---------------------------------------------------------------- metrics.csv edge cases

EDGE_CASES = {
    "empty": "",
    "header only": HEADER + "\n",
    "no eval rows, an all-empty column": HEADER + "\n"
    "256,0.1,2000.0,,,,-0.01,,2000.0,0.01,0.02,0.05,\n"
    "512,0.2,2100.0,20.0,,,-0.02,,2050.0,0.01,0.02,0.05,20.0\n",
    "NaN and inf": HEADER + "\n"
    "256,0.1,nan,17.0,98.0,nan,nan,12.0,inf,nan,nan,nan,17.0\n"
    "512,0.2,2100.0,nan,48.0,2.0,-0.02,-inf,2050.0,0.0,0.0,0.0,nan\n",
    "one row": HEADER + "\n256,0.1,2000.0,17.0,98.0,2.0,-0.01,12.0,2000.0,0.01,0.02,0.05,17.0\n",
    "widened mid-file": "global_step,wall_time,sps\n256,0.1,2000.0\n"
    "global_step,wall_time,sps,loss/policy,eval/return_mean\n512,0.2,2100.0,-0.01,50.0\n768,0.3,2200.0,-0.02,,9,9\n"
    "1024,0.4\n",
    "garbage cells": HEADER + "\n256,abc,2000.0,x,,,-0.01,12.0,2000.0,0.01,0.02,0.05,17.0\n",
}


@pytest.mark.parametrize("text", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_hand_written_metrics(run_copy, text):
    (run_copy / "metrics.csv").write_text(text)
    md, png = write_report(run_copy)
    assert png_size(png) == expected_size()
    assert "![curves](curves.png)" in md.read_text(encoding="utf-8")
    assert leftovers(run_copy) == []


def test_empty_metrics_are_reported_as_no_iterations(run_copy):
    (run_copy / "metrics.csv").write_text(HEADER + "\n")
    md, _ = write_report(run_copy)
    assert "0 logged iterations, 0 evaluations." in md.read_text(encoding="utf-8")


def test_read_metrics_of_a_widened_file(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(EDGE_CASES["widened mid-file"])
    metrics = read_metrics(path)
    assert list(metrics) == ["global_step", "wall_time", "sps", "loss/policy", "eval/return_mean"]
    assert metrics["global_step"].tolist() == [256, 512, 768, 1024]
    assert metrics["sps"][:3].tolist() == [2000.0, 2100.0, 2200.0] and math.isnan(metrics["sps"][3])
    policy = metrics["loss/policy"].tolist()
    assert math.isnan(policy[0]) and policy[1:3] == [-0.01, -0.02] and math.isnan(policy[3])
    assert [math.isnan(v) for v in metrics["eval/return_mean"]] == [True, False, True, True]


def test_read_metrics_of_nothing(tmp_path):
    assert read_metrics(tmp_path / "absent.csv") == {}
    (tmp_path / "empty.csv").write_text("")
    assert read_metrics(tmp_path / "empty.csv") == {}
    (tmp_path / "header.csv").write_text(HEADER + "\n")
    header_only = read_metrics(tmp_path / "header.csv")
    assert list(header_only) == HEADER.split(",") and all(len(v) == 0 for v in header_only.values())


def test_missing_metrics_and_config_still_give_a_report(run_copy):
    (run_copy / "metrics.csv").unlink()
    (run_copy / "config.yaml").unlink()
    md, png = write_report(run_copy)
    text = md.read_text(encoding="utf-8")
    assert png_size(png) == expected_size()
    assert "## Configuration" not in text and "No solved threshold" in text
    assert "| `total_steps` | 1,024 |" in text


def test_a_500_row_run(run_copy):
    lines = [HEADER]
    for i in range(1, 501):
        evaluation = f"{i:.1f},1.5" if i % 10 == 0 else ","
        losses = f"-0.01,{10 + i % 7}"
        lines.append(f"{256 * i},{0.1 * i},2000.0,{i / 2},{evaluation},{losses},2000.0,0.01,0.02,0.05,{i / 3}")
    (run_copy / "metrics.csv").write_text("\n".join(lines) + "\n")
    md, png = write_report(run_copy)
    assert png_size(png) == expected_size()
    assert "500 logged iterations, 50 evaluations." in md.read_text(encoding="utf-8")


# ---------------------------------------------------------------- errors


def test_a_missing_run_dir_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="nowhere"):
        write_report(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a run directory"):
        write_report(tmp_path / "file")


def test_a_missing_or_broken_summary_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"summary\.json: not found"):
        write_report(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"summary\.json: cannot be read"):
        write_report(tmp_path)
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "curves.png").exists()


# ---------------------------------------------------------------- the command


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)  # a group, so the command is invoked by name as in `rlfoundry report`
    app.command("report")(report)
    return app


def test_cli_report_prints_both_paths(cli, run_copy):
    result = CliRunner().invoke(cli, ["report", str(run_copy)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [str(run_copy / "report.md"), str(run_copy / "curves.png")]
    assert png_size(run_copy / "curves.png") == expected_size()


def test_cli_report_of_a_missing_dir_exits_2(cli, tmp_path):
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "nowhere" in result.stderr
    assert result.stdout == ""
