"""Learning: REINFORCE (reward-to-go, value baseline) reaches an evaluation return ≥ 475 on CartPole-v1
within 500k steps for 2 seeds (measured: solved at 220k–260k steps, about 6 s each)."""

import pytest

import rlfoundry


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_reinforce_solves_cartpole(tmp_path, quiet, seed):
    _, summary = rlfoundry.train("CartPole-v1:reinforce", [*quiet, f"train.seed={seed}"], tmp_path / "run")
    assert summary["solved_at_step"] is not None and summary["solved_at_step"] <= 500_000, summary
    assert summary["best_eval_return"] >= 475
