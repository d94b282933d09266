"""Soft Actor-Critic for continuous actions (Haarnoja et al. 2018, arXiv:1812.05905): a squashed
Gaussian actor, twin critics with Polyak-averaged targets, and automatic entropy tuning.

    for each iteration:
        step the envs train_freq times (uniform random actions before learning_starts), into the replay
        gradient_steps times, on a sampled batch:
            y = r + γ^n · (min_i Q_target_i(s', a') − α · log π(a'|s')),   a' ~ π(·|s')
            critic loss = Σ_i mean((Q_i(s, a) − y)²)
            actor loss  = mean(α · log π(ã|s) − min_i Q_i(s, ã)),   ã ~ π(·|s) (reparameterised)
            α loss      = −mean(log α · (log π(ã|s) + target_entropy))   (target_entropy = −dim A)
            θ_target ← τ·θ + (1 − τ)·θ_target

Deliberate choices: defaults and update order are Stable-Baselines3's SAC (lr 3e-4 for all three,
batch 256, τ 0.005, α learned from 1.0, critic loss ½·Σ MSE; α and the critics step first, and the
actor's loss then uses the updated critics), so rl-baselines3-zoo hyperparameters carry over;
truncation bootstraps and termination does not.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, PositiveInt

from rlfoundry.algos.base import Agent, Iteration, autocast, finish_iteration
from rlfoundry.algos.optim import FlatOptimizer, flatten_parameters
from rlfoundry.buffers.replay import ReplayBuffer, collect
from rlfoundry.config.base import StrictModel
from rlfoundry.nets.policy import SquashedGaussianActor, TwinQ
from rlfoundry.run.seeding import env_seed


class SACConfig(StrictModel):
    name: Literal["sac"] = "sac"
    lr: float = Field(3e-4, gt=0, description="Adam learning rate of actor, critics and α.")
    buffer_size: PositiveInt = Field(1_000_000, description="Replay capacity in transitions.")
    learning_starts: int = Field(100, ge=0, description="Env steps of uniform random actions before learning.")
    batch_size: PositiveInt = Field(256, description="Transitions per gradient step.")
    train_freq: PositiveInt = Field(1, description="Vector-env steps per iteration.")
    gradient_steps: PositiveInt = Field(1, description="Gradient steps per iteration.")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    n_step: PositiveInt = Field(1, description="n-step returns.")
    tau: float = Field(0.005, gt=0, le=1, description="Polyak factor of the target critics.")
    ent_coef: float | Literal["auto"] = Field("auto", description="α, or auto: learned towards target_entropy.")
    ent_coef_init: float = Field(1.0, gt=0, description="Initial α when learned.")
    target_entropy: float | Literal["auto"] = Field("auto", description="auto: −dim(action space).")
    adam_eps: float = Field(1e-8, gt=0, description="Adam ε.")

    def check_with(self, num_envs: int) -> None:
        if self.buffer_size < num_envs * max(self.n_step, 2):
            raise ValueError(f"algo.buffer_size = {self.buffer_size}: too small for {num_envs} envs")

    @staticmethod
    def defaults_for(observation_space, action_space) -> dict[str, Any]:
        return {"env": {"num_envs": 1}, "network": {"hidden_sizes": [256, 256], "activation": "relu", "ortho_init": False},
                "train": {"total_timesteps": 1_000_000}}


def sac_critic_loss(q: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """½ Σ_i mean((Q_i(s, a) − y)²) for the twin critics `q` [2, N] and soft targets `targets` [N]."""
    return 0.5 * (q - targets).square().mean(-1).sum()


def sac_actor_loss(alpha: torch.Tensor, logp: torch.Tensor, q_new: torch.Tensor) -> torch.Tensor:
    """mean(α · log π(ã|s) − min_i Q_i(s, ã)) for reparameterised actions ã (log-probabilities `logp` [N])."""
    return (alpha.detach() * logp - q_new.min(0).values).mean()


def sac_alpha_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """−mean(log α · (log π + target entropy)): α grows while the policy's entropy is below the target."""
    return -(log_alpha * (logp.detach() + target_entropy)).mean()


class SAC(Agent):
    def __init__(self, cfg, spec, device: torch.device):
        from rlfoundry.config.errors import ConfigError

        if spec.discrete:
            raise ConfigError(f"algo.name = 'sac': {spec.id} has discrete actions; this SAC needs Box actions (try dqn)")
        self.cfg, self.spec, self.device = cfg, spec, device
        self.algo: SACConfig = cfg.algo
        algo = self.algo
        self.actor = SquashedGaussianActor(spec, cfg.network).to(device)
        self.critic = TwinQ(spec, cfg.network).to(device)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor_opt = FlatOptimizer(self.actor, algo.lr, algo.adam_eps, None)
        self.critic_opt = FlatOptimizer(self.critic, algo.lr, algo.adam_eps, None)
        self.target_flat = flatten_parameters(self.critic_target).requires_grad_(False)
        self.log_alpha = torch.tensor(np.log(algo.ent_coef_init if algo.ent_coef == "auto" else algo.ent_coef),
                                      dtype=torch.float32, device=device, requires_grad=algo.ent_coef == "auto")
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=algo.lr) if algo.ent_coef == "auto" else None
        action_dim = int(spec.action_space.shape[0])
        self.target_entropy = float(-action_dim if algo.target_entropy == "auto" else algo.target_entropy)
        self.replay = ReplayBuffer(algo.buffer_size, spec.num_envs, spec.obs_shape, spec.obs_dtype, (action_dim,),
                                   np.float32, n_step=algo.n_step, gamma=algo.gamma)
        self.rng = np.random.default_rng(env_seed(cfg.train.seed + 1))
        self.obs: np.ndarray | None = None
        self.env_steps = 0
        self.autocast = lambda: autocast(device, cfg.train.precision)

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        with torch.inference_mode(), self.autocast():
            tensor = torch.as_tensor(np.asarray(obs, dtype=self.spec.obs_dtype), device=self.device)
            return self.actor(tensor, deterministic)[0].cpu().numpy()

    def iterate(self, envs, progress: float) -> Iteration:
        algo, num_envs = self.algo, self.spec.num_envs
        if self.obs is None:
            self.obs, _ = envs.reset(seed=env_seed(self.cfg.train.seed))
        space = self.spec.action_space

        def choose(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            if self.env_steps < algo.learning_starts:  # uniform exploration first, as SB3
                actions = self.rng.uniform(space.low, space.high, size=(num_envs, *space.shape)).astype(np.float32)
            else:
                actions = self._act(obs, deterministic=False)
            return actions, actions

        collected = collect(envs, self.replay, self.obs, choose, algo.train_freq)
        self.obs = collected.obs
        self.env_steps += algo.train_freq * num_envs
        start = time.perf_counter()
        metrics: dict[str, float] = {"diag/replay_size": float(len(self.replay))}
        if self.env_steps >= algo.learning_starts and len(self.replay) >= algo.batch_size:
            totals: dict[str, float] = {}
            for _ in range(algo.gradient_steps):
                for key, value in self._learn().items():
                    totals[key] = totals.get(key, 0.0) + float(value)
            metrics.update({key: value / algo.gradient_steps for key, value in totals.items()})
        return finish_iteration(collected, algo.train_freq * num_envs, metrics, start)

    def _learn(self) -> dict[str, torch.Tensor]:
        batch = self.replay.sample(self.algo.batch_size, self.rng)
        tensor = lambda a: torch.as_tensor(a, device=self.device)  # noqa: E731
        obs, actions, next_obs = tensor(batch.obs), tensor(batch.actions), tensor(batch.next_obs)
        with self.autocast():
            new_actions, logp_new = self.actor(obs)
        if self.alpha_opt is not None:
            self.alpha_opt.zero_grad(set_to_none=True)
            sac_alpha_loss(self.log_alpha, logp_new, self.target_entropy).backward()
            self.alpha_opt.step()
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad(), self.autocast():
            next_actions, next_logp = self.actor(next_obs)
            next_q = self.critic_target(next_obs, next_actions).min(0).values.float()
            targets = tensor(batch.rewards) + tensor(batch.discounts) * (next_q - alpha * next_logp)
        with self.autocast():
            q = self.critic(obs, actions).float()
        critic_loss = sac_critic_loss(q, targets)
        self.critic_opt.update(critic_loss)
        with self.autocast():  # the updated critics judge the actor, as in SB3; their gradients from this
            q_new = self.critic(obs, new_actions).float()  # backward are cleared by the next critic update
        actor_loss = sac_actor_loss(alpha, logp_new, q_new)
        self.actor_opt.update(actor_loss)
        self.target_flat.data.lerp_(self.critic_opt.flat.data, self.algo.tau)
        return {"loss/critic": critic_loss.detach(), "loss/actor": actor_loss.detach(), "diag/alpha": alpha,
                "diag/entropy": -logp_new.detach().mean(), "diag/q_mean": q.detach().mean()}

    def forget_env_position(self) -> None:
        self.obs = None

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        return self._act(obs, deterministic)

    def state_dict(self) -> dict[str, Any]:
        replay = self.replay.state_dict()
        if self.obs is not None:
            replay = {**replay, "current_obs": np.ascontiguousarray(self.obs)}
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(), "log_alpha": {"value": self.log_alpha.detach()},
            "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": None if self.alpha_opt is None else self.alpha_opt.state_dict(),
            "replay": replay,  # numpy arrays: they go to the checkpoint's .npz
            "counters": {"env_steps": self.env_steps, "rng": self.rng.bit_generator.state},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"]["value"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if self.alpha_opt is not None:
            self.alpha_opt.load_state_dict(state["alpha_opt"])
        replay = dict(state["replay"])
        current = replay.pop("current_obs", None)
        self.replay.load_state_dict(replay)
        self.obs = None if current is None else np.array(current)
        self.env_steps = state["counters"]["env_steps"]
        self.rng.bit_generator.state = state["counters"]["rng"]
