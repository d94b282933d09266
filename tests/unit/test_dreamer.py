"""DreamerV3's pieces that need the agent: the model sizes, the update ratio, the world model fitting a fixed batch,
and the replay value targets. The λ-returns, two-hot, KL balance, optimizer and RSSM have their own tests; exact
resume is a case of tests/e2e/test_resume.py."""

import numpy as np
import pytest
import torch

from rlfoundry import envs as envs_lib
from rlfoundry.algos import Runtime
from rlfoundry.algos.dreamer import Dreamer, DreamerConfig
from rlfoundry.experiment.load import load_config

TINY = ["algo.model.rssm.deter=32", "algo.model.rssm.hidden=16", "algo.model.rssm.blocks=4", "algo.model.units=32",
        "algo.units=32", "algo.batch_size=4", "algo.batch_length=8"]


def agent_for(spec: str, overrides: list[str], **env):
    cfg = load_config(spec, overrides)
    if env:  # another env under the same config (ids with a preset cannot take another algorithm)
        cfg = cfg.model_copy(update={"env": cfg.env.model_copy(update=env)})
    envs, env_spec = envs_lib.build(cfg.env)
    torch.manual_seed(0)
    return Dreamer(cfg, env_spec, Runtime.of(cfg.train)), envs


def test_a_named_size_fills_what_is_not_given():
    big = DreamerConfig(size="size12m")
    assert (big.model.rssm.deter, big.model.rssm.hidden, big.model.rssm.classes, big.model.units, big.units) == \
           (2048, 256, 16, 256, 256)
    mixed = DreamerConfig.model_validate({"size": "size12m", "model": {"rssm": {"deter": 1024}}, "units": 128})
    assert (mixed.model.rssm.deter, mixed.model.rssm.hidden, mixed.units) == (1024, 256, 128)
    assert DreamerConfig().model.rssm.deter == 512  # size1m by default
    with pytest.raises(ValueError, match="size"):
        DreamerConfig(size="size3m")


def test_updates_follow_the_train_ratio_with_fractions_carried_over():
    agent, envs = agent_for("MountainCarContinuous-v0:dreamer", [*TINY, "algo.train_ratio=12", "algo.collect_steps=1"])
    updates = []
    for _ in range(100):
        agent.iterate(envs, 0.0)
        updates.append(agent.updates)
    envs.close()
    # training starts once the replay holds batch_size · batch_length = 32 observations (the first one and 31 env
    # steps), with one update at once, then 12 / 32 updates per env step
    first = next(i for i, n in enumerate(updates) if n > 0)
    assert first == 30 and updates[first] == 1
    assert updates[-1] - updates[first] == int((100 - 1 - first) * 12 / 32)


def test_the_world_model_fits_a_fixed_batch():
    agent, envs = agent_for("MountainCarContinuous-v0:dreamer", [*TINY, "algo.train_ratio=1", "algo.collect_steps=64"])
    agent.iterate(envs, 0.0)
    envs.close()
    batch = agent.replay.sample(4, 8, np.random.default_rng(0))
    model, rssm = agent.model, agent.model.rssm
    tensor = lambda a: torch.as_tensor(a).transpose(0, 1)
    obs, actions, rewards = tensor(batch.obs), tensor(batch.actions), tensor(batch.rewards)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(150):
        torch.manual_seed(0)
        terms, _ = model.loss(rssm.initial(4), obs[1:], rssm.action_input(actions[:-1]), rewards[1:],
                              tensor(batch.is_first)[1:], tensor(batch.is_terminal)[1:], agent.gamma)
        losses.append({name: value.mean().item() for name, value in terms.items()})
        optimizer.zero_grad()
        terms["loss"].mean().backward()
        optimizer.step()
    assert losses[-1]["rec"] < 0.05 * losses[0]["rec"]
    assert losses[-1]["rew"] < 0.2 * losses[0]["rew"]
    assert losses[-1]["con"] < 0.2 * losses[0]["con"]


def test_images_whose_size_the_cnns_cannot_halve_four_times_are_refused():
    from rlfoundry.config.errors import ConfigError

    cfg = load_config("MountainCarContinuous-v0:dreamer", TINY)
    envs, catch = envs_lib.build(cfg.env.model_copy(update={"id": "rlfoundry/Catch-v0"}))  # 20 × 16
    envs.close()
    with pytest.raises(ConfigError, match="divisible by 16"):
        Dreamer(cfg, catch, Runtime.of(cfg.train))


def test_the_image_encoder_and_decoder_keep_the_reference_shapes():
    from rlfoundry.world_models.vision import ImageDecoder, ImageEncoder

    encoder = ImageEncoder((3, 64, 64), depth=4)
    images = torch.randint(0, 256, (2, 5, 3, 64, 64), dtype=torch.uint8)
    assert encoder(images.float() / 255).shape == (2, 5, 16 * 4 * 4) and encoder.output_size == 256
    decoder = ImageDecoder((3, 64, 64), depth=4, deter=64, stoch=32, units=16)
    feats = torch.randn(2, 5, 96, requires_grad=True)
    out = decoder(feats)
    assert out.shape == (2, 5, 3, 64, 64) and 0 <= out.min() and out.max() <= 1
    out.sum().backward()
    assert feats.grad[..., :64].abs().sum() > 0 and feats.grad[..., 64:].abs().sum() > 0


def test_dreamer_trains_from_pixels():
    agent, envs = agent_for("MountainCarContinuous-v0:dreamer", [*TINY, "algo.train_ratio=16", "algo.collect_steps=48"],
                            id="rlfoundry/Catch-v0", kwargs={"height": 16, "width": 16, "grayscale": True,
                                                             "frame_stack": 1})
    assert agent.model.images
    iteration = agent.iterate(envs, 0.0)
    envs.close()
    assert agent.updates > 0 and all(np.isfinite(v) for v in iteration.metrics.values())
    assert iteration.metrics["loss/rec"] > 0


def test_an_ale_id_without_a_preset_gets_the_reference_atari_100k_env():
    cfg = load_config("ALE/Boxing-v5:dreamer")
    atari = cfg.env.atari
    assert (tuple(atari.img_size) if not isinstance(atari.img_size, int) else atari.img_size) == (64, 64)
    assert (atari.grayscale, atari.frame_stack, atari.frame_skip, atari.repeat_action_probability) == (False, 1, 4, 0.0)
    assert not atari.reward_clipping and not atari.episodic_life
    assert (cfg.algo.train_ratio, cfg.train.total_timesteps) == (256, 110_000)


@pytest.mark.parametrize("spec", ["ALE/Boxing-v5:dreamer", "ALE/Breakout-v5:dreamer", "ALE/Pong-v5:dreamer"])
def test_dreamer_on_atari_steps_the_single_backend_whose_emulators_resume_exactly(spec):
    assert load_config(spec).env.atari.backend == "single"


@pytest.mark.parametrize("spec", ["MountainCarContinuous-v0:dreamer", "CartPole-v1:dreamer"])
def test_a_deterministic_policy_gives_the_same_actions_for_the_same_observations(spec):
    """predict(deterministic=True) takes the posterior latent's mode as well as the policy's: calls from the same
    (fresh) memory agree whatever torch's generator holds; sampling still varies."""
    agent, envs = agent_for(spec, TINY)
    obs, _ = envs.reset(seed=0)
    envs.close()
    obs = np.repeat(obs, 8, axis=0)  # 8 envs, the same observation
    first = agent.predict(obs, deterministic=True)
    torch.manual_seed(123)
    again = agent.predict(obs, deterministic=True)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, np.repeat(first[:1], 8, axis=0))
    sampled = np.stack([agent.predict(obs, deterministic=False) for _ in range(4)])
    assert len(np.unique(sampled.reshape(-1, *sampled.shape[2:]), axis=0)) > 1
