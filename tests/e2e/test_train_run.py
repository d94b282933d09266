"""`rlfoundry train` end to end: the run directory contract and same-seed determinism."""

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import rlfoundry
from rlfoundry.algos import Runtime
from rlfoundry.experiment.load import load_config
from rlfoundry.run.trainer import SUMMARY_KEYS
from tests.conftest import is_timing

CLI = [sys.executable, "-m", "rlfoundry.cli"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_train_options_come_from_environment_variables_and_the_command_line_wins(tmp_path):
    import os

    env = {**os.environ, "RLFOUNDRY_TOTAL_TIMESTEPS": "256", "RLFOUNDRY_SEED": "5", "RLFOUNDRY_DEVICE": "cpu",
           "RLFOUNDRY_RUN_DIR": str(tmp_path / "from-env")}
    quiet = ["logging.progress=false", "logging.tensorboard=false", "eval.at_end=false", "eval.every_steps=0"]
    proc = subprocess.run([*CLI, "train", "CartPole-v1:ppo", *quiet, "--seed", "7"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "from-env" / "summary.json").read_text())
    assert summary["total_steps"] == 256 and summary["seed"] == 7  # --seed beats RLFOUNDRY_SEED
    bad = subprocess.run([*CLI, "train", "CartPole-v1:ppo"], capture_output=True, text=True, cwd=tmp_path,
                         env={**env, "RLFOUNDRY_TOTAL_TIMESTEPS": "many", "RLFOUNDRY_RUN_DIR": str(tmp_path / "bad")},
                         timeout=120)
    assert bad.returncode == 2 and "RLFOUNDRY_TOTAL_TIMESTEPS" in bad.stderr and not (tmp_path / "bad").exists()
    # --resume keeps the run's own config: the variables give way (only the run's state can refuse it, here finished)
    resumed = subprocess.run([*CLI, "train", "--resume", str(tmp_path / "from-env")], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=120)
    assert resumed.returncode == 2 and "finished" in resumed.stderr and "give no SPEC" not in resumed.stderr


def test_cli_tiny_run_writes_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [*CLI, "train", "CartPole-v1:ppo", "train.total_timesteps=2048", "eval.every_steps=1024",
         "eval.episodes=2", "logging.progress=false", "--seed", "3", "--run-dir", str(run_dir), "--device", "cpu"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "evaluation return" in proc.stdout and str(run_dir) in proc.stdout
    for name in ("config.yaml", "metrics.csv", "summary.json", "run.log"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("events.out.tfevents.*")), "no TensorBoard event file"

    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["status"] == "finished"
    assert summary["total_steps"] == 2048 and summary["seed"] == 3
    assert summary["env_id"] == "CartPole-v1" and summary["algo"] == "ppo" and summary["variant"] == "ppo"
    assert summary["eval_return_mean"] is not None and summary["sps"] > 0
    assert summary["versions"]["torch"]

    rows = read_csv(run_dir / "metrics.csv")
    assert len(rows) == 2048 // 256
    assert {"global_step", "wall_time", "sps", "loss/policy", "time/env", "time/act", "time/learn"} <= set(rows[0])
    assert [int(r["global_step"]) for r in rows] == list(range(256, 2049, 256))
    assert sum(1 for r in rows if r["eval/return_mean"]) == 2

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["train"]["seed"] == 3 and config["train"]["total_timesteps"] == 2048
    assert config["algo"]["lr"] == "lin_0.001"  # the schedule is written in its shorthand
    assert config["provenance"]["versions"]["gymnasium"]
    assert "git_commit" in config["provenance"]
    assert config["provenance"]["vectorization"] == "vector_entry_point"
    # The resolved config is itself a valid experiment file.
    again = load_config(str(run_dir / "config.yaml"))
    assert again.algo == load_config("CartPole-v1:ppo").algo


def run_metrics(tmp_path: Path, name: str, spec: str, overrides: list[str]) -> list[dict[str, str]]:
    run_dir, summary = rlfoundry.train(spec, overrides, tmp_path / name)
    assert summary["status"] == "finished"
    return read_csv(run_dir / "metrics.csv")


def strip_timing(rows):
    return [{k: v for k, v in row.items() if not is_timing(k)} for row in rows]


@pytest.mark.parametrize("spec, steps", [("CartPole-v1:ppo", 3072), ("Pendulum-v1:ppo", 1024)])
def test_same_seed_same_metrics(tmp_path, quiet, spec, steps):
    overrides = [*quiet, f"train.total_timesteps={steps}", "eval.every_steps=1024", "eval.episodes=2",
                 "train.seed=7"]
    if spec.startswith("Pendulum"):  # a continuous preset with normalisation and minibatches
        overrides += ["algo.num_steps=256", "env.num_envs=2", "env.normalize_obs=true", "env.normalize_reward=true"]
    first = run_metrics(tmp_path, "a", spec, overrides)
    second = run_metrics(tmp_path, "b", spec, overrides)
    assert strip_timing(first) == strip_timing(second)
    other = run_metrics(tmp_path, "c", spec, [*overrides, "train.seed=8"])
    assert strip_timing(other) != strip_timing(first)


TINY_DREAMER = ["algo.model.rssm.deter=32", "algo.model.rssm.hidden=16", "algo.model.rssm.blocks=4",
                "algo.model.units=32", "algo.units=32", "algo.batch_size=4", "algo.batch_length=8", "algo.train_ratio=16",
                "algo.collect_steps=8", "env.max_episode_steps=100"]


@pytest.mark.parametrize("spec, steps, overrides", [
    ("CartPole-v1:ppo", 2048, ["eval.deterministic=false"]),  # sampled actions, from torch's generator
    ("CartPole-v1:dqn", 2048, ["eval.deterministic=false", "algo.learning_starts=256", "algo.train_freq=64"]),  # ε
    ("MountainCarContinuous-v0:dreamer", 240, TINY_DREAMER),  # latent states sampled even for greedy actions
])
def test_evaluations_do_not_change_training(tmp_path, quiet, spec, steps, overrides):
    """An evaluation draws from a random state of its own: evaluating more often and longer leaves every training
    number as it was."""
    # (a row per iteration: an evaluation also ends a merged row, so the rows would group differently)
    base = [*quiet, f"train.total_timesteps={steps}", "train.seed=5", "logging.every_steps=0", *overrides]
    few = run_metrics(tmp_path, "few", spec, [*base, f"eval.every_steps={steps // 2}", "eval.episodes=1"])
    many = run_metrics(tmp_path, "many", spec, [*base, f"eval.every_steps={steps // 8}", "eval.episodes=3"])

    def training(rows):
        return [{k: v for k, v in row.items() if not k.startswith("eval/")} for row in strip_timing(rows)]

    assert training(few) == training(many)
    assert sum(bool(row["eval/return_mean"]) for row in many) > sum(bool(row["eval/return_mean"]) for row in few)


def test_an_own_random_state_is_the_same_inside_every_time_and_leaves_the_outside_as_it_was():
    from rlfoundry.run.seeding import own_random_state

    def draw():
        return random.random(), float(np.random.random()), float(torch.rand(()))

    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = [draw(), draw()]
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    got, inside = [draw()], []
    for _ in range(2):
        with own_random_state(9):
            inside.append(draw())
    with pytest.raises(KeyError), own_random_state(9):
        draw()
        raise KeyError  # left by an exception, as a stopped evaluation leaves it
    got.append(draw())
    assert got == expected and inside[0] == inside[1] != expected[1]


def test_bf16_mixed_precision_trains_and_keeps_fp32_rollouts(tmp_path, quiet):
    """train.precision=bf16 runs the grid encoder's convolutions in bfloat16 while everything the loss
    and the rollout keep (log-probabilities, values, parameters) stays fp32."""
    import torch

    from rlfoundry.algos.ppo import PPO
    from rlfoundry.envs import build
    from rlfoundry.experiment.load import load_config

    cfg = load_config("MiniGrid-Empty-5x5-v0:ppo", [*quiet, "train.precision=bf16", "env.num_envs=2", "algo.num_steps=16",
                                                      "algo.minibatch_size=0.5"])
    envs, spec = build(cfg.env)
    try:
        agent = PPO(cfg, spec, Runtime.of(cfg.train))
        iteration = agent.iterate(envs, 0.0)
        with agent.autocast():
            rollout, _ = agent.collector.collect(agent.policy)
    finally:
        envs.close()
    assert rollout.obs.dtype == torch.uint8
    assert rollout.values.dtype == rollout.logprobs.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in agent.policy.parameters())
    losses = [iteration.metrics[key] for key in ("loss/policy", "loss/value")]
    assert all(math.isfinite(v) for v in losses), iteration.metrics
    with agent.autocast():
        features = agent.policy.encoder(rollout.obs[0])
    assert features.dtype == torch.bfloat16  # the convolutions did run in bf16
