"""Budgets as they are run: a run takes whole iterations, so train.total_timesteps rounds up to the next one; the
progress line counts toward the steps the run will take, the summary records the steps taken, and a first iteration
larger than the whole budget is said once, with the settings to lower."""

import io
import json

import pytest
from rich.console import Console

import rlfoundry

QUIET = ["logging.tensorboard=false", "train.device=cpu", "train.torch_threads=1", "eval.every_steps=0",
         "eval.episodes=1"]


def train(tmp_path, spec: str, total: int, *extra: str) -> tuple[dict, str]:
    text = io.StringIO()
    console = Console(file=text, width=300, force_terminal=False)
    run_dir, summary = rlfoundry.train(spec, [*QUIET, f"train.total_timesteps={total}", *extra], tmp_path / "run",
                                       console=console)
    assert json.loads((run_dir / "summary.json").read_text())["total_steps"] == summary["total_steps"]
    return summary, text.getvalue()


@pytest.mark.parametrize(("spec", "extra", "total", "taken"), [
    # the CartPole preset's PPO: 8 envs × 32 steps = 256 a rollout
    ("CartPole-v1:ppo", (), 1000, 1024),
    ("CartPole-v1:ppo", (), 1024, 1024),
    # DQN: train_freq 1 × 2 envs a step
    ("CartPole-v1:dqn", ("env.num_envs=2", "algo.train_freq=3", "algo.learning_starts=0"), 100, 102),
])
def test_a_budget_rounds_up_to_whole_iterations_and_the_progress_line_says_so(tmp_path, spec, extra, total, taken):
    summary, text = train(tmp_path, spec, total, *extra)
    assert summary["total_steps"] == taken
    assert f"{taken:,}/{taken:,} steps" in text, text
    assert "warning" not in text


def test_a_first_iteration_beyond_the_budget_is_said_with_the_settings_to_lower(tmp_path):
    summary, text = train(tmp_path, "CartPole-v1:ppo", 100, "algo.num_steps=64", "env.num_envs=4")
    assert summary["total_steps"] == 256
    line = " ".join(text.split())
    assert ("train.total_timesteps = 100 is less than one iteration of ppo (256 env steps: env.num_envs = 4 × "
            "algo.num_steps = 64): the run takes 256 steps; to keep to the budget, lower env.num_envs or "
            "algo.num_steps") in line, line
