"""Learning: TD3 (rl-zoo3's Pendulum settings, with learning from step 1,000 instead of 10,000 and 64x64 networks
instead of 400x300 to keep the test short) reaches an evaluation return ≥ −250 on Pendulum-v1 within 10k steps for
2 seeds, and DDPG (the same settings as its own: one critic, no smoothing, no delay) for one (measured on an AMD EPYC
Zen 3: TD3 solved at 7,000 steps for both seeds, DDPG at 5,000; about 60 s each on a quiet core)."""

import pytest

import rlfoundry

SHORT = ["algo.learning_starts=1000", "network.hidden_sizes=[64,64]", "train.total_timesteps=10000"]


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "seed"), [("td3", 1), ("td3", 2), ("ddpg", 1)])
def test_td3_and_ddpg_solve_pendulum(tmp_path, quiet, algo, seed):
    _, summary = rlfoundry.train(f"Pendulum-v1:{algo}", [*quiet, *SHORT, f"train.seed={seed}"], tmp_path / "run")
    assert summary["solved_at_step"] is not None and summary["solved_at_step"] <= 10_000, summary
    assert summary["best_eval_return"] >= -250
