"""REINFORCE: Monte-Carlo policy gradient (Williams 1992), with an optional learned baseline.

    for each iteration:
        collect num_steps × num_envs transitions; keep the episodes that end inside the rollout
        G_t = Σ_k γ^k r_{t+k} to the episode's end (reward-to-go), or the whole episode's return G_0
        target = G − V(s) with a baseline (the advantage), else G; optionally standardised
        loss = −mean(target · log π(a|s)) + vf_coef · mean((V − G)²) − ent_coef · mean(H[π])
        one Adam step with the gradient norm clipped

Deliberate choices:
- Only complete episodes are learned from: a step counts when its episode ends inside the rollout
  (and, for whole-episode returns, also starts inside it), so `num_steps` should cover an episode.
  Steps of episodes cut by the rollout's end are dropped, not bootstrapped: that is what keeps the
  estimate Monte Carlo. Truncation by a time limit ends the sum like termination (no bootstrap).
- Reward-to-go is the default (the lower-variance form that drops rewards before t, Sutton & Barto
  2018, §13.3); `returns: episode` is the original estimator with G_0 for every step.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, PositiveInt

from rlfoundry.algos import ranks
from rlfoundry.algos.base import AlgorithmConfig
from rlfoundry.algos.families import OnPolicyAgent
from rlfoundry.buffers.rollout import discounted_scan, evaluate_minibatch, minibatches
from rlfoundry.config.monitors import ENTROPY_COLLAPSE, VALUE_BLOWUP
from rlfoundry.config.schedule import Schedule


class REINFORCEConfig(AlgorithmConfig):
    name: Literal["reinforce"] = "reinforce"
    lr: Schedule = Field(Schedule(start=1e-3), description="Adam learning rate (number or lin_<start>).")
    num_steps: PositiveInt = Field(500, description="Steps per env in each rollout; should cover whole episodes.")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    returns: Literal["reward_to_go", "episode"] = Field(
        "reward_to_go", description="reward_to_go: G_t from step t on; episode: the whole episode's return G_0."
    )
    baseline: bool = Field(True, description="Subtract a learned value V(s): the target becomes the advantage G − V.")
    normalize_targets: bool = Field(True, description="Standardise the targets over each batch.")
    ent_coef: Schedule = Field(Schedule(start=0.0), description="Entropy bonus (number or lin_<start>).")
    vf_coef: float = Field(0.5, ge=0, description="Value-loss weight (with the baseline).")
    max_grad_norm: float = Field(0.5, gt=0, description="Global gradient-norm clip.")
    adam_eps: float = Field(1e-5, gt=0, description="Adam ε.")

    def check_with(self, num_envs: int) -> None:
        """Nothing depends on the env count here."""

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        return {"env": {"num_envs": 8}, "train": {"total_timesteps": 500_000}}


def monte_carlo_targets(
    rewards: torch.Tensor, dones: torch.Tensor, valid: torch.Tensor, first_row_starts: torch.Tensor,
    gamma: float, whole_episode: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(returns [T, B], mask [T, B]) for REINFORCE over a NEXT_STEP rollout.

    `dones[t]`: the episode ended at step t; `valid[t]`: row t is a real step (not a reset row);
    `first_row_starts[b]`: row 0 of env b is the first step of an episode. The mask keeps the steps
    whose return is complete: their episode ends inside the rollout (and starts inside it too for
    whole-episode returns).
    """
    returns = discounted_scan(rewards, gamma * (1.0 - dones))
    ends_later = dones.flip(0).cummax(0).values.flip(0).bool()  # some step at or after t ends the episode
    mask = valid & ends_later
    if whole_episode:
        previous_invalid = torch.cat([first_row_starts.unsqueeze(0), ~valid[:-1]])
        starts = valid & previous_invalid  # the first step of an episode
        steps = torch.arange(len(rewards), device=rewards.device).unsqueeze(1).expand_as(rewards)
        start_index = torch.where(starts, steps, -1).cummax(0).values  # the latest start at or before t
        returns = returns.gather(0, start_index.clamp(min=0))
        mask &= start_index >= 0
    return returns, mask


def reinforce_loss(
    logprobs: torch.Tensor, targets: torch.Tensor, values: torch.Tensor | None, returns: torch.Tensor,
    entropy: torch.Tensor, vf_coef: float, ent_coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The REINFORCE loss over a batch [N]; `values` is None without a baseline."""
    policy_loss = -(targets * logprobs).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss - ent_coef * entropy_mean
    stats = {"loss/policy": policy_loss.detach(), "loss/entropy": entropy_mean.detach()}
    if values is not None:
        value_loss = (values - returns).square().mean()
        loss = loss + vf_coef * value_loss
        stats["loss/value"] = value_loss.detach()
    return loss, stats


class REINFORCE(OnPolicyAgent):
    name = "reinforce"
    config = REINFORCEConfig
    monitors = {"loss/entropy": ENTROPY_COLLAPSE, "loss/value": VALUE_BLOWUP}  # the value head is the baseline

    def learn(self, rollout, progress: float) -> dict[str, float]:
        algo = self.algo
        returns, mask = monte_carlo_targets(rollout.rewards, rollout.dones, rollout.valid, rollout.starts[0],
                                            algo.gamma, algo.returns == "episode")
        used = int(mask.sum())
        lr, ent_coef = algo.lr(progress), algo.ent_coef(progress)
        self.optimizer.set_lr(lr)
        metrics: dict[str, float] = {"diag/used_fraction": used / mask.numel(), "diag/lr": lr}
        if used > 0:
            batch = next(minibatches(rollout, (returns,), mask, self.policy)())
            with self.autocast():
                logprobs, entropy, values = evaluate_minibatch(self.policy, batch)
            (returns,) = batch.targets
            targets = returns - values.detach() if algo.baseline else returns
            if algo.normalize_targets and used > 1:
                targets = (targets - targets.mean()) / (targets.std() + 1e-8)
            if ent_coef == 0:
                entropy = entropy.detach()
            loss, stats = reinforce_loss(logprobs, targets, values if algo.baseline else None, returns, entropy,
                                         algo.vf_coef, ent_coef)
            self.optimizer.update(loss, stats, samples=used)
            metrics.update({key: float(value) for key, value in stats.items()})
        elif ranks.world() > 1:  # nothing to learn from here, but the other ranks' update needs this one's part
            self.optimizer.update(None, samples=0)
        return metrics
