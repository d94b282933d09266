"""`rlfoundry train SPEC --debug`: a small budget, verbose lines, per-layer norms, a profile, and the first NaN
named with the tensor and the step where it appears."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from rlfoundry.algos import ppo
from rlfoundry.algos.optim import FlatOptimizer, debug_checks
from rlfoundry.cli import app
from rlfoundry.envs.wrappers import FiniteCheck
from rlfoundry.experiment.load import load_config
from rlfoundry.run import debug


def test_debug_run_is_small_verbose_and_records_norms_and_a_profile(tmp_path, quiet):
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "CartPole-v1:ppo", "--debug", "--run-dir", str(run_dir), *quiet])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert int(rows[-1]["global_step"]) == debug.ITERATIONS * 8 * 32  # the preset: 8 envs x 32 steps
    norms = [key for key in rows[-1] if key.startswith("debug/grad_norm/ActorCritic.")]
    assert len(norms) >= 4 and all(float(rows[-1][key]) > 0 for key in norms)
    assert float(rows[-1]["debug/weight_norm/ActorCritic.pi.linear.weight"]) > 0
    assert "policy.encoder.weights.0 (2, 4, 64)" in result.output  # the parameter shapes
    assert result.output.count("debug: step ") == debug.ITERATIONS  # a line per iteration, with its timings
    assert (run_dir / "profile.md").is_file() and (run_dir / "profile.json").is_file()


def test_debug_keeps_a_given_budget_and_waits_for_learning_starts():
    cfg = load_config("CartPole-v1:ppo", ["train.total_timesteps=1000"])
    assert debug.debug_config(cfg, budget_given=True).train.total_timesteps == 1000
    dqn = load_config("CartPole-v1:dqn")  # learning_starts 1000, 1 env, 256 steps per iteration
    assert debug.debug_config(dqn, budget_given=False).train.total_timesteps == 1000 + debug.ITERATIONS * 256


def test_a_planted_nan_in_a_loss_is_named_with_its_update_and_step(tmp_path, quiet, monkeypatch):
    calls = {"n": 0}
    real_loss = ppo.ppo_loss

    def poisoned(*args, **kwargs):
        loss, stats = real_loss(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 30:  # the value loss turns NaN in the second iteration (20 updates per iteration)
            stats["loss/value"] = stats["loss/value"] * float("nan")
            loss = loss + stats["loss/value"]
        return loss, stats

    monkeypatch.setattr(ppo, "ppo_loss", poisoned)
    result = CliRunner().invoke(app, ["train", "CartPole-v1:ppo", "--debug", "--run-dir", str(tmp_path / "run"),
                                      *quiet])
    assert result.exit_code == 1
    assert "loss/value is NaN at update 30 of the ActorCritic optimizer" in result.output
    assert "in the iteration from step 256" in result.output


def test_a_nan_gradient_of_a_finite_loss_names_the_parameter():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    optimizer = FlatOptimizer(net, 1e-3, 1e-8, None)
    net[2].weight.register_hook(lambda grad: grad * float("nan"))
    with debug_checks(), pytest.raises(FloatingPointError, match=r"gradient of Sequential\.2\.weight is NaN"):
        optimizer.update(net(torch.ones(5, 3)).mean())
    optimizer.update(net(torch.ones(5, 3)).mean())  # outside debug mode: no checks


def test_finite_check_names_the_env_the_element_and_the_step():
    import gymnasium as gym

    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")

    def poison(obs):
        obs = obs.copy()
        if checked.steps >= 6:
            obs[1, 2] = np.inf
        return obs

    checked = FiniteCheck(gym.wrappers.vector.TransformObservation(envs, poison))
    checked.reset(seed=0)
    with pytest.raises(FloatingPointError, match=r"observation of env 1 is inf at step 8 \(element \(2,\)\)"):
        for _ in range(10):
            checked.step(np.zeros(2, dtype=np.int64))
    envs.close()

    pendulum = FiniteCheck(gym.make_vec("Pendulum-v1", num_envs=1, vectorization_mode="sync"))
    pendulum.reset(seed=0)
    for _ in range(8):
        pendulum.step(np.zeros((1, 1), dtype=np.float32))
    with pytest.raises(FloatingPointError, match=r"action of env 0 is NaN at step 8 \(element \(0,\)\)"):
        pendulum.step(np.full((1, 1), np.nan, dtype=np.float32))
    pendulum.close()


def test_under_a_debugger_the_envs_step_in_process():
    cfg = load_config("Pendulum-v1:sac", ["algo.async_actors=1", "env.vectorization=async"])
    assert debug.in_process(cfg) == (cfg, None)
    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: None)
    try:
        changed, note = debug.in_process(cfg)
    finally:
        sys.settrace(previous)
    assert changed.env.vectorization == "sync" and changed.algo.async_actors == 0
    assert "env.vectorization async -> sync" in note and "algo.async_actors 1 -> 0" in note
