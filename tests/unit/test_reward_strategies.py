"""MBARC's reward strategies: sampled frequencies against shares computed by hand from the class counts, the mbarc
categories at episode boundaries, and the class-balanced focal loss against a hand computation."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlfoundry.world_models.reward_strategies import (
    MBARC_DIST,
    REWARD_BATCH_SIZE,
    REWARD_STEPS_PER_EPOCH,
    SAMPLED_STRATEGIES,
    STRATEGIES,
    class_balanced_focal_loss,
    class_balanced_indices,
    mbarc_categories,
    mbarc_indices,
    progressively_balanced_indices,
    progressively_balanced_schedule,
    reward_training_indices,
    square_root_indices,
)

DRAWS = 200_000
TOL = 0.005  # a share's standard error over 200k draws is <= 0.0012: TOL is ~4 of them

# Classes 0/1/2 = rewards -1/0/+1. n_0 = 2 (indices 4, 13), n_2 = 6 (2, 7, 10, 14, 16, 19), n_1 = 12; N = 20.
REWARDS = np.array([1, 1, 2, 1, 0, 1, 1, 2, 1, 1, 2, 1, 1, 0, 2, 1, 2, 1, 1, 2], dtype=np.uint8)
NO_ENDS = np.zeros(20, dtype=bool)
ALL = np.ones(20, dtype=bool)


def shares(indices, labels, n=3):
    return np.bincount(labels[indices], minlength=n) / len(indices)


def per_index(indices, size):
    return np.bincount(indices, minlength=size) / len(indices)


def expected_per_index(labels, weight_of_label):
    """Each transition's probability when it is drawn with the weight of its label."""
    w = np.array([weight_of_label[int(label)] for label in labels])
    return w / w.sum()


def test_class_balanced_weight_is_one_minus_the_class_frequency():
    idx = class_balanced_indices(REWARDS, NO_ENDS, ALL, DRAWS, np.random.default_rng(0))
    assert idx.dtype == np.int64 and idx.shape == (DRAWS,)
    # w_c = 1 - n_c/N = 1 - 2/20, 1 - 12/20, 1 - 6/20 = 0.9, 0.4, 0.7; class mass n_c·w_c = 1.8, 4.8, 4.2 of 10.8.
    # (Natural frequencies would be 0.1/0.6/0.3 and inverse-frequency weights 1/3 each: both far outside TOL.)
    np.testing.assert_allclose(shares(idx, REWARDS), [1.8 / 10.8, 4.8 / 10.8, 4.2 / 10.8], atol=TOL)
    np.testing.assert_allclose(per_index(idx, 20), expected_per_index(REWARDS, {0: 0.9, 1: 0.4, 2: 0.7}), atol=TOL)


def test_class_balanced_gives_two_present_classes_equal_mass():
    rewards = np.array([1, 1, 2, 1, 1, 2, 2, 1, 1, 2], dtype=np.uint8)  # n_1 = 6, n_2 = 4
    idx = class_balanced_indices(rewards, NO_ENDS[:10], ALL[:10], DRAWS, np.random.default_rng(1))
    # mass 6·(1 - 6/10) = 2.4 and 4·(1 - 4/10) = 2.4: half each; class 0 is empty and gets nothing
    np.testing.assert_allclose(shares(idx, rewards), [0.0, 0.5, 0.5], atol=TOL)


@pytest.mark.parametrize("sampler", [class_balanced_indices, square_root_indices])
def test_one_class_present_is_drawn_uniformly(sampler):
    rewards = np.ones(5, dtype=np.uint8)  # weight 1 - 5/5 = 0 for every transition: uniform, as MB's 1e-4 floor
    idx = sampler(rewards, NO_ENDS[:5], ALL[:5], DRAWS, np.random.default_rng(2))
    np.testing.assert_allclose(per_index(idx, 5), np.full(5, 0.2), atol=TOL)


def test_square_root_weight():
    idx = square_root_indices(REWARDS, NO_ENDS, ALL, DRAWS, np.random.default_rng(3))
    # w_c = 1 - sqrt(n_c) / (sqrt 2 + sqrt 12 + sqrt 6) ≈ 0.8070, 0.5273, 0.6657;
    # shares n_c·w_c / Σ ≈ .135 .530 .335 (natural 0.1/0.6/0.3, class_balanced .167/.444/.389)
    total = math.sqrt(2) + math.sqrt(12) + math.sqrt(6)
    w = {c: 1 - math.sqrt(n) / total for c, n in ((0, 2), (1, 12), (2, 6))}
    mass = np.array([2 * w[0], 12 * w[1], 6 * w[2]])
    np.testing.assert_allclose(shares(idx, REWARDS), mass / mass.sum(), atol=TOL)
    np.testing.assert_allclose(per_index(idx, 20), expected_per_index(REWARDS, w), atol=TOL)


@pytest.mark.parametrize("stage", [0, 25, 50])
def test_progressively_balanced_stage_mixes_the_weights(stage):
    idx = progressively_balanced_indices(REWARDS, NO_ENDS, ALL, DRAWS, np.random.default_rng(4), stage=stage)
    # s = t/50; w_c = (1 - s)/3 + s·(1 - n_c/20). Stage 0: 1/3 each → natural shares 0.1/0.6/0.3. Stage 25:
    # w = 0.6167, 0.3667, 0.5167 → shares 1.2333/8.7333, 4.4/8.7333, 3.1/8.7333 ≈ .141 .504 .355 (mixing the two
    # distributions instead would give .133 .522 .344). Stage 50: class_balanced, 1.8/10.8, 4.8/10.8, 4.2/10.8.
    s = stage / 50
    w = {c: (1 - s) / 3 + s * (1 - n / 20) for c, n in ((0, 2), (1, 12), (2, 6))}
    mass = np.array([2 * w[0], 12 * w[1], 6 * w[2]])
    np.testing.assert_allclose(shares(idx, REWARDS), mass / mass.sum(), atol=TOL)


def test_progressively_balanced_schedule_is_stages_of_641_draws_cut_at_32000():
    steps = REWARD_STEPS_PER_EPOCH["progressively_balanced"] * REWARD_BATCH_SIZE  # 32,000
    idx = progressively_balanced_schedule(REWARDS, NO_ENDS, ALL, steps, np.random.default_rng(5))
    # 32000 // 50 + 1 = 641 per stage: stages 0..48 whole (49·641 = 31409), stage 49 the last 591, stage 50 unused
    rng = np.random.default_rng(5)
    by_hand = [progressively_balanced_indices(REWARDS, NO_ENDS, ALL, 641 if t < 49 else 591, rng, stage=t)
               for t in range(50)]
    assert idx.shape == (32_000,)
    np.testing.assert_array_equal(idx, np.concatenate(by_hand))


# Rewards -1/0/+1 (classes 0/1/2) over three episodes (ends at 7, 14, 17) and one unfinished.
MIXED = np.array([1, 2, 1, 1, 0, 1, 1, 2, 1, 1, 0, 0, 1, 1, 1, 1, 2, 1, 1, 1], dtype=np.uint8)
MIXED_ENDS = np.zeros(20, dtype=bool)
MIXED_ENDS[[7, 14, 17]] = True
# 2 = rewarded (+1 or -1): 1, 4, 7, 10, 11, 16. 1 = zero reward right after a rewarded transition of the same
# episode: 2 (after +1), 5 (after -1), 12 (after -1), 17 (after +1, itself an end). 8 follows the +1 at 7, but 7
# ended its episode, so 8 is category 0 like the other zero rewards.
MIXED_CATEGORIES = np.array([0, 2, 1, 0, 2, 1, 0, 2, 0, 0, 2, 2, 1, 0, 0, 0, 2, 1, 0, 0], dtype=np.uint8)


def test_mbarc_categories_with_negative_rewards_and_episode_boundaries():
    categories = mbarc_categories(MIXED, MIXED_ENDS)
    assert categories.dtype == np.uint8
    np.testing.assert_array_equal(categories, MIXED_CATEGORIES)
    assert categories[8] == 0  # the first transition of an episode is not "right after" the last one's reward


def test_mbarc_draws_each_category_with_its_share():
    idx = mbarc_indices(MIXED, MIXED_ENDS, ALL, DRAWS, np.random.default_rng(6))
    # sizes m = 10, 4, 6; shares d = 0.35, 0.05, 0.60 by category (natural shares would be 0.5, 0.2, 0.3);
    # within a category uniform: d_k/m_k = 0.035, 0.0125, 0.1 per transition
    np.testing.assert_allclose(shares(idx, MIXED_CATEGORIES), MBARC_DIST, atol=TOL)
    np.testing.assert_allclose(per_index(idx, 20), expected_per_index(MIXED_CATEGORIES, {0: 0.035, 1: 0.0125,
                                                                                        2: 0.1}), atol=TOL)


def test_mbarc_spreads_an_empty_category_over_the_others():
    usable = ALL.copy()
    usable[[2, 5, 12, 17]] = False  # category 1 has nothing usable: 0.35 and 0.60 are renormalised over 0.95
    idx = mbarc_indices(MIXED, MIXED_ENDS, usable, DRAWS, np.random.default_rng(7))
    np.testing.assert_allclose(shares(idx, MIXED_CATEGORIES), [0.35 / 0.95, 0.0, 0.60 / 0.95], atol=TOL)


@pytest.mark.parametrize("strategy", SAMPLED_STRATEGIES)
def test_unusable_transitions_are_never_drawn(strategy):
    usable = ALL.copy()
    usable[[0, 1, 4, 9, 16]] = False  # one of the two -1s, two of the +1s, and zero rewards
    idx = reward_training_indices(strategy, MIXED, MIXED_ENDS, usable, 50_000, np.random.default_rng(8))
    assert idx.dtype == np.int64 and idx.shape == (50_000,)
    assert usable[idx].all()
    assert set(np.unique(idx)) == set(np.flatnonzero(usable))  # and every usable one is


def test_class_counts_are_over_usable_transitions():
    usable = ALL.copy()
    usable[[2, 7, 10, 14]] = False  # usable counts: n_0 = 2, n_1 = 12, n_2 = 2 of N = 16
    idx = class_balanced_indices(REWARDS, NO_ENDS, usable, DRAWS, np.random.default_rng(9))
    # w = 1 - 2/16, 1 - 12/16, 1 - 2/16 = 0.875, 0.25, 0.875; mass 1.75, 3, 1.75 of 6.5
    np.testing.assert_allclose(shares(idx, REWARDS), [1.75 / 6.5, 3 / 6.5, 1.75 / 6.5], atol=TOL)


def test_dispatch_matches_the_strategy_functions():
    for strategy, direct in (("class_balanced", class_balanced_indices), ("square_root", square_root_indices),
                             ("progressively_balanced", progressively_balanced_schedule), ("mbarc", mbarc_indices)):
        got = reward_training_indices(strategy, MIXED, MIXED_ENDS, ALL, 1000, np.random.default_rng(10))
        np.testing.assert_array_equal(got, direct(MIXED, MIXED_ENDS, ALL, 1000, np.random.default_rng(10)))


def test_steps_per_epoch_follow_the_fact_sheet():
    """The head-training counts of docs/world-models/simple-mbarc.md §4.1 (MB `Trainer.train_reward_model`)."""
    assert STRATEGIES == ("online", "class_balanced", "square_root", "progressively_balanced", "mbarc")
    assert REWARD_STEPS_PER_EPOCH == {"class_balanced": 450, "square_root": 475, "progressively_balanced": 1000,
                                      "mbarc": 1500}
    assert REWARD_BATCH_SIZE == 32


@pytest.mark.parametrize("call, message", [
    (lambda rng: reward_training_indices("focal", MIXED, MIXED_ENDS, ALL, 4, rng), "unknown reward strategy 'focal'"),
    (lambda rng: reward_training_indices("online", MIXED, MIXED_ENDS, ALL, 4, rng), "'online' has no sampler"),
    (lambda rng: mbarc_indices(MIXED, MIXED_ENDS, np.zeros(20, bool), 4, rng), "no usable transitions"),
    (lambda rng: class_balanced_indices(MIXED + 1, MIXED_ENDS, ALL, 4, rng), "must be 0, 1 or 2"),
    (lambda rng: square_root_indices(MIXED, MIXED_ENDS[:5], ALL, 4, rng), "episode_ends must be a bool array"),
    (lambda rng: square_root_indices(MIXED, MIXED_ENDS, ALL.astype(np.uint8), 4, rng), "usable must be a bool"),
    (lambda rng: mbarc_indices(MIXED, MIXED_ENDS, ALL, 4, rng, mbarc_dist=(0.5, 0.5)), "mbarc_dist must be 3"),
    (lambda rng: mbarc_indices(np.ones(4, np.uint8), NO_ENDS[:4], ALL[:4], 4, rng, mbarc_dist=(0, 0, 1)),
     "no share to any category"),
    (lambda rng: progressively_balanced_indices(MIXED, MIXED_ENDS, ALL, 4, rng, stage=51), "stage must be in 0..50"),
])
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call(np.random.default_rng(0))


def test_focal_loss_by_hand():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [0.0, 0.0, 3.0]])
    targets = torch.tensor([0, 1, 1])  # the weights of the targets do not sum to B: a weighted mean would differ
    counts = [0, 1000, 50]  # n_0 = 0 is clamped to 1
    beta = 0.9999
    raw = [(1 - beta) / (1 - beta ** n) for n in (1, 1000, 50)]  # ≈ 1, 0.0010508, 0.0200500
    weights = [3 * w / sum(raw) for w in raw]  # rescaled to sum to 3
    expected = 0.0
    for row, y in zip(logits.tolist(), targets.tolist()):
        p = math.exp(row[y]) / sum(math.exp(v) for v in row)
        expected += weights[y] * -((1 - p) ** 2) * math.log(p)
    expected /= 3  # plain batch mean
    loss = class_balanced_focal_loss(logits, targets, counts)
    assert loss.shape == ()
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_focal_loss_with_gamma_zero_and_equal_counts_is_cross_entropy():
    logits = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 3, (16,), generator=torch.Generator().manual_seed(1))
    loss = class_balanced_focal_loss(logits, targets, np.array([7, 7, 7]), gamma=0.0)
    torch.testing.assert_close(loss, F.cross_entropy(logits, targets))


def test_focal_loss_is_finite_for_confident_logits():
    logits = torch.tensor([[200.0, -200.0, 0.0], [-300.0, 0.0, 300.0]], requires_grad=True)
    loss = class_balanced_focal_loss(logits, torch.tensor([1, 0]), torch.tensor([10, 20, 30]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert loss.item() > 100  # both samples confidently wrong: -log p ≈ 400 and 600


def test_focal_loss_rejects_bad_shapes():
    with pytest.raises(ValueError, match="class_counts must hold 3 counts"):
        class_balanced_focal_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), [1, 2])
    with pytest.raises(ValueError, match=r"logits must be \[B, C\]"):
        class_balanced_focal_loss(torch.zeros(3), torch.zeros(3, dtype=torch.long), [1, 2, 3])
