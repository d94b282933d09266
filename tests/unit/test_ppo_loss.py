"""ppo_loss against hand computations."""

import math

import pytest
import torch

from rlfoundry.algos.ppo import explained_variance, ppo_loss


def call(**overrides):
    args = dict(
        logprobs=torch.log(torch.tensor([0.6, 0.3])),
        old_logprobs=torch.log(torch.tensor([0.4, 0.3])),
        advantages=torch.tensor([1.0, -2.0]),
        values=torch.tensor([1.0, 3.0]),
        old_values=torch.tensor([0.5, 3.0]),
        returns=torch.tensor([2.0, 2.0]),
        entropy=torch.tensor([0.5, 0.7]),
        clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, clip_vloss=False,
    )
    args.update(overrides)
    return ppo_loss(**args)


def test_clipped_surrogate_value_and_entropy_by_hand():
    loss, stats = call()
    # ratios 1.5 and 1.0. Sample 0 (A=+1): min(1.5, 1.2) → -1.2 in the loss; sample 1 (A=-2): 2.0.
    policy = (-1.2 + 2.0) / 2
    value = ((1 - 2) ** 2 + (3 - 2) ** 2) / 2
    entropy = 0.6
    assert stats["loss/policy"].item() == pytest.approx(policy)
    assert stats["loss/value"].item() == pytest.approx(value)
    assert stats["loss/entropy"].item() == pytest.approx(entropy)
    assert loss.item() == pytest.approx(policy + 0.5 * value - 0.01 * entropy)
    assert stats["diag/clipfrac"].item() == pytest.approx(0.5)
    kl = ((1.5 - 1) - math.log(1.5) + 0) / 2
    assert stats["diag/approx_kl"].item() == pytest.approx(kl, rel=1e-5)


def test_negative_advantage_is_clipped_from_below():
    # ratio 0.5 with A = -1: the pessimistic term is -A * max(0.5, 0.8) = 0.8
    _, stats = call(logprobs=torch.log(torch.tensor([0.2])), old_logprobs=torch.log(torch.tensor([0.4])),
                    advantages=torch.tensor([-1.0]), values=torch.zeros(1), old_values=torch.zeros(1),
                    returns=torch.zeros(1), entropy=torch.zeros(1))
    assert stats["loss/policy"].item() == pytest.approx(0.8)


def test_value_clipping_takes_the_larger_error():
    # old value 0.5, new 1.0, return 2.0, clip 0.2: clipped prediction 0.7 → error 1.69 > 1.0
    _, stats = call(values=torch.tensor([1.0]), old_values=torch.tensor([0.5]), returns=torch.tensor([2.0]),
                    logprobs=torch.zeros(1), old_logprobs=torch.zeros(1), advantages=torch.zeros(1),
                    entropy=torch.zeros(1), clip_vloss=True)
    assert stats["loss/value"].item() == pytest.approx(1.3 ** 2)


def test_gradient_flows_only_through_new_quantities():
    logprobs = torch.log(torch.tensor([0.6, 0.3])).requires_grad_()
    values = torch.tensor([1.0, 3.0], requires_grad=True)
    loss, _ = call(logprobs=logprobs, values=values)
    loss.backward()
    # sample 0 is clipped (ratio 1.5 > 1.2 with A > 0): no policy gradient through it
    assert logprobs.grad[0].item() == 0.0
    assert logprobs.grad[1].item() != 0.0
    assert values.grad is not None


def test_explained_variance():
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(target, target) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(target, 2.5), target) == pytest.approx(0.0)
