"""The recurrent state-space model (`world_models/rssm.py`) in both its forms: DreamerV3's categorical latents with a
block GRU, PlaNet's Gaussian latents with a GRU cell."""

import pytest
import torch

from rlfoundry.world_models.rssm import RSSM, RSSMConfig, State

DREAMER = RSSMConfig(deter=32, hidden=16, stoch=4, classes=3, blocks=4)
PLANET = RSSMConfig(deter=24, hidden=16, stoch=5, classes=0, blocks=0, prior_layers=1, norm=False, act="relu")
FORMS = {"dreamer": DREAMER, "planet": PLANET}


def build(cfg, discrete=False):
    torch.manual_seed(0)
    return RSSM(cfg, action_size=3, embed_size=7, discrete_actions=discrete)


def sequence(T=9, N=4, discrete=False):
    g = torch.Generator().manual_seed(1)
    actions = torch.randint(0, 3, (T, N), generator=g) if discrete else 2 * torch.randn(T, N, 3, generator=g)
    embeds = torch.randn(T, N, 7, generator=g)
    is_first = torch.zeros(T, N, dtype=torch.bool)
    is_first[0, 1] = is_first[4, 0] = is_first[6, 2] = True
    return actions, embeds, is_first


@pytest.mark.parametrize("form", FORMS)
def test_the_sequence_rollout_equals_step_by_step_with_resets_inside(form):
    model = build(FORMS[form])
    actions, embeds, is_first = sequence()
    start = State(torch.randn(4, model.cfg.deter), model.initial(4).stoch + 0.3)
    inputs = model.action_input(actions)
    states, post, prior = model.observe(start, inputs, embeds, is_first, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    state = start
    for t in range(9):
        state, stats = model.observe_step(state, inputs[t], embeds[t], is_first[t], g)
        assert torch.allclose(states.deter[t], state.deter, atol=1e-6)
        assert torch.allclose(states.stoch[t], state.stoch, atol=1e-6)
        assert all(torch.allclose(a[t], b, atol=1e-6) for a, b in zip(post, stats))
        assert all(torch.allclose(a[t], b, atol=1e-6) for a, b in zip(prior, model.prior(state.deter)))
    # at an episode start the state is that of a model started there from zeros, whatever came before
    with torch.no_grad():
        again, _ = model.observe_step(model.initial(1), inputs[4, :1], embeds[4, :1], torch.ones(1, dtype=torch.bool))
    assert torch.allclose(states.deter[4, 0], again.deter[0], atol=1e-6)
    assert not torch.allclose(states.deter[4, 1], again.deter[0], atol=1e-3)  # env 1 went on from its state


def test_categorical_latents_are_one_hots_mixed_with_one_percent_uniform():
    model = build(DREAMER)
    (logits,) = model.prior(torch.randn(50, 32) * 30)
    probs = logits.exp()
    assert torch.allclose(probs.sum(-1), torch.ones(50, 4))
    assert probs.min() >= 0.01 / 3 - 1e-7
    state, _ = model.imagine_step(model.initial(50), model.action_input(torch.randn(50, 3)))
    one_hots = state.stoch.detach().reshape(50, 4, 3)
    assert torch.allclose(one_hots.sum(-1), torch.ones(50, 4), atol=1e-6)


def test_gaussian_latents_keep_their_minimum_std():
    model = build(PLANET)
    mean, std = model.posterior(torch.randn(20, 24) * 50, torch.randn(20, 7) * 50)
    assert mean.shape == std.shape == (20, 5) and std.min() >= 0.1


@pytest.mark.parametrize("form", FORMS)
def test_gradients_reach_the_encoder_side_the_prior_and_the_core(form):
    model = build(FORMS[form])
    actions, embeds, is_first = sequence()
    embeds.requires_grad_(True)
    states, post, prior = model.observe(model.initial(4), model.action_input(actions), embeds, is_first)
    dyn = model.kl(*(t.detach() for t in post), *prior).mean()
    dyn.backward(retain_graph=True)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.prior_net.parameters())
    core = model.block_gates if model.cfg.blocks else model.cell
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in core.parameters())  # dyn reaches h too
    model.zero_grad()
    rep = model.kl(*post, *(t.detach() for t in prior)).mean()
    rep.backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.prior_net.parameters())
    assert embeds.grad.abs().sum() > 0


def test_discrete_actions_enter_as_one_hots_and_continuous_ones_bounded():
    model = build(DREAMER, discrete=True)
    assert model.action_input(torch.tensor([2, 0])).tolist() == [[0, 0, 1], [1, 0, 0]]
    continuous = build(DREAMER)
    assert continuous.action_input(torch.tensor([[0.5, -3.0, 2.0]])).tolist() == [[0.5, -1.0, 1.0]]
