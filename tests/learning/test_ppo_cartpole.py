"""Learning: PPO solves CartPole-v1 (evaluation return ≥ 475) within 100k steps, for 3 seeds."""

import pytest

import rlfoundry


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ppo_solves_cartpole(tmp_path, quiet, seed):
    _, summary = rlfoundry.train(
        "CartPole-v1:ppo", [*quiet, f"train.seed={seed}", "train.total_timesteps=100000"], tmp_path / "run"
    )
    assert summary["solved_at_step"] is not None, summary
    assert summary["solved_at_step"] <= 100_000
    assert summary["best_eval_return"] >= 475
