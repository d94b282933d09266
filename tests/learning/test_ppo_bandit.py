"""Learning: PPO picks the better arm of Bandit-TwoArm-v0 (evaluation return ≥ 0.72, i.e. 0.9 × the
best mean 0.8; the other arm pays 0.2) within 20k steps, for 2 seeds — the smallest check that a
policy gradient moves probability towards the better action."""

import pytest

import rlfoundry


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_ppo_solves_two_armed_bandit(tmp_path, quiet, seed):
    _, summary = rlfoundry.train("Bandit-TwoArm-v0:ppo", [*quiet, f"train.seed={seed}"], tmp_path / "run")
    assert summary["solved_at_step"] is not None and summary["solved_at_step"] <= 20_000, summary
    assert summary["best_eval_return"] >= 0.72
    # The greedy policy could pick the right arm by luck; the sampling policy shows the learning. The training
    # return averages the last 100 episodes, early ones included: a uniform policy earns 0.5 ± 0.05 there.
    assert summary["train_return_mean"] >= 0.6, summary
