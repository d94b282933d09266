"""Vanilla policy gradient with a learned baseline (Williams 1992; Sutton et al. 2000) as a plugin algorithm.

    for each iteration:
        collect num_steps × num_envs transitions with the current policy (the on-policy family's loop)
        advantages = discounted returns − V(s), bootstrapped from V at the rollout's end (GAE with λ = 1)
        loss = −mean(log π(a|s) · A) + vf_coef · mean((V(s) − R)²); one Adam step

The whole algorithm is its config and `learn`: the family base collects, checkpoints and acts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt

from rlfoundry.algos import OnPolicyAgent
from rlfoundry.algos.base import AlgorithmConfig
from rlfoundry.buffers.rollout import evaluate_minibatch, gae, minibatches
from rlfoundry.config.schedule import Schedule


class VPGConfig(AlgorithmConfig):
    name: Literal["vpg"] = "vpg"
    lr: Schedule = Field(Schedule(start=1e-3), description="Adam learning rate (number or lin_<start>).")
    num_steps: PositiveInt = Field(128, description="Steps per env in each rollout.")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    vf_coef: float = Field(0.5, ge=0, description="Value-loss weight.")
    max_grad_norm: float = Field(0.5, gt=0, description="Global gradient-norm clip.")
    adam_eps: float = Field(1e-8, gt=0, description="Adam ε.")

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        return {"env": {"num_envs": 4}, "train": {"total_timesteps": 100_000}}


class VPG(OnPolicyAgent):
    name = "vpg"
    config = VPGConfig

    def learn(self, rollout, progress: float) -> dict[str, float]:
        algo = self.algo
        advantages = gae(rollout.rewards, rollout.values, rollout.next_values, rollout.terminated, rollout.dones,
                         algo.gamma, 1.0)
        batch = next(minibatches(rollout, (advantages, advantages + rollout.values), rollout.valid, self.policy)())
        advantages, returns = batch.targets
        self.optimizer.set_lr(algo.lr(progress))
        with self.autocast():
            logprobs, _, values = evaluate_minibatch(self.policy, batch)
        policy_loss = -(logprobs * advantages).mean()
        value_loss = (values - returns).square().mean()
        self.optimizer.update(policy_loss + algo.vf_coef * value_loss, samples=len(advantages))
        return {"loss/policy": float(policy_loss), "loss/value": float(value_loss)}
