"""PlaNet's config and agent checks (its CEM is tested in test_planning.py, its RSSM form in test_rssm.py, its
resume in tests/e2e/test_resume.py)."""

import pytest
import torch

from rlfoundry import envs as envs_lib
from rlfoundry.algos import Runtime
from rlfoundry.algos.planet import PlaNet, PlaNetConfig
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import PixelsConfig
from rlfoundry.experiment.load import load_config
from rlfoundry.world_models import vision


def test_planet_defaults_are_the_papers():
    cfg = PlaNetConfig()
    rssm = cfg.model.rssm
    assert (rssm.deter, rssm.stoch, rssm.classes, rssm.blocks, rssm.norm, rssm.act, rssm.min_std) == \
           (200, 30, 0, 0, False, "relu", 0.1)
    assert (cfg.model.free_nats, cfg.model.kl_balance, cfg.model.reward_head, cfg.model.continue_head) == \
           (3.0, False, "normal", False)
    assert cfg.model.loss_scales.rew == 10.0
    assert (cfg.batch_size, cfg.batch_length, cfg.plan_horizon, cfg.candidates, cfg.top_k, cfg.iterations) == \
           (50, 50, 12, 1000, 100, 10)


def test_a_partial_model_section_changes_only_what_it_gives():
    cfg = PlaNetConfig.model_validate({"model": {"rssm": {"deter": 64}, "units": 32}})
    assert (cfg.model.rssm.deter, cfg.model.rssm.stoch, cfg.model.rssm.classes, cfg.model.units) == (64, 30, 0, 32)
    assert not cfg.model.kl_balance and cfg.model.loss_scales.rew == 10.0
    with pytest.raises(ConfigError, match="top_k = 2000: at most algo.candidates"):
        load_config("rlfoundry/Reach-v0:planet", ["algo.top_k=2000"])


def test_planet_plans_box_actions_from_vectors_or_64_pixel_images():
    cfg = load_config("rlfoundry/Reach-v0:planet")
    envs, cartpole = envs_lib.build(cfg.env.model_copy(update={"id": "CartPole-v1"}))
    envs.close()
    with pytest.raises(ConfigError, match="planet. acts in Box action spaces; CartPole-v1 has Discrete"):
        PlaNet(cfg, cartpole, Runtime.of(cfg.train))
    envs, small = envs_lib.build(cfg.env.model_copy(update={"id": "Pendulum-v1", "pixels": PixelsConfig(
        enabled=True, img_size=48)}))
    envs.close()
    with pytest.raises(ConfigError, match=r"uint8 images \[C, 64, 64\] \(PlaNet's CNNs\)"):
        PlaNet(cfg, small, Runtime.of(cfg.train))


def test_planets_cnns_keep_the_papers_shapes_and_5_bit_inputs():
    encoder, decoder = vision.PlaNetEncoder((3, 64, 64)), vision.PlaNetDecoder((3, 64, 64), 230)
    images = torch.randint(0, 256, (2, 5, 3, 64, 64), dtype=torch.uint8)
    inputs = vision.network_input(images, "planet", 5)
    kept = torch.floor(images.float() / 8) / 32 - 0.5  # 5 bits, centred; the noise adds [0, 1/32)
    assert ((inputs - kept) >= 0).all() and ((inputs - kept) < 1 / 32 + 1e-6).all() and (inputs - kept).std() > 0.005
    assert encoder(inputs).shape == (2, 5, 1024) and encoder.output_size == 1024
    assert decoder(torch.randn(2, 5, 230)).shape == (2, 5, 3, 64, 64)
    assert torch.equal(vision.network_input(images, "dreamerv3"), images.float() / 255)


def test_planet_learns_from_pixels():
    """A tiny PlaNet from Pendulum's rendered frames: seed episodes, then updates whose image loss falls."""
    cfg = load_config("rlfoundry/Reach-v0:planet", [
        "algo.model.rssm.deter=16", "algo.model.rssm.hidden=16", "algo.model.rssm.stoch=4", "algo.model.units=16",
        "algo.batch_size=4", "algo.batch_length=8", "algo.seed_episodes=2", "algo.updates_per_episode=8",
        "algo.candidates=8", "algo.top_k=2", "algo.iterations=2", "algo.plan_horizon=3", "algo.collect_steps=16"])
    envs, spec = envs_lib.build(cfg.env.model_copy(update={"id": "Pendulum-v1", "max_episode_steps": 16,
                                                          "pixels": PixelsConfig(enabled=True)}))
    torch.manual_seed(0)
    agent = PlaNet(cfg, spec, Runtime.of(cfg.train))
    losses = []
    for _ in range(8):
        metrics = agent.iterate(envs, 0.0).metrics
        if "loss/rec" in metrics:
            losses.append(metrics["loss/rec"])
    envs.close()
    assert agent.model.images and agent.updates >= 40 and len(losses) >= 5
    assert max(losses[-2:]) < 0.7 * losses[0], losses
