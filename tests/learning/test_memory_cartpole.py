"""Learning that shows memory: CartPole-v1 with the velocities hidden (`ppo-masked`, a POMDP).

Feed-forward PPO sees one position and one angle and cannot tell which way the pole falls: it stays far below the
threshold (best evaluation return under 200 in 40k steps; it is ~45 at 100k). The same PPO with an LSTM core
(`ppo-lstm`) reaches 475 within the preset's 100k steps for 2 seeds (`bench arch`, 3 seeds: solved at 15k–45k,
median 40k). GRU, Transformer-XL and Mamba rows come from `rlfoundry bench arch` (docs/guide/memory-cores.md)."""

import pytest

import rlfoundry

BUDGET = 100_000


@pytest.mark.slow
def test_feed_forward_ppo_stays_far_below_the_threshold(tmp_path, quiet):
    _, summary = rlfoundry.train("CartPole-v1:ppo-masked", [*quiet, "train.total_timesteps=40000"], tmp_path / "run")
    assert summary["solved_at_step"] is None and summary["best_eval_return"] < 200, summary


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_lstm_ppo_solves_cartpole_without_velocities(tmp_path, quiet, seed):
    _, summary = rlfoundry.train(
        "CartPole-v1:ppo-lstm", [*quiet, f"train.seed={seed}", f"train.total_timesteps={BUDGET}"], tmp_path / "run"
    )
    assert summary["solved_at_step"] is not None and summary["solved_at_step"] <= BUDGET, summary
    assert summary["best_eval_return"] >= 475
