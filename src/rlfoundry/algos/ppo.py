"""Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347).

    for each iteration:
        collect num_steps × num_envs transitions with the current policy (logprobs, values)
        advantages = GAE(γ, λ); returns = advantages + values
        for update_epochs: for each minibatch of the rollout:
            ratio = π(a|s) / π_old(a|s)
            loss = -min(ratio·A, clip(ratio, 1±ε)·A) + vf_coef·(V - R)² - ent_coef·H[π]
            one Adam step with the gradient norm clipped to max_grad_norm

Deliberate choices, with their sources:
- Bootstrap on truncation, not on termination (Pardo et al. 2018, "Time Limits in RL").
- The value loss is the plain squared error, as in Stable-Baselines3, so `vf_coef` means what it
  means in rl-baselines3-zoo hyperparameters (CleanRL carries an extra ½).
- Target-KL early stop is checked before each minibatch step (as SB3 does, with the 1.5 margin).
- Advantages are normalised per minibatch (SB3 and CleanRL), skipped for a minibatch of one.
- Reset rows of NEXT_STEP autoreset are excluded from minibatches (`rlfoundry.buffers.rollout`).
- With a memory core (`network.core`), minibatches are whole sequences: each env's rollout is cut into
  chunks of `sequence_length` steps, each replayed from the memory it had when collected, with memory
  reset at episode starts inside it; gradients stop at chunk starts (truncated back-propagation through
  time, as in Kapturowski et al. 2019's stored-state R2D2 and CleanRL's ppo_atari_lstm.py).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import torch
from pydantic import Field, PositiveInt, field_validator

from rlfoundry.algos import ranks
from rlfoundry.algos.base import AlgorithmConfig, Runtime
from rlfoundry.algos.families import OnPolicyAgent
from rlfoundry.buffers.rollout import evaluate_minibatch, gae, minibatch_count, minibatches
from rlfoundry.config.monitors import ENTROPY_COLLAPSE, GRAD_EXPLOSION, VALUE_BLOWUP, MonitorRule
from rlfoundry.config.schedule import Schedule


class PPOConfig(AlgorithmConfig):
    name: Literal["ppo"] = "ppo"
    lr: Schedule = Field(Schedule(start=2.5e-4), description="Adam learning rate (number or lin_<start>).")
    num_steps: PositiveInt = Field(128, description="Steps per env in each rollout.")
    minibatch_size: PositiveInt | float = Field(
        0.25, description="Samples per minibatch: an int, or a fraction in (0, 1] of the rollout."
    )
    update_epochs: PositiveInt = Field(4, description="Passes over the rollout per iteration.")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE λ.")
    clip_coef: Schedule = Field(Schedule(start=0.2), description="Surrogate clipping ε (number or lin_<start>).")
    clip_vloss: bool = Field(True, description="Clip the value update to ±clip_coef around the old value.")
    ent_coef: Schedule = Field(Schedule(start=0.0), description="Entropy bonus (number or lin_<start>).")
    vf_coef: float = Field(0.5, ge=0, description="Value-loss weight.")
    max_grad_norm: float = Field(0.5, gt=0, description="Global gradient-norm clip.")
    target_kl: float | None = Field(None, gt=0, description="Stop the epochs when approx KL > 1.5 × this.")
    norm_adv: bool = Field(True, description="Normalise advantages per minibatch.")
    adam_eps: float = Field(1e-5, gt=0, description="Adam ε.")
    sequence_length: PositiveInt | None = Field(
        None, description="Memory cores: steps per training sequence (truncated back-propagation through time); "
        "must divide num_steps. None: the whole rollout.",
    )

    @field_validator("lr", "clip_coef")
    @classmethod
    def _positive(cls, schedule: Schedule) -> Schedule:
        # must start > 0; a linear schedule may end at 0 (the lin_<start> shorthand does)
        if schedule.start <= 0 or min(schedule.values) < 0:
            raise ValueError(f"must start > 0 and never go below 0, got {schedule.values}")
        return schedule

    @field_validator("ent_coef")
    @classmethod
    def _non_negative(cls, schedule: Schedule) -> Schedule:
        if min(schedule.values) < 0:
            raise ValueError(f"must be ≥ 0 over the whole schedule, got {schedule.values}")
        return schedule

    def check_with(self, num_envs: int) -> None:
        if self.sequence_length is not None and self.num_steps % self.sequence_length:
            raise ValueError(
                f"algo.sequence_length = {self.sequence_length}: must divide algo.num_steps ({self.num_steps})"
            )
        if isinstance(self.minibatch_size, float) and not 0 < self.minibatch_size <= 1:
            raise ValueError(f"algo.minibatch_size = {self.minibatch_size}: a fraction must be in (0, 1]")
        if self.minibatch_samples(num_envs) > num_envs * self.num_steps:
            raise ValueError(
                f"algo.minibatch_size = {self.minibatch_size}: larger than the rollout "
                f"(num_envs {num_envs} × num_steps {self.num_steps} = {num_envs * self.num_steps})"
            )

    def minibatch_samples(self, num_envs: int) -> int:
        if isinstance(self.minibatch_size, float):
            return max(1, round(self.minibatch_size * num_envs * self.num_steps))
        return self.minibatch_size

    def num_minibatches(self, num_envs: int) -> int:
        """Minibatches per epoch for a full rollout (reset rows, which are dropped, make it slightly fewer)."""
        return max(1, round(num_envs * self.num_steps / self.minibatch_samples(num_envs)))

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        """Defaults for an env without a preset: CleanRL's settings — ppo_atari.py for image
        observations, ppo.py for other discrete-action envs, ppo_continuous_action.py (with
        normalisation) for continuous actions."""
        from gymnasium import spaces

        if len(observation_space.shape) == 3:
            return {
                "env": {"num_envs": 8},
                "algo": {"num_steps": 128, "lr": "lin_2.5e-4", "clip_coef": "lin_0.1", "ent_coef": 0.01,
                         "minibatch_size": 0.25, "update_epochs": 4},
                "train": {"total_timesteps": 10_000_000},
            }
        if isinstance(action_space, spaces.Discrete):
            return {"env": {"num_envs": 4}, "algo": {"num_steps": 128, "lr": "lin_2.5e-4", "ent_coef": 0.01}}
        return {
            "env": {"num_envs": 1, "normalize_obs": True, "normalize_reward": True},
            "algo": {"num_steps": 2048, "minibatch_size": 64, "update_epochs": 10, "lr": "lin_3e-4"},
            "train": {"total_timesteps": 1_000_000},
        }


# clip_coef and ent_coef: numbers, or 0-d tensors (the agent's: a compiled loss takes new values without recompiling)
Coef = TypeVar("Coef", float, torch.Tensor)


def ppo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_coef: Coef,
    vf_coef: float,
    ent_coef: Coef,
    clip_vloss: bool,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped-surrogate PPO loss over a minibatch [N]; `stats` are detached scalars."""
    log_ratio = logprobs - old_logprobs
    ratio = log_ratio.exp()
    policy_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    value_error = (values - returns).square()
    if clip_vloss:
        clipped = old_values + (values - old_values).clamp(-clip_coef, clip_coef)
        value_error = torch.max(value_error, (clipped - returns).square())
    value_loss = value_error.mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    with torch.no_grad():
        stats = {
            "loss/policy": policy_loss.detach(),
            "loss/value": value_loss.detach(),
            "loss/entropy": entropy_mean.detach(),
            "diag/approx_kl": ((ratio - 1) - log_ratio).mean(),  # Schulman's k3 estimator
            "diag/clipfrac": ((ratio - 1).abs() > clip_coef).float().mean(),
        }
    return loss, stats


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    variance = target.var()
    return float("nan") if variance == 0 else float(1 - (target - predicted).var() / variance)


class PPO(OnPolicyAgent):
    name = "ppo"
    config = PPOConfig
    # train.compile=auto compiles PPO: measured to pay off on long runs (A2C gains 1.16x steady, DQN and SAC run slower
    # compiled: docs/guide/performance.md, "Threads, precision and compilation")
    compile_by_default = True
    compile_evaluate = False  # the whole minibatch loss is compiled instead
    graphs = True  # the minibatch step (not yet measured on a GPU: train.cuda_graphs=auto leaves it eager)
    smoke = ("algo.num_steps=64", "algo.minibatch_size=0.5")
    monitors = {
        # Schulman et al. 2017 (arXiv:1707.06347) §4 targets a KL of 0.003-0.03 per update; SB3 / CleanRL stop the
        # epochs at 1.5 × target_kl (0.01-0.02 typical); rsl_rl's adaptive lr holds it in [0.005, 0.02]. Sustained
        # values above 0.05 mean each update moves the policy well past the trust region the clipping assumes.
        "diag/approx_kl": MonitorRule(max=0.05),
        # With clip_coef 0.2 healthy runs clip 1-30% of the samples (CartPole preset: at most 0.22 in an iteration;
        # Pendulum's, 10 epochs of 64 minibatches at lr 1e-3: 0.32, and 0.27 three iterations running). Past 0.4
        # the later epochs learn from the unclipped remainder alone: lr or epochs are too large for the batch.
        "diag/clipfrac": MonitorRule(max=0.4),
        "loss/entropy": ENTROPY_COLLAPSE,
        "loss/value": VALUE_BLOWUP,
        "diag/grad_norm": GRAD_EXPLOSION,
        # No default on diag/explained_variance, though a critic should explain more than nothing (> 0): once
        # returns stop varying it measures noise. The CartPole preset, solved, gives -1 to -8 for a hundred
        # iterations running (value loss 1e-5), A2C's hovers at 0 mid-run. Add one where it means something:
        # logging.monitors.metrics.diag/explained_variance.min=0.
    }

    def __init__(self, cfg, spec, runtime: Runtime):
        super().__init__(cfg, spec, runtime)
        self.minibatch_samples = self.algo.minibatch_samples(spec.num_envs)
        self.minibatch_loss = runtime.compiled(self._minibatch_loss)  # the whole loss, not just the forward
        self.minibatch_step = runtime.graphed(self._minibatch_step)  # a CUDA graph per minibatch shape

    def learn(self, rollout, progress: float) -> dict[str, float]:
        algo = self.algo
        advantages = gae(
            rollout.rewards, rollout.values, rollout.next_values, rollout.terminated, rollout.dones,
            algo.gamma, algo.gae_lambda,
        )
        returns = advantages + rollout.values

        # across processes every rank takes the same number of updates
        count = ranks.agreed_min(minibatch_count(rollout.valid, self.minibatch_samples))
        epoch = minibatches(rollout, (rollout.logprobs, rollout.values, advantages, returns), rollout.valid,
                            self.policy, self.minibatch_samples, algo.sequence_length, count)

        lr, clip_coef, ent_coef = algo.lr(progress), algo.clip_coef(progress), algo.ent_coef(progress)
        self.optimizer.set_lr(lr)
        coefs = torch.tensor([clip_coef, ent_coef], device=self.device)  # tensors, not constants: a compiled loss is not rebuilt per value
        totals: dict[str, torch.Tensor] = {}
        updates, stopped_early = 0, False
        for _ in range(algo.update_epochs):
            for mb in epoch():
                if algo.target_kl is None:
                    stats = self.minibatch_step(mb, coefs, ent_coef != 0)
                else:  # the KL is read between the loss and the step: no graph holds both
                    loss, stats = self.minibatch_loss(mb, coefs, ent_coef != 0)
                    if ranks.agreed_mean(stats["diag/approx_kl"]) > 1.5 * algo.target_kl:
                        stopped_early = True
                        break
                    stats = self._optimize(loss, stats, len(mb.actions))
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                updates += 1
            if stopped_early:
                break

        valid = rollout.valid.flatten()
        metrics = {key: float(value) / max(updates, 1) for key, value in totals.items()}
        metrics.update({
            "diag/explained_variance": explained_variance(rollout.values.flatten()[valid], returns.flatten()[valid]),
            "diag/updates": float(updates),
            "diag/lr": lr,
            "diag/clip_coef": clip_coef,
            "diag/ent_coef": ent_coef,
        })
        return metrics

    def _minibatch_step(self, mb, coefs: torch.Tensor, learn_entropy: bool) -> dict[str, torch.Tensor]:
        """One minibatch's loss and optimizer step; its stats (a CUDA graph with train.cuda_graphs)."""
        loss, stats = self.minibatch_loss(mb, coefs, learn_entropy)
        return self._optimize(loss, stats, len(mb.actions))

    def _optimize(self, loss: torch.Tensor, stats: dict, samples: int) -> dict[str, torch.Tensor]:
        """The optimizer's step on `loss`; `stats` with the gradient norm before clipping (for the monitors)."""
        norm = self.optimizer.update(loss, stats, samples=samples)
        return stats if norm is None else {**stats, "diag/grad_norm": norm.detach()}

    def _minibatch_loss(self, mb, coefs: torch.Tensor, learn_entropy: bool) -> tuple[torch.Tensor, dict]:
        """The loss of one minibatch and its stats, from the policy's forward pass on it (compiled with
        train.compile). `coefs`: [clip_coef, ent_coef]."""
        algo = self.algo
        old_logprobs, old_values, mb_adv, mb_returns = mb.targets
        with self.autocast():
            logprobs, entropy, values = evaluate_minibatch(self.policy, mb)
        if not learn_entropy:
            entropy = entropy.detach()  # reported only: no backward pass through it
        if algo.norm_adv and len(mb_adv) > 1:
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
        return ppo_loss(logprobs, old_logprobs, mb_adv, values, old_values, mb_returns, entropy,
                        coefs[0], algo.vf_coef, coefs[1], algo.clip_vloss)
