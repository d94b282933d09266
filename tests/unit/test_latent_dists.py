"""The latent world models' distributions (`world_models/dists.py`) against hand computations."""

import math

import pytest
import torch

from rlfoundry.world_models import dists


def test_symlog_and_symexp_invert_each_other():
    x = torch.tensor([-1e6, -1e3, -1.0, -1e-3, 0.0, 1e-3, 1.0, 1e3, 1e6], dtype=torch.float64)
    assert torch.allclose(dists.symexp(dists.symlog(x)), x, rtol=1e-12)
    assert dists.symlog(torch.tensor([math.e - 1])).item() == pytest.approx(1.0)
    assert dists.symlog(torch.tensor([-(math.e - 1)])).item() == pytest.approx(-1.0)


def test_two_hot_bins_are_symmetric_with_an_exact_zero():
    twohot = dists.TwoHot()
    bins = twohot.bins
    assert len(bins) == 255 and bins[127] == 0
    assert torch.equal(bins, -bins.flip(0))
    assert bins[-1].item() == pytest.approx(math.expm1(20.0), rel=1e-6)
    assert torch.all(bins[1:] > bins[:-1])


@pytest.mark.parametrize("y", [0.0, 1.0, -1.0, 0.37, 1e3, -1e3, 12345.6])
def test_two_hot_round_trips(y):
    twohot = dists.TwoHot()
    target = twohot.target(torch.tensor([y]))
    assert target.sum().item() == pytest.approx(1.0)
    assert (target > 0).sum() <= 2
    # the target's own expectation is y: logits = log(target) decode back to it
    decoded = twohot.mean(target.clamp(min=1e-30).log())
    assert decoded.item() == pytest.approx(y, rel=1e-5, abs=1e-6)


def test_two_hot_interpolates_in_raw_space_and_clips_at_the_edges():
    twohot = dists.TwoHot(bins=5, low=-2.0, high=2.0)  # bins symexp(-2, -1, 0, 1, 2)
    e1, e2 = math.e - 1, math.exp(2) - 1
    assert twohot.bins.tolist() == pytest.approx([-e2, -e1, 0.0, e1, e2])
    target = twohot.target(torch.tensor([0.5 * e1, 100.0, -100.0]))
    assert target[0].tolist() == pytest.approx([0, 0, 0.5, 0.5, 0])
    assert target[1].tolist() == pytest.approx([0, 0, 0, 0, 1])
    assert target[2].tolist() == pytest.approx([1, 0, 0, 0, 0])
    # a point between bins 3 and 4: its weight on bin 4 is its fraction of the raw distance
    y = e1 + 0.25 * (e2 - e1)
    assert twohot.target(torch.tensor([y]))[0].tolist() == pytest.approx([0, 0, 0, 0.75, 0.25])


def test_a_zero_initialised_head_predicts_exactly_zero():
    twohot = dists.TwoHot()
    assert twohot.mean(torch.zeros(4, 255)).abs().max().item() == 0.0


def test_two_hot_loss_is_the_cross_entropy_against_the_target():
    twohot = dists.TwoHot(bins=5, low=-2.0, high=2.0)
    logits = torch.tensor([[0.1, -0.3, 0.7, 0.2, -1.0]])
    y = torch.tensor([0.5 * (math.e - 1)])
    log_p = logits.log_softmax(-1)[0]
    assert twohot.loss(logits, y).item() == pytest.approx(-(0.5 * log_p[2] + 0.5 * log_p[3]).item())


def test_unimix_bounds_every_probability():
    logits = torch.tensor([[30.0, -30.0, 0.0, -5.0]])
    probs = dists.unimix_logits(logits, 0.01).exp()
    assert probs.sum().item() == pytest.approx(1.0)
    assert probs.min().item() >= 0.01 / 4 - 1e-9
    assert probs[0, 0].item() == pytest.approx(0.99 * logits.softmax(-1)[0, 0].item() + 0.0025)


def test_straight_through_samples_are_one_hot_with_the_probabilities_gradient():
    logits = torch.randn(64, 32, 4, requires_grad=True)
    sample = dists.straight_through_sample(logits, torch.Generator().manual_seed(0))
    values = sample.detach()
    assert torch.allclose(values, values.round(), atol=1e-6)  # one-hot up to the rounding of p - sg(p)
    assert torch.equal(values.round().sum(-1), torch.ones(64, 32))
    weights = torch.randn(4)
    (sample * weights).sum().backward()
    probs = logits.detach().softmax(-1)
    expected = probs * (weights - (probs * weights).sum(-1, keepdim=True))  # d(p·w)/dlogits
    assert torch.allclose(logits.grad, expected, atol=1e-6)


def test_categorical_kl_sums_over_the_latent_variables():
    p = torch.tensor([[[0.0, 0.0], [1.0, 0.0]]])  # two variables of two classes
    q = torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])
    def kl2(a, b):  # KL of two 2-class distributions given as logits
        pa, pb = a.softmax(-1), b.softmax(-1)
        return (pa * (pa / pb).log()).sum().item()
    expected = kl2(p[0, 0], q[0, 0]) + kl2(p[0, 1], q[0, 1])
    assert dists.categorical_kl(p, q).item() == pytest.approx(expected)


def test_gaussian_kl_against_the_closed_form():
    mp, sp, mq, sq = map(torch.tensor, ([0.5, -1.0], [0.8, 1.5], [0.0, 0.0], [1.0, 2.0]))
    expected = sum(math.log(b / a) + (a * a + (m - n) ** 2) / (2 * b * b) - 0.5
                   for m, a, n, b in zip(mp.tolist(), sp.tolist(), mq.tolist(), sq.tolist()))
    assert dists.gaussian_kl(mp, sp, mq, sq).item() == pytest.approx(expected, rel=1e-6)


def test_kl_balance_free_bits_and_gradients():
    post = torch.tensor([[[2.0, 0.0, -1.0]]], requires_grad=True)  # one variable of 3 classes
    prior = torch.tensor([[[0.0, 0.5, 0.0]]], requires_grad=True)
    kl = dists.categorical_kl(post, prior).item()
    assert kl > 0.5
    dyn, rep = dists.kl_balance(dists.categorical_kl, (post,), (prior,), free=0.5)
    assert dyn.item() == pytest.approx(kl) and rep.item() == pytest.approx(kl)
    # dyn trains only the prior, rep only the posterior
    dyn.sum().backward()
    assert post.grad is None and prior.grad.abs().sum() > 0
    prior.grad = None
    rep.sum().backward()
    assert prior.grad is None and post.grad.abs().sum() > 0
    # below the free bits: the floor, and no gradient at all
    post.grad = None
    dyn, rep = dists.kl_balance(dists.categorical_kl, (post,), (prior,), free=10.0)
    assert dyn.item() == 10.0 and rep.item() == 10.0
    (dyn + rep).sum().backward()
    assert post.grad.abs().sum() == 0 and prior.grad.abs().sum() == 0


def test_bounded_normal_keeps_the_std_in_range():
    out = torch.tensor([[100.0, -100.0, 100.0, -100.0]])
    dist = dists.bounded_normal(out, 0.1, 1.0)
    assert dist.mean[0].tolist() == pytest.approx([1.0, -1.0])
    assert dist.stddev[0].tolist() == pytest.approx([1.0, 0.1])
    assert dists.bounded_normal(torch.zeros(1, 2)).stddev.item() == pytest.approx(0.9 * torch.sigmoid(torch.tensor(2.0)).item() + 0.1)


def test_straight_through_samples_follow_the_probabilities():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    samples = dists.straight_through_sample(probs.log().expand(200_000, 4), torch.Generator().manual_seed(0))
    assert torch.allclose(samples.detach().mean(0), probs, atol=0.004)  # 4 standard errors at most
