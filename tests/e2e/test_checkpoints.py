"""Checkpoints from real training: cadence, best and last, a stop by signal, the divergence guard."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import rlfoundry
from rlfoundry.algos import Runtime
from rlfoundry.run import checkpoint as ckpt
from rlfoundry.run.trainer import RunFailed
from tests.conftest import output_of


def test_cadence_best_and_last_checkpoints_restore_the_policy(tmp_path, quiet):
    run_dir, summary = rlfoundry.train(
        "CartPole-v1:ppo",
        [*quiet, "train.total_timesteps=6144", "checkpoint.every_steps=2048", "checkpoint.keep_last=2",
         "eval.every_steps=1024", "eval.episodes=2", "eval.stop_at_threshold=false"],
        tmp_path / "run",
    )
    root = run_dir / "checkpoints"
    last = ckpt.load(ckpt.resolve(run_dir, "last"))
    assert last.state["step"] == summary["total_steps"]
    assert last.state["summary"]["total_steps"] == summary["total_steps"]
    best = json.loads((root / "best.json").read_text())
    assert best["eval_return"] == summary["best_eval_return"]
    assert ckpt.resolve(run_dir, "best").is_dir()
    cadence = sorted(p.name for p in root.glob("step_*"))
    assert len(cadence) >= 2 and ckpt.step_dir_name(summary["total_steps"]) in cadence

    # the saved weights are the trained policy's: loading them into a fresh agent reproduces its actions
    from rlfoundry.algos.ppo import PPO
    from rlfoundry.envs import build
    from rlfoundry.experiment.load import load_config

    cfg = load_config(str(run_dir / "config.yaml"))
    envs, spec = build(cfg.env)
    try:
        fresh = PPO(cfg, spec, Runtime.of(cfg.train))
        fresh.load_state_dict(ckpt.agent_state(last))
        policy_state = ckpt.agent_state(last)["policy"]
        obs, _ = envs.reset(seed=0)
        for key, value in fresh.policy.state_dict().items():
            assert torch.equal(value, policy_state[key])
        assert fresh.predict(obs).shape == (spec.num_envs,)
    finally:
        envs.close()


def test_sigterm_saves_a_checkpoint_and_marks_the_run_stopped(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlfoundry.cli", "train", "CartPole-v1:ppo", "--run-dir", str(run_dir),
         "--total-timesteps", "10000000", "logging.progress=false", "logging.tensorboard=false",
         "eval.every_steps=0", "eval.at_end=false", "checkpoint.every_steps=0", "train.device=cpu"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 120
    while not (run_dir / "metrics.csv").exists() or (run_dir / "metrics.csv").stat().st_size < 2000:
        assert time.time() < deadline and proc.poll() is None, output_of(proc)
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "stopped at step" in err and "Traceback" not in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped"
    last = ckpt.load(ckpt.resolve(run_dir, "last"))
    assert last.state["step"] == summary["total_steps"] > 0
    assert (run_dir / "report.md").exists()


def test_non_finite_parameters_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path, quiet, monkeypatch):
    from rlfoundry.algos.ppo import PPO

    real_iterate = PPO.iterate
    calls = {"n": 0}

    def poisoned(self, envs, progress):
        result = real_iterate(self, envs, progress)
        calls["n"] += 1
        if calls["n"] == 3:  # the third update "diverges"
            with torch.no_grad():
                next(self.policy.parameters()).view(-1)[0] = math.nan
        return result

    monkeypatch.setattr(PPO, "iterate", poisoned)
    with pytest.raises(RunFailed, match="not finite at step 768"):
        rlfoundry.train("CartPole-v1:ppo", [*quiet, "train.total_timesteps=4096", "checkpoint.every_steps=256",
                                             "eval.every_steps=0"], tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed"
    last = ckpt.load(ckpt.resolve(tmp_path / "run", "last"))
    assert last.state["step"] == 512  # saved before the divergence, never after
    assert all(torch.isfinite(t).all() for t in last.weights.values())


def test_resume_refuses_bad_targets_with_exit_2_and_changes_nothing(tmp_path):
    """A corrupt checkpoint, a finished run and a directory that is no run: one message, exit 2, files untouched."""
    quiet = ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu", "eval.every_steps=0"]
    finished, _ = rlfoundry.train("CartPole-v1:ppo", [*quiet, "train.total_timesteps=512"], tmp_path / "finished")
    corrupt, _ = rlfoundry.train("CartPole-v1:ppo", [*quiet, "train.total_timesteps=512"], tmp_path / "corrupt")
    summary = json.loads((corrupt / "summary.json").read_text())
    (corrupt / "summary.json").write_text(json.dumps({**summary, "status": "stopped"}))
    weights = ckpt.resolve(corrupt, "last") / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    (tmp_path / "empty").mkdir()
    cases = {
        str(corrupt): "corrupt or truncated",
        str(finished): "finished; there is nothing to continue",
        str(tmp_path / "empty"): "not a run directory",
    }
    for target, message in cases.items():
        before = {p: p.read_bytes() for p in Path(target).rglob("*") if p.is_file()}
        proc = subprocess.run([sys.executable, "-m", "rlfoundry.cli", "train", "--resume", target],
                              capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
        assert proc.returncode == 2, proc.stderr
        assert message in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
        assert {p: p.read_bytes() for p in Path(target).rglob("*") if p.is_file()} == before
