"""Every preset variant trains for one shrunk iteration and evaluates, through the same trainer, as
`rlfoundry presets --smoke` runs it (`rlfoundry.run.smoke`); the command's lines and exit codes."""

import subprocess
import sys

import pytest

from rlfoundry.experiment.load import load_presets
from rlfoundry.run.smoke import smoke

CASES = [(env_id, variant) for env_id, preset in sorted(load_presets().items()) for variant in preset.variants]


@pytest.mark.parametrize("env_id, variant", CASES)
def test_preset_trains_one_iteration(tmp_path, quiet, env_id, variant):
    result = smoke(env_id, variant, tmp_path / "run", quiet)
    assert result.ok, result.detail
    assert (tmp_path / "run" / "summary.json").exists()


def test_a_failure_is_a_result_with_its_reason(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("first line\nthe reason")

    monkeypatch.setattr("rlfoundry.run.launch.train", broken)
    result = smoke("CartPole-v1", "ppo", tmp_path / "run")
    assert not result.ok and result.detail == "RuntimeError: the reason"
    missing = smoke("CartPole-v1", "no-such-variant", tmp_path / "other")
    assert not missing.ok and "no-such-variant" in missing.detail


def test_the_command_prints_a_line_per_variant(tmp_path):
    run = [sys.executable, "-m", "rlfoundry.cli", "presets", "--smoke"]
    proc = subprocess.run([*run, "Pendulum-v1:sac-gru"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0].startswith("pass Pendulum-v1:sac-gru") and "1 of 1 passed" in proc.stdout
    nothing = subprocess.run([*run, "no-such-env"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert nothing.returncode == 2 and "no preset variant matches" in nothing.stderr
    assert not list(tmp_path.iterdir())  # runs go to a temporary directory, not ./runs
