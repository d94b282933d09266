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
    envs = "env.num_envs=2"
    if shipped.algo.name == "simple":  # one real env; a small world model on small frames; an epoch of a few steps
        rollout, envs = 256, "env.num_envs=1"  # 210 random steps: a whole game (at most 200 steps, below) + 46
        model = dict(hidden_size=8, compress_steps=2, filter_double_steps=1, bottleneck_bits=8, latent_state_size=16,
                     posterior_filters="[8,16]", reward_head_channels=8)
        frames = ["env.atari.img_size=[36,36]"] if env_id.startswith("ALE/") else []  # the toys' are small already
        shrink = [*(f"algo.world_model.{key}={value}" for key, value in model.items()), *frames,
                  "algo.random_steps=210", "algo.real_steps_per_epoch=46", "algo.world_model_steps=10",
                  "algo.first_epoch_multiplier=1", "algo.rollout_length=5", "algo.reward_steps=2", "algo.sim_envs=2",
                  "algo.ppo_updates=1", "algo.ppo.num_steps=4", "algo.ppo.minibatch_size=4"]
    overrides = [*quiet, envs, *shrink,
                 f"train.total_timesteps={rollout}", "eval.every_steps=0", "eval.episodes=1",
                 # ALE's time limit counts emulator frames: 800 frames are 200 agent steps
                 "env.atari.max_episode_frames=800" if env_id.startswith("ALE/") else "env.max_episode_steps=200"]
    _, summary = rlfoundry.train(f"{env_id}:{variant}", overrides, tmp_path / "run")
    assert summary["status"] == "finished"
    assert summary["total_steps"] == rollout
    assert summary["eval_return_mean"] is not None
