"""Soft Actor-Critic (Haarnoja et al. 2018, arXiv:1812.05905): a squashed Gaussian actor for Box actions or a
categorical one for Discrete actions (SAC-Discrete, Christodoulou 2019, arXiv:1910.07207), twin critics with
Polyak-averaged targets, automatic entropy tuning; synchronous, or with asynchronous actor processes.

    for each iteration:
        step the envs train_freq times (uniform random actions before learning_starts), into the replay
        gradient_steps times, on a sampled batch:
            y = r + γ^n · V'(s'),  V'(s') = min_i Q_target_i(s', a') − α · log π(a'|s'),  a' ~ π(·|s')
            critic loss = ½ Σ_i mean((Q_i(s, a) − y)²)
            actor loss  = mean(α · log π(ã|s) − min_i Q_i(s, ã)),  ã ~ π(·|s) (reparameterised)
            α loss      = −mean(log α · (log π(ã|s) + target_entropy))
            θ_target ← τ·θ + (1 − τ)·θ_target
    Discrete actions: the critics give Q(s, ·) for every action and each expectation over a' or ã is exact,
    Σ_a π(a|s) (·), instead of a sample (Christodoulou 2019, §4); no reparameterisation is needed.

Deliberate choices: defaults and update order are Stable-Baselines3's SAC (lr 3e-4 for all three, batch 256,
τ 0.005, α learned from 1.0, critic loss ½·Σ MSE; α and the critics step first, and the actor's loss then uses
the updated critics), so rl-baselines3-zoo hyperparameters carry over; truncation bootstraps and termination
does not. Target entropy: −dim A for Box actions (Haarnoja et al.); for Discrete ones
`target_entropy_scale` · log |A|, a fraction of the maximum entropy: 0.89 as CleanRL's sac_atari.py (the
paper's appendix uses 0.98, which keeps two-action policies close to uniform). α is learned through log α
for both, as SB3 does (Christodoulou's J(α) is written in α).

Asynchronous (`async_actors: N`): N actor processes step the envs with copies of the actor, published every
`actor_sync_every` gradient steps, and the learner only learns (`rlfoundry.buffers.actors`). Not
bit-reproducible; a resumed async run restores weights, optimizers and replay, and its envs start afresh.
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, PositiveInt

from rlfoundry.algos.base import Agent, Iteration, autocast, compile_modules, finish_iteration
from rlfoundry.algos.optim import FlatOptimizer
from rlfoundry.buffers import sized_by
from rlfoundry.buffers.replay import Collected, ReplayBuffer, collect, load_replay_state, replay_state, start_envs
from rlfoundry.config.base import StrictModel
from rlfoundry.config.schedule import Schedule
from rlfoundry.envs import env_seed, frame_stack
from rlfoundry.nets.flat import flatten_parameters
from rlfoundry.nets.heads import CategoricalHead
from rlfoundry.nets.policy import (
    CategoricalActor,
    SquashedGaussianActor,
    TwinQ,
    TwinQDiscrete,
)


class SACConfig(StrictModel):
    name: Literal["sac"] = "sac"
    lr: Schedule = Field(Schedule(start=3e-4), description="Adam learning rate of actor, critics and α (a number "
                         "or lin_<start>).")
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
    target_entropy: float | Literal["auto"] = Field(
        "auto", description="auto: −dim(action space) for Box actions, target_entropy_scale · log |A| for Discrete.")
    target_entropy_scale: float = Field(
        0.89, gt=0, le=1, description="Discrete actions: the auto target entropy as a fraction of the maximum, log |A|.")
    adam_eps: float = Field(1e-8, gt=0, description="Adam ε.")
    async_actors: int = Field(
        0, ge=0, description="Actor processes stepping the envs while the learner trains (0: synchronous). "
        "env.num_envs must divide evenly among them. Not bit-reproducible.")
    actor_sync_every: PositiveInt = Field(1, description="Async: gradient steps between weight publications.")

    def check_with(self, num_envs: int) -> None:
        if self.lr.start <= 0:
            raise ValueError(f"algo.lr = {self.lr.start}: must be > 0")
        if self.buffer_size < num_envs * max(self.n_step, 2):
            raise ValueError(f"algo.buffer_size = {self.buffer_size}: too small for {num_envs} envs")
        if self.async_actors and num_envs % self.async_actors:
            raise ValueError(f"algo.async_actors = {self.async_actors}: env.num_envs ({num_envs}) must be a multiple")

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        layers = {"env": {"num_envs": 1}, "train": {"total_timesteps": 1_000_000},
                  "network": {"hidden_sizes": [256, 256], "activation": "relu", "ortho_init": False}}
        if len(observation_space.shape) == 3:  # images: a replay of 100k, as DrQ keeps (denisyarats/drq config.yaml;
            layers["algo"] = {"buffer_size": 100_000}  # SAC from pixels); a million 96 x 96 RGB frames are 25.7 GiB
        return layers


# ---------------------------------------------------------------- the losses: `probs` [N, A] (discrete actions)
# turns the sampled-action form into the exact expectation over actions; nothing else differs.


def sac_soft_value(q: torch.Tensor, logp: torch.Tensor, alpha: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """V(s) = min_i Q_i(s, a) − α · log π(a|s) for sampled actions (`q` [2, N], `logp` [N]), or with `probs` the
    expectation Σ_a π(a|s) (min_i Q_i(s, a) − α · log π(a|s)) over all actions (`q` [2, N, A], `logp` [N, A])."""
    value = q.amin(0) - alpha * logp
    return value if probs is None else (probs * value).sum(-1)


def sac_critic_loss(q: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """½ Σ_i mean((Q_i(s, a) − y)²) for the twin critics `q` [2, N] and soft targets `targets` [N]."""
    return 0.5 * (q - targets).square().mean(-1).sum()


def sac_actor_loss(alpha: torch.Tensor, logp: torch.Tensor, q: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """mean(α · log π(ã|s) − min_i Q_i(s, ã)) for reparameterised actions ã (`logp` [N], `q` [2, N]), or with
    `probs` mean(Σ_a π(a|s) (α · log π(a|s) − min_i Q_i(s, a))) (`q` [2, N, A], no gradient needed through it)."""
    inner = alpha.detach() * logp - q.amin(0)
    return (inner if probs is None else (probs * inner).sum(-1)).mean()


def sac_alpha_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float,
                   probs: torch.Tensor | None = None) -> torch.Tensor:
    """−mean(log α · (log π + target entropy)), with E_π[log π] = Σ_a π log π for `probs`: α grows while the
    policy's entropy is below the target."""
    logp = logp if probs is None else (probs * logp).sum(-1)
    return -(log_alpha * (logp.detach() + target_entropy)).mean()


# ---------------------------------------------------------------- the acting network (also built by actor processes)


def build_actor(spec, net_cfg) -> torch.nn.Module:
    return CategoricalActor(spec, net_cfg) if spec.discrete else SquashedGaussianActor(spec, net_cfg)


def act(actor: torch.nn.Module, obs: np.ndarray, precision: str, deterministic: bool = False) -> np.ndarray:
    """Actions for a batch of observations, on the actor's device; uses no gradients."""
    device = next(actor.parameters()).device
    with torch.inference_mode(), autocast(device, precision) if precision != "fp32" else nullcontext():
        tensor = torch.as_tensor(obs, device=device)  # the encoders take any float dtype, and uint8 frames
        if isinstance(actor, CategoricalActor):
            return CategoricalHead.sample(actor(tensor), deterministic).cpu().numpy()
        return actor(tensor, deterministic)[0].cpu().numpy()


@contextmanager
def frozen(module: torch.nn.Module):
    """`module`'s parameters require no gradients inside: a backward then skips computing them."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class SAC(Agent):
    def __init__(self, cfg, spec, device: torch.device):
        self.cfg, self.spec, self.device = cfg, spec, device
        self.algo: SACConfig = cfg.algo
        algo = self.algo
        if algo.async_actors and (cfg.env.normalize_obs is True or cfg.env.normalize_reward):
            from rlfoundry.config.errors import ConfigError

            raise ConfigError(f"algo.async_actors = {algo.async_actors}: env.normalize_obs / normalize_reward would "
                              "keep separate statistics in each actor process; allowed with them: 0")
        self.actor = build_actor(spec, cfg.network).to(device)
        self.critic = (TwinQDiscrete if spec.discrete else TwinQ)(spec, cfg.network).to(device)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor_opt = FlatOptimizer(self.actor, algo.lr(0.0), algo.adam_eps, None)
        self.critic_opt = FlatOptimizer(self.critic, algo.lr(0.0), algo.adam_eps, None)
        self.target_flat = flatten_parameters(self.critic_target).requires_grad_(False)
        self.log_alpha = torch.tensor(np.log(algo.ent_coef_init if algo.ent_coef == "auto" else algo.ent_coef),
                                      dtype=torch.float32, device=device, requires_grad=algo.ent_coef == "auto")
        self.alpha_opt = (torch.optim.Adam([self.log_alpha], lr=algo.lr(0.0), fused=device.type in ("cpu", "cuda"))
                          if algo.ent_coef == "auto" else None)
        if spec.discrete:
            auto_entropy = algo.target_entropy_scale * math.log(int(spec.action_space.n))
            action_shape, action_dtype = (), np.int64
        else:
            auto_entropy = -float(spec.action_space.shape[0])
            action_shape, action_dtype = spec.action_space.shape, np.float32
        self.target_entropy = float(auto_entropy if algo.target_entropy == "auto" else algo.target_entropy)
        with sized_by("algo.buffer_size", algo.buffer_size):
            self.replay = ReplayBuffer(algo.buffer_size, spec.num_envs, spec.obs_shape, spec.obs_dtype, action_shape,
                                       action_dtype, n_step=algo.n_step, gamma=algo.gamma,
                                       frame_stack=frame_stack(cfg.env))
        self.rng = np.random.default_rng(env_seed(cfg.train.seed + 1))
        self.obs: np.ndarray | None = None
        self.env_steps = 0
        # fp32 needs no context at all: entering a disabled autocast costs 2 µs, eight times per gradient step
        self.autocast = (lambda: autocast(device, cfg.train.precision)) if cfg.train.precision != "fp32" else nullcontext
        compile_modules(cfg.train.compile, self.actor, self.critic, self.critic_target)
        self.pool = None  # async: the actor processes, started at the first iteration
        self.owed = 0.0  # async: gradient steps owed for the rows received (the fraction carried over)
        self.gradient_steps_done = 0
        if algo.async_actors:
            self.envs_elsewhere = "the envs live in the async actor processes; they start afresh"

    def iterate(self, envs, progress: float) -> Iteration:
        if self.algo.lr.kind != "constant":  # one schedule for the three optimizers, as SB3
            lr = self.algo.lr(progress)
            self.actor_opt.set_lr(lr)
            self.critic_opt.set_lr(lr)
            if self.alpha_opt is not None:
                self.alpha_opt.param_groups[0]["lr"] = lr
        if self.algo.async_actors:
            return self._iterate_async()
        algo, num_envs, space = self.algo, self.spec.num_envs, self.spec.action_space
        if self.obs is None:
            self.obs = start_envs(envs, self.replay, self.cfg.train.seed)

        def choose(obs: np.ndarray) -> np.ndarray:
            if self.env_steps >= algo.learning_starts:
                return self._act(obs, deterministic=False)
            if self.spec.discrete:  # uniform exploration first, as SB3
                return self.rng.integers(space.n, size=num_envs)
            return self.rng.uniform(space.low, space.high, size=(num_envs, *space.shape)).astype(np.float32)

        collected = collect(envs, self.replay, self.obs, choose, algo.train_freq)
        self.obs = collected.obs
        self.env_steps += algo.train_freq * num_envs
        start = time.perf_counter()
        steps = algo.gradient_steps if self._learning() else 0
        return finish_iteration(collected, algo.train_freq * num_envs, self._learn_steps(steps), start)

    def _iterate_async(self) -> Iteration:
        from rlfoundry.buffers.actors import ActorPool

        algo = self.algo
        if self.pool is None:  # the actors may run 2·train_freq rows ahead of what the learner has taken
            self.pool = ActorPool(algo.async_actors, self.cfg, self.spec, self.actor_opt.flat, build_actor, act,
                                  random_steps=max(0, algo.learning_starts - self.env_steps), chunk=algo.train_freq,
                                  lead=2 * algo.train_freq)
        got = self.pool.collect(self.replay, algo.train_freq)
        self.env_steps += got.rows * self.spec.num_envs
        start = time.perf_counter()
        if self._learning():  # the replay ratio of the synchronous agent: gradient_steps per train_freq rows
            self.owed += got.rows * algo.gradient_steps / algo.train_freq
        steps = int(self.owed)
        self.owed -= steps
        metrics = self._learn_steps(steps)
        collected = Collected(None, got.episode_returns, got.episode_lengths, got.time_env, got.time_act)
        return finish_iteration(collected, got.rows * self.spec.num_envs, metrics, start)

    def _learning(self) -> bool:
        return self.env_steps >= self.algo.learning_starts and len(self.replay) >= self.algo.batch_size

    def _learn_steps(self, steps: int) -> dict[str, float]:
        """`steps` gradient steps; their mean metrics (async: the actors get the weights every actor_sync_every)."""
        metrics: dict[str, float] = {"diag/replay_size": float(len(self.replay))}
        totals: dict[str, float] = {}
        for _ in range(steps):
            for key, value in self._learn().items():
                totals[key] = totals.get(key, 0.0) + float(value)
            self.gradient_steps_done += 1
            if self.pool is not None and self.gradient_steps_done % self.algo.actor_sync_every == 0:
                self.pool.publish(self.actor_opt.flat)
        metrics.update({key: value / steps for key, value in totals.items()})
        return metrics

    def _learn(self) -> dict[str, torch.Tensor]:
        batch = self.replay.sample(self.algo.batch_size, self.rng)
        tensor = lambda a: torch.as_tensor(a, device=self.device)
        obs, actions, next_obs = tensor(batch.obs), tensor(batch.actions), tensor(batch.next_obs)
        discrete = self.spec.discrete
        with self.autocast():
            if discrete:  # log π(·|s) [N, A]; the expectations use its probabilities
                logp_new = self.actor(obs)
                probs_new = logp_new.exp()
            else:
                new_actions, logp_new = self.actor(obs)
                probs_new = None
        if self.alpha_opt is not None:
            self.alpha_opt.zero_grad(set_to_none=True)
            sac_alpha_loss(self.log_alpha, logp_new, self.target_entropy, probs_new).backward()
            self.alpha_opt.step()
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad(), self.autocast():
            if discrete:
                next_logp = self.actor(next_obs)
                next_q, next_probs = self.critic_target(next_obs).float(), next_logp.exp()
            else:
                next_actions, next_logp = self.actor(next_obs)
                next_q, next_probs = self.critic_target(next_obs, next_actions).float(), None
            targets = tensor(batch.rewards) + tensor(batch.discounts) * sac_soft_value(next_q, next_logp, alpha, next_probs)
        with self.autocast():
            if discrete:
                taken = actions.long().view(1, -1, 1).expand(2, -1, 1)
                q = self.critic(obs).float().gather(-1, taken).squeeze(-1)
            else:
                q = self.critic(obs, actions).float()
        critic_loss = sac_critic_loss(q, targets)
        self.critic_opt.update(critic_loss)
        with self.autocast():  # the updated critics judge the actor, as in SB3
            if discrete:
                with torch.no_grad():  # the expectation is exact: no gradient through the critics
                    q_new = self.critic(obs).float()
            else:  # gradients for the actions only: frozen critics skip their weight gradients (a fifth of it)
                with frozen(self.critic):
                    q_new = self.critic(obs, new_actions).float()
        actor_loss = sac_actor_loss(alpha, logp_new, q_new, probs_new)
        self.actor_opt.update(actor_loss)
        self.target_flat.data.lerp_(self.critic_opt.flat.data, self.algo.tau)
        entropy = -(logp_new if probs_new is None else (probs_new * logp_new).sum(-1)).detach().mean()
        return {"loss/critic": critic_loss.detach(), "loss/actor": actor_loss.detach(), "diag/alpha": alpha,
                "diag/entropy": entropy, "diag/q_mean": q.detach().mean()}

    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return act(self.actor, np.asarray(obs, dtype=self.spec.obs_dtype), self.cfg.train.precision, deterministic)

    def forget_env_position(self) -> None:
        self.obs = None

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory=None) -> np.ndarray:  # feed-forward only
        return self._act(obs, deterministic)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(), "log_alpha": {"value": self.log_alpha.detach()},
            "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": None if self.alpha_opt is None else self.alpha_opt.state_dict(),
            "replay": replay_state(self.replay, self.obs),  # numpy arrays: they go to the checkpoint's .npz
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
        self.obs = load_replay_state(self.replay, state["replay"])
        self.env_steps = state["counters"]["env_steps"]
        self.rng.bit_generator.state = state["counters"]["rng"]
