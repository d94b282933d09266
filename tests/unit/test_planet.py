"""PlaNet's config and agent checks (its CEM is tested in test_planning.py, its RSSM form in test_rssm.py, its
resume in tests/e2e/test_resume.py)."""

import pytest
import torch

from rlfoundry import envs as envs_lib
from rlfoundry.algos.planet import PlaNet, PlaNetConfig
from rlfoundry.config.errors import ConfigError
from rlfoundry.spec.load import load_config


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


def test_planet_plans_box_actions_from_vectors_only():
    cfg = load_config("rlfoundry/Reach-v0:planet")
    envs, cartpole = envs_lib.make(cfg.env.model_copy(update={"id": "CartPole-v1"}))
    envs.close()
    with pytest.raises(ConfigError, match="plans 1-D Box actions from vector observations"):
        PlaNet(cfg, cartpole, torch.device("cpu"))
