"""Learning that shows memory with the off-policy learners (R2D2's sequence replay), on tasks with the velocities
hidden.

DQN: CartPole-v1 without velocities (`dqn-masked`). The feed-forward DQN stays far below the threshold (best
evaluation return 45 in the preset's 30k steps, seed 1); the same DQN with an LSTM core (`dqn-lstm`) solves it, 475
over 10 evaluation episodes, at 10.2k and 12.5k steps for seeds 1 and 2 (AMD EPYC Zen 3, 2 cores, about 90 s each;
a run stops once solved).
"""

import pytest

import rlfoundry


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_lstm_dqn_solves_cartpole_without_velocities(tmp_path, quiet, seed):
    _, summary = rlfoundry.train("CartPole-v1:dqn-lstm", [*quiet, f"train.seed={seed}"], tmp_path / "run")
    assert summary["solved_at_step"] is not None and summary["best_eval_return"] >= 475, summary
