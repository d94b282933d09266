"""MBARC's reward strategies for SimPLe's reward head: which transitions the head trains on, and its loss.

Rewarded frames are rare in Atari, so a head trained on transitions as they come tends to predict no reward at
all. Each sampling strategy (`class_balanced`, `square_root`, `progressively_balanced`, `mbarc`) draws the head's
training transitions with weights that favour the rare classes, after each world-model phase; `online` has no
sampler and trains the head inside the world-model loss, optionally with `class_balanced_focal_loss`. Rewards are
clipped and stored as classes {0, 1, 2} for -1, 0, +1. The weights, and where this module departs from the MBARC
port (tag MB), are in docs/world-models/simple-mbarc.md §4 (§4.5: the choices made here).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F

Strategy = Literal["online", "class_balanced", "square_root", "progressively_balanced", "mbarc"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
SAMPLED_STRATEGIES: tuple[str, ...] = tuple(s for s in STRATEGIES if s != "online")

NUM_REWARD_CLASSES = 3  # classes 0, 1, 2 for clipped rewards -1, 0, +1
ZERO_REWARD = 1  # the class of a zero reward

# Reward-head steps per epoch, each of REWARD_BATCH_SIZE samples: MB `Trainer.train_reward_model` (§4.1);
# `--reward-model-batch-size` 32. `online` trains inside the world-model steps instead.
REWARD_STEPS_PER_EPOCH: dict[str, int] = {
    "class_balanced": 450, "square_root": 475, "progressively_balanced": 1000, "mbarc": 1500,
}
REWARD_BATCH_SIZE = 32

MBARC_DIST: tuple[float, float, float] = (0.35, 0.05, 0.6)  # MB `--mbarc-dist`, in category order 0, 1, 2
PROGRESSIVE_STAGES = 51  # MB: t = 0..50 (`ct = 50`)


def _checked(reward_classes, episode_ends, usable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three per-transition arrays as numpy, after checking shapes, dtypes and values."""
    rewards = np.asarray(reward_classes)
    if rewards.ndim != 1 or not np.issubdtype(rewards.dtype, np.integer):
        raise ValueError(f"reward_classes must be a 1-D integer array, got shape {rewards.shape} of {rewards.dtype}")
    if rewards.size and (rewards.min() < 0 or rewards.max() >= NUM_REWARD_CLASSES):
        raise ValueError(f"reward_classes must be 0, 1 or 2 (clipped rewards -1, 0, +1 stored plus one), "
                         f"got values from {rewards.min()} to {rewards.max()}")
    arrays = [rewards]
    for name, flags in (("episode_ends", episode_ends), ("usable", usable)):
        flags = np.asarray(flags)
        if flags.shape != rewards.shape or flags.dtype != np.bool_:
            raise ValueError(f"{name} must be a bool array of shape {rewards.shape} (one flag per transition), "
                             f"got shape {flags.shape} of {flags.dtype}")
        arrays.append(flags)
    if not arrays[2].any():
        raise ValueError(f"no usable transitions to train the reward head on ({rewards.size} transitions, "
                         f"none marked usable)")
    return arrays[0], arrays[1], arrays[2]


def _draw(labels: np.ndarray, usable: np.ndarray, label_weights: np.ndarray, num_samples: int,
          rng: np.random.Generator) -> np.ndarray:
    """`num_samples` usable indices with replacement, index i with probability ∝ label_weights[labels[i]]."""
    num_samples = operator.index(num_samples)
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    candidates = np.flatnonzero(usable)
    weights = np.asarray(label_weights, dtype=np.float64)[labels[candidates]]
    total = weights.sum()
    p = weights / total if total > 0 else None  # zero total: one class present, draw uniformly (see above)
    return rng.choice(candidates, size=num_samples, replace=True, p=p).astype(np.int64, copy=False)


def reward_class_counts(reward_classes, usable=None) -> np.ndarray:
    """n_c for c = 0, 1, 2 (int64 [3]) over the transitions marked usable (all when `usable` is None)."""
    rewards = np.asarray(reward_classes)
    if usable is not None:
        rewards = rewards[np.asarray(usable, dtype=bool)]
    return np.bincount(rewards, minlength=NUM_REWARD_CLASSES).astype(np.int64)


def _class_balanced_weights(counts: np.ndarray) -> np.ndarray:
    return 1.0 - counts / counts.sum()


def class_balanced_indices(reward_classes, episode_ends, usable, num_samples: int,
                           rng: np.random.Generator) -> np.ndarray:
    """Indices (int64 [num_samples]) drawn with weight 1 - n_c/N per transition of class c. `episode_ends` is
    checked but unused: every sampler takes the same arguments."""
    rewards, _, usable = _checked(reward_classes, episode_ends, usable)
    weights = _class_balanced_weights(reward_class_counts(rewards, usable))
    return _draw(rewards, usable, weights, num_samples, rng)


def square_root_indices(reward_classes, episode_ends, usable, num_samples: int,
                        rng: np.random.Generator) -> np.ndarray:
    """Indices (int64 [num_samples]) drawn with weight 1 - √n_c / Σ_k √n_k per transition of class c."""
    rewards, _, usable = _checked(reward_classes, episode_ends, usable)
    roots = np.sqrt(reward_class_counts(rewards, usable))
    return _draw(rewards, usable, 1.0 - roots / roots.sum(), num_samples, rng)


def progressively_balanced_indices(reward_classes, episode_ends, usable, num_samples: int,
                                   rng: np.random.Generator, *, stage: int,
                                   num_stages: int = PROGRESSIVE_STAGES) -> np.ndarray:
    """The draws of one stage t (0 <= t < num_stages): weight (1 - s)·⅓ + s·(1 - n_c/N), s = t/(num_stages - 1).
    Stage 0 draws at the natural class frequencies, the last stage is `class_balanced`. The weights are mixed,
    not the two distributions (MB), so at s = ½ the class shares are not the mean of the two ends."""
    rewards, _, usable = _checked(reward_classes, episode_ends, usable)
    if num_stages < 2 or not 0 <= stage < num_stages:
        raise ValueError(f"stage must be in 0..{num_stages - 1} with num_stages >= 2, got stage {stage} of "
                         f"{num_stages}")
    s = stage / (num_stages - 1)
    weights = (1 - s) / NUM_REWARD_CLASSES + s * _class_balanced_weights(reward_class_counts(rewards, usable))
    return _draw(rewards, usable, weights, num_samples, rng)


def progressively_balanced_schedule(reward_classes, episode_ends, usable, num_samples: int,
                                    rng: np.random.Generator, *,
                                    num_stages: int = PROGRESSIVE_STAGES) -> np.ndarray:
    """One reward-training phase of `progressively_balanced`: stages 0, 1, ... of
    num_samples // (num_stages - 1) + 1 draws each, concatenated in order and cut at num_samples (MB). For MB's
    1000 × 32 that is 641 per stage, so stages 0..48 are whole, stage 49 has 591 draws and stage 50 is never
    reached. Each phase (epoch) starts again from stage 0."""
    _checked(reward_classes, episode_ends, usable)
    if num_stages < 2:
        raise ValueError(f"num_stages must be >= 2, got {num_stages}")
    per_stage = operator.index(num_samples) // (num_stages - 1) + 1
    parts, left, stage = [], num_samples, 0
    while left > 0:
        size = min(per_stage, left)
        parts.append(progressively_balanced_indices(reward_classes, episode_ends, usable, size, rng, stage=stage,
                                                    num_stages=num_stages))
        left -= size
        stage += 1
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def mbarc_categories(reward_classes, episode_ends) -> np.ndarray:
    """MBARC's category per transition (uint8 [N]): 2 rewarded (non-zero reward), 1 zero reward right after a
    rewarded transition of the same episode, 0 any other zero reward.

    `reward_classes` and `episode_ends` are one stream in time order; `episode_ends[i]` is true when transition i
    was the last of its episode (terminated or truncated) or is followed by a reset for any other reason (the
    end of a collection phase). For several envs, lay each env's stream out contiguously and mark its last
    transition as an end."""
    rewards, ends = np.asarray(reward_classes), np.asarray(episode_ends, dtype=bool)
    if rewards.ndim != 1 or ends.shape != rewards.shape:
        raise ValueError(f"reward_classes and episode_ends must be 1-D of one length, got shapes {rewards.shape} "
                         f"and {ends.shape}")
    rewarded = rewards != ZERO_REWARD
    after_reward = np.zeros_like(rewarded)
    after_reward[1:] = rewarded[:-1] & ~ends[:-1]
    return np.where(rewarded, 2, np.where(after_reward, 1, 0)).astype(np.uint8)


def mbarc_indices(reward_classes, episode_ends, usable, num_samples: int, rng: np.random.Generator, *,
                  mbarc_dist: Sequence[float] = MBARC_DIST) -> np.ndarray:
    """Indices (int64 [num_samples]) where category k (`mbarc_categories`, counted over usable transitions) gets
    share mbarc_dist[k], uniformly within it (MB weight d_k·steps·batch/m_k per transition). The shares of empty
    categories are spread over the others in proportion."""
    rewards, ends, usable = _checked(reward_classes, episode_ends, usable)
    dist = np.asarray(mbarc_dist, dtype=np.float64)
    if dist.shape != (3,) or not np.all(np.isfinite(dist)) or np.any(dist < 0):
        raise ValueError(f"mbarc_dist must be 3 non-negative shares (categories 0, 1, 2), got {list(mbarc_dist)}")
    categories = mbarc_categories(rewards, ends)
    sizes = np.bincount(categories[usable], minlength=3)
    if not np.any(dist[sizes > 0] > 0):
        raise ValueError(f"mbarc_dist {list(mbarc_dist)} gives no share to any category that has usable "
                         f"transitions (category sizes {sizes.tolist()})")
    weights = np.divide(dist, sizes, out=np.zeros(3), where=sizes > 0)
    return _draw(categories, usable, weights, num_samples, rng)


def reward_training_indices(strategy: str, reward_classes, episode_ends, usable, num_samples: int,
                            rng: np.random.Generator, *, mbarc_dist: Sequence[float] = MBARC_DIST,
                            num_stages: int = PROGRESSIVE_STAGES) -> np.ndarray:
    """The indices of one reward-training phase for `strategy` (int64 [num_samples], in training order).

    Raises ValueError for `online`, which has no sampler (its head trains inside the world-model loss: branch on
    it before calling), and for an unknown name."""
    if strategy == "online":
        raise ValueError("strategy 'online' has no sampler: its reward head trains inside the world-model loss")
    if strategy not in SAMPLED_STRATEGIES:
        raise ValueError(f"unknown reward strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if strategy == "mbarc":
        return mbarc_indices(reward_classes, episode_ends, usable, num_samples, rng, mbarc_dist=mbarc_dist)
    if strategy == "progressively_balanced":
        return progressively_balanced_schedule(reward_classes, episode_ends, usable, num_samples, rng,
                                               num_stages=num_stages)
    if strategy == "square_root":
        return square_root_indices(reward_classes, episode_ends, usable, num_samples, rng)
    return class_balanced_indices(reward_classes, episode_ends, usable, num_samples, rng)


def class_balanced_focal_loss(logits: torch.Tensor, targets: torch.Tensor, class_counts, *, gamma: float = 2.0,
                              beta: float = 0.9999) -> torch.Tensor:
    """MBARC's class-balanced focal loss (MB `focal_loss.get_cbf_loss`, §4.4), a scalar tensor.

        FL_i = -(1 - p_i)^γ · log p_i          p_i = softmax(logits_i)[y_i]   (Lin et al. 2017)
        w_c  = (1 - β) / (1 - β^{n_c})         n_c = class_counts[c] clamped to >= 1   (Cui et al. 2019)
        w   <- C · w / Σ_c w_c                 weights rescaled to sum to C, the number of classes
        loss = (1/B) Σ_i w_{y_i} · FL_i        a plain batch mean (not divided by the sum of the weights)

    logits [B, C], targets [B] long, class_counts [C] (the replay's n_c, e.g. `reward_class_counts`). With γ = 0 and
    equal counts it is the cross-entropy. log p comes from log_softmax and 1 - p from expm1, so confident
    predictions neither overflow nor lose (1 - p) to rounding; 1 - β^n uses expm1 for the same reason.
    """
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"logits must be [B, C] and targets [B], got {tuple(logits.shape)} and "
                         f"{tuple(targets.shape)}")
    if targets.dtype != torch.long:
        raise ValueError(f"targets must be class indices of dtype torch.long, got {targets.dtype}")
    num_classes = logits.shape[1]
    counts = torch.as_tensor(class_counts, dtype=torch.float64, device=logits.device)
    if counts.shape != (num_classes,):
        raise ValueError(f"class_counts must hold {num_classes} counts, got shape {tuple(counts.shape)}")
    if not 0.0 < beta < 1.0 or gamma < 0:
        raise ValueError(f"need 0 < beta < 1 and gamma >= 0, got beta {beta}, gamma {gamma}")
    weights = (1.0 - beta) / -torch.expm1(counts.clamp(min=1.0) * math.log(beta))
    weights = (num_classes * weights / weights.sum()).to(logits.dtype)
    log_p = F.log_softmax(logits, dim=-1).gather(1, targets[:, None]).squeeze(1)
    focal = -(-torch.expm1(log_p)) ** gamma * log_p
    return (weights[targets] * focal).mean()
