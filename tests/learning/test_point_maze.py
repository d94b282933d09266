"""Learning on a Dict observation: Gymnasium-Robotics' PointMaze_UMazeDense-v3, whose {observation, achieved_goal,
desired_goal} reaches the agents as one vector (`rlfoundry.envs.spaces`). Preset and measurements: the preset file's
comments (AMD EPYC, 2 cores shared, one torch thread, 20 evaluation episodes).

Uniform random actions score 69.4 ± 44.6 an episode (200 episodes; D4RL's random reference for its U-maze: 68.5), so
a 20-episode mean of random play stays near 69 ± 10; the tests ask 150. PPO's best evaluation return by 60k steps:
171 for seeds 1 and 2 (123 and 136 at 40k; 9,000 steps/s: the test stops at 150, 5-10 s a seed). SAC learns it too
(the preset's `sac`: 171 by 14k steps for seed 1, 179 by 8k for seed 3, 152 by 18k for seed 2, at about 450 steps/s),
which the suite leaves to the preset's smoke run: its minute a seed buys no more evidence of the Dict path.
"""

import pytest

import rlfoundry

SPEC = "PointMaze_UMazeDense-v3"
THRESHOLD = 150.0

pytest.importorskip("gymnasium_robotics")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_ppo_learns_the_point_maze(tmp_path, quiet, seed):
    _, summary = rlfoundry.train(f"{SPEC}:ppo", [*quiet, f"train.seed={seed}", "train.total_timesteps=100000",
                                                 f"solved.return={THRESHOLD}"], tmp_path / "run")
    assert summary["best_eval_return"] >= THRESHOLD, summary
