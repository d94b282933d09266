"""SAC, TD3 and DDPG from frames: the critics read the frames through the image encoder, one the twin critics share
(as SAC-AE and DrQ do), never through an MLP over every pixel; the actor has its own; a few gradient steps run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rlfoundry
from rlfoundry.algos import Runtime, algorithm
from rlfoundry.envs import build
from rlfoundry.nets.cnn import NatureCNN

FRAMES = ["env.pixels.enabled=true", "env.pixels.img_size=[36,36]", "train.device=cpu", "train.torch_threads=1"]


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_the_critics_see_frames_through_the_image_encoder(algo):
    cfg = rlfoundry.load_config(f"Pendulum-v1:{algo}", FRAMES)
    envs, spec = build(cfg.env, 1)
    envs.close()
    agent = algorithm(algo)(cfg, spec, Runtime.of(cfg.train))
    pixels = 3 * 36 * 36
    for network in (agent.critic, agent.actor):
        assert any(isinstance(module, NatureCNN) for module in network.modules()), type(network)
        widest = max(layer.in_features for layer in network.modules() if isinstance(layer, nn.Linear))
        assert widest < pixels  # no layer over the raw frame
    encoders = [module for module in agent.critic.modules() if isinstance(module, NatureCNN)]
    assert len(encoders) == 1  # one encoder shared by the critics
    obs = torch.randint(0, 256, (4, *spec.obs_shape), dtype=torch.uint8)
    actions = torch.zeros(4, spec.action_space.shape[0])
    assert agent.critic(obs, actions).shape == ((2 if algo != "ddpg" else 1), 4)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_a_run_from_frames_learns_without_errors(tmp_path, algo):
    _, summary = rlfoundry.train(f"Pendulum-v1:{algo}", [
        *FRAMES, "logging.progress=false", "logging.tensorboard=false", "train.total_timesteps=300",
        "algo.learning_starts=100", "algo.batch_size=16", "eval.every_steps=0", "eval.episodes=1"], tmp_path / "run")
    assert summary["status"] == "finished" and summary["total_steps"] == 300
