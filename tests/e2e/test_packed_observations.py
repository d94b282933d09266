"""A Dict observation with an image in it (MiniGrid's view beside the agent's direction, `env.minigrid.direction`)
for each family of algorithms that take Discrete actions: packed into one uint8 vector and read by the grid encoder beside
the one-hot direction; the world models, which decode one image or one vector, refuse it; a trained policy loads,
acts on its own env's observations and exports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlfoundry
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs.spaces import PackedBox

DICT = ["env.minigrid.direction=true", "logging.progress=false", "logging.tensorboard=false", "train.device=cpu",
        "train.torch_threads=1", "eval.every_steps=0", "eval.episodes=1", "train.total_timesteps=256"]
# PPO stands for the on-policy family (A2C and REINFORCE build the same actor-critic)
SMALL = {"ppo": ["algo.num_steps=32"],
         "dqn": ["algo.learning_starts=64", "algo.batch_size=8", "algo.buffer_size=1000"],
         "sac": ["algo.learning_starts=64", "algo.batch_size=8", "algo.buffer_size=1000"]}


@pytest.mark.parametrize("algo", list(SMALL))
def test_each_family_of_algorithms_trains_on_it(tmp_path, algo):
    run_dir, summary = rlfoundry.train(f"MiniGrid-Empty-5x5-v0:{algo}", [*DICT, *SMALL[algo]], tmp_path / "run")
    assert summary["status"] == "finished"
    policy = rlfoundry.load_policy(run_dir)
    assert isinstance(policy.spec.observation_space, PackedBox) and policy.spec.obs_dtype == np.uint8
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4 + 3 * 7 * 7,) and obs[:4].sum() == 1  # the one-hot direction, then the view
    action, _ = policy.act(obs)
    assert env.action_space.contains(int(action))


@pytest.mark.parametrize("algo", ["dreamer"])
def test_the_world_models_refuse_it_with_the_way_out(tmp_path, algo):
    with pytest.raises(ConfigError, match="images inside a Dict or Tuple.*FilterObservation"):
        rlfoundry.train(f"MiniGrid-Empty-5x5-v0:{algo}", DICT, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_packed_policy_exports(tmp_path):
    from rlfoundry.trained.export import export

    run_dir, _ = rlfoundry.train("MiniGrid-Empty-5x5-v0:ppo", [*DICT, *SMALL["ppo"]], tmp_path / "run")
    policy = rlfoundry.load_policy(run_dir)
    export(policy, tmp_path / "policy.pt", "torchscript")
    graph = torch.jit.load(str(tmp_path / "policy.pt"))
    env = policy.make_env()
    observations = [env.reset(seed=seed)[0] for seed in range(8)]
    obs = np.stack(observations)
    exported = graph(torch.as_tensor(obs))
    exported = exported[0] if isinstance(exported, tuple) else exported
    np.testing.assert_array_equal(exported.numpy(), policy.act(obs)[0])
