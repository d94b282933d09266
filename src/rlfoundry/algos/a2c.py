"""Advantage Actor-Critic, synchronous (A2C; Mnih et al. 2016, arXiv:1602.01783, as OpenAI's A2C).

    for each iteration:
        collect num_steps × num_envs transitions from the synchronous vector env
        advantages = GAE(γ, λ)   (λ = 1: n-step returns bootstrapped from V at the rollout's end)
        returns = advantages + values
        loss = -mean(A · log π(a|s)) + vf_coef · mean((V - R)²) - ent_coef · mean(H[π])
        one optimizer step (RMSprop by default) with the gradient norm clipped to max_grad_norm

Deliberate choices, with their sources:
- Defaults are Stable-Baselines3's A2C (n_steps 5, lr 7e-4, RMSprop α 0.99 ε 1e-5, gae_lambda 1,
  vf_coef 0.5, grad norm 0.5, no advantage normalisation), so rl-baselines3-zoo hyperparameters
  carry over; the value loss is the plain squared error, as there.
- Bootstrap on truncation, not on termination (Pardo et al. 2018); reset rows of NEXT_STEP autoreset
  are left out of the loss (`rlfoundry.buffers.rollout`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, PositiveInt

from rlfoundry.algos.base import AlgorithmConfig
from rlfoundry.algos.families import OnPolicyAgent
from rlfoundry.algos.optim import FlatOptimizer
from rlfoundry.algos.ppo import explained_variance
from rlfoundry.buffers.rollout import evaluate_minibatch, gae, minibatches
from rlfoundry.config.monitors import ENTROPY_COLLAPSE, GRAD_EXPLOSION, VALUE_BLOWUP
from rlfoundry.config.schedule import Schedule


class A2CConfig(AlgorithmConfig):
    name: Literal["a2c"] = "a2c"
    lr: Schedule = Field(Schedule(start=7e-4), description="Learning rate (number or lin_<start>).")
    num_steps: PositiveInt = Field(5, description="Steps per env in each rollout (the n of n-step returns).")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(1.0, ge=0, le=1, description="GAE λ; 1 gives n-step returns.")
    ent_coef: Schedule = Field(Schedule(start=0.0), description="Entropy bonus (number or lin_<start>).")
    vf_coef: float = Field(0.5, ge=0, description="Value-loss weight.")
    max_grad_norm: float = Field(0.5, gt=0, description="Global gradient-norm clip.")
    norm_adv: bool = Field(False, description="Normalise advantages over the rollout.")
    optimizer: Literal["rmsprop", "adam"] = Field("rmsprop", description="RMSprop (α 0.99) as in A2C, or Adam.")
    optimizer_eps: float = Field(1e-5, gt=0, description="The optimizer's ε.")

    def check_with(self, num_envs: int) -> None:
        """Nothing depends on the env count here (PPO checks its minibatch size)."""

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        """An env without a preset: SB3's A2C defaults, 8 envs (CleanRL's image settings for pixels)."""
        if len(observation_space.shape) == 3:
            return {"env": {"num_envs": 16}, "algo": {"ent_coef": 0.01}, "train": {"total_timesteps": 10_000_000}}
        return {"env": {"num_envs": 8}, "train": {"total_timesteps": 500_000}}


def a2c_loss(
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    vf_coef: float,
    ent_coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The A2C loss over a batch [N]; `stats` are detached scalars."""
    policy_loss = -(advantages * logprobs).mean()
    value_loss = (values - returns).square().mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    stats = {"loss/policy": policy_loss.detach(), "loss/value": value_loss.detach(), "loss/entropy": entropy_mean.detach()}
    return loss, stats


class A2C(OnPolicyAgent):
    name = "a2c"
    config = A2CConfig
    monitors = {"loss/entropy": ENTROPY_COLLAPSE, "loss/value": VALUE_BLOWUP, "diag/grad_norm": GRAD_EXPLOSION}

    def make_optimizer(self) -> FlatOptimizer:
        algo = self.algo
        return FlatOptimizer(self.policy, algo.lr(0.0), algo.optimizer_eps, algo.max_grad_norm, kind=algo.optimizer)

    def learn(self, rollout, progress: float) -> dict[str, float]:
        algo = self.algo
        advantages = gae(rollout.rewards, rollout.values, rollout.next_values, rollout.terminated, rollout.dones,
                         algo.gamma, algo.gae_lambda)
        returns = advantages + rollout.values
        batch = next(minibatches(rollout, (advantages, returns, rollout.values), rollout.valid, self.policy)())
        advantages, returns, old_values = batch.targets
        if algo.norm_adv and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

        lr, ent_coef = algo.lr(progress), algo.ent_coef(progress)
        self.optimizer.set_lr(lr)
        with self.autocast():
            logprobs, entropy, values = evaluate_minibatch(self.policy, batch)
        if ent_coef == 0:
            entropy = entropy.detach()  # reported only: no backward pass through it
        loss, stats = a2c_loss(logprobs, advantages, values, returns, entropy, algo.vf_coef, ent_coef)
        grad_norm = self.optimizer.update(loss, stats, samples=len(advantages))
        assert grad_norm is not None  # None only when no rank had a sample

        metrics = {key: float(value) for key, value in stats.items()}
        metrics.update({
            "diag/explained_variance": explained_variance(old_values, returns),
            "diag/grad_norm": float(grad_norm),
            "diag/lr": lr,
            "diag/ent_coef": ent_coef,
        })
        return metrics
