"""Learning: A2C (rl-zoo3's CartPole settings) reaches an evaluation return ≥ 475 on CartPole-v1 within
200k steps for 2 seeds (measured: solved at 10k–50k steps, about 3 s each)."""

import pytest

import rlfoundry


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_a2c_solves_cartpole(tmp_path, quiet, seed):
    _, summary = rlfoundry.train(
        "CartPole-v1:a2c", [*quiet, f"train.seed={seed}", "train.total_timesteps=200000"], tmp_path / "run"
    )
    assert summary["solved_at_step"] is not None and summary["solved_at_step"] <= 200_000, summary
    assert summary["best_eval_return"] >= 475
