"""An algorithm from a separate package: examples/plugin installed with pip into a temporary folder registers `vpg`
through the `rlfoundry.algorithms` entry-point group, and the command line trains it like any of rlfoundry's own.
A broken plugin is left out with one warning naming it, and every other algorithm still works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUIET = ["logging.progress=false", "logging.tensorboard=false"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """examples/plugin installed (no dependencies: rlfoundry is this checkout) into a folder of its own, built from a
    copy: setuptools writes build/ and egg-info beside the sources, and two test workers building the same tree at
    once (each runs this fixture) broke each other's build."""
    source = shutil.copytree(ROOT / "examples/plugin", tmp_path_factory.mktemp("plugin") / "plugin")
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "--no-index", "--target", str(target), str(source)],
                          capture_output=True, text=True, cwd=target)
    assert done.returncode == 0, done.stderr
    return target


def rlfoundry(args: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "rlfoundry.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def test_a_plugin_algorithm_trains_from_the_command_line(site, tmp_path):
    run_dir = tmp_path / "run"
    done = rlfoundry(["train", "CartPole-v1:vpg", "train.total_timesteps=2048", "eval.episodes=2",
                      "logging.runs_root=runs", *QUIET, "--run-dir", str(run_dir)], site, tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["algo"] == "vpg" and summary["total_steps"] == 2048
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "loss/policy" in header and "loss/value" in header
    assert (run_dir / "checkpoints" / "last.json").exists()


def test_a_broken_plugin_is_left_out_with_a_warning(site, tmp_path):
    broken = tmp_path / "broken"
    info = broken / "rlfoundry_broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlfoundry-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlfoundry.algorithms]\nnope = rlfoundry_missing_module:Nope\n")
    env_site = Path(f"{broken}{os.pathsep}{site}")
    unknown = rlfoundry(["train", "Acrobot-v1:nope"], env_site, tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("warning: the algorithm plugin nope = 'rlfoundry_missing_module:Nope'")
    assert "cannot be loaded, so it is left out" in unknown.stderr
    assert "available:" in unknown.stderr and "vpg" in unknown.stderr  # the working plugin is still there
    assert not (tmp_path / "runs").exists()
    listed = rlfoundry(["algos"], env_site, tmp_path)
    assert listed.returncode == 0 and "rlfoundry_vpg.VPG" in listed.stdout and "rlfoundry.algos.ppo.PPO" in listed.stdout
