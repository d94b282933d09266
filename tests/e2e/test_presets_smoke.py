"""Every preset variant trains for one iteration and evaluates, through the same trainer."""

import pytest

import rlfoundry
from rlfoundry.spec.load import load_config, load_presets

CASES = [(env_id, variant) for env_id, preset in sorted(load_presets().items()) for variant in preset.variants]


@pytest.mark.parametrize("env_id, variant", CASES)
def test_preset_trains_one_iteration(tmp_path, quiet, env_id, variant):
    shipped = load_config(f"{env_id}:{variant}")  # the preset as shipped is valid
    # Shrunk so the whole matrix stays fast: 2 envs × 64 steps, two minibatches (PPO), short episodes.
    rollout = 2 * 64
    shrink = {
        "ppo": ["algo.num_steps=64", "algo.minibatch_size=0.5"],
        "dqn": ["algo.train_freq=64", "algo.learning_starts=0", "algo.gradient_steps=2", "algo.batch_size=16"],
        "sac": ["algo.train_freq=64", "algo.learning_starts=0", "algo.gradient_steps=2", "algo.batch_size=16"],
    }.get(shipped.algo.name, ["algo.num_steps=64"])
    overrides = [*quiet, "env.num_envs=2", *shrink,
                 f"train.total_timesteps={rollout}", "eval.every_steps=0", "eval.episodes=1",
                 # ALE's time limit counts emulator frames: 800 frames are 200 agent steps
                 "env.atari.max_episode_frames=800" if env_id.startswith("ALE/") else "env.max_episode_steps=200"]
    _, summary = rlfoundry.train(f"{env_id}:{variant}", overrides, tmp_path / "run")
    assert summary["status"] == "finished"
    assert summary["total_steps"] == rollout
    assert summary["eval_return_mean"] is not None
