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

Asynchronous actor processes (`async_actors: N`, `rlfoundry.buffers.actors`), and what they change for
reproducibility and resume: docs/algorithms/sac.md.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import torch
from pydantic import Field, PositiveInt

from rlfoundry.algos.base import Iteration, Memory, Runtime, averaged, finish_iteration
from rlfoundry.algos.families import (
    SHARED_MEMORY,
    OffPolicyAgent,
    OffPolicyConfig,
    actor_critic_memory,
    advance_actor_critic,
    memory_actor,
    unroll_window,
)
from rlfoundry.algos.optim import FlatOptimizer, adam, frozen, load_optimizer_state, optimizer_state, set_lr
from rlfoundry.buffers.replay import Collected
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.monitors import Q_DIVERGENCE, VALUE_BLOWUP, MonitorRule
from rlfoundry.config.schedule import Schedule
from rlfoundry.nets.flat import flatten_parameters
from rlfoundry.nets.heads import CategoricalHead
from rlfoundry.nets.policy import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    CategoricalActor,
    Greedy,
    RecurrentCritic,
    SquashedGaussianActor,
    SquashedMean,
    TwinQ,
    TwinQDiscrete,
    build_critics,
    state_norm,
)

if TYPE_CHECKING:  # imported where used: the actor processes' module is only needed with async actors
    from rlfoundry.buffers.actors import ActorPool


class SACConfig(OffPolicyConfig):
    name: Literal["sac"] = "sac"
    lr: Schedule = Field(Schedule(start=3e-4), description="Adam learning rate of actor, critics and α (a number "
                         "or lin_<start>).")
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
    shared_memory: bool = SHARED_MEMORY

    def check_with(self, num_envs: int) -> None:
        if self.lr.start <= 0:
            raise ValueError(f"algo.lr = {self.lr.start}: must be > 0")
        super().check_with(num_envs)
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


def build_actor(spec, net_cfg) -> CategoricalActor | SquashedGaussianActor:
    return CategoricalActor(spec, net_cfg) if spec.discrete else SquashedGaussianActor(spec, net_cfg)


def act(actor: torch.nn.Module, obs: np.ndarray, precision: str, deterministic: bool = False) -> np.ndarray:
    """Actions for a batch of observations, on the actor's device; uses no gradients."""
    device = next(actor.parameters()).device
    with torch.inference_mode(), Runtime(device, precision).autocast():
        # the encoders take any float dtype, and uint8 frames
        return actor_actions(actor, torch.as_tensor(obs, device=device), deterministic).cpu().numpy()


def actor_actions(actor: torch.nn.Module, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
    """The actor's actions (sampled, or the most likely / the squashed mean) for observations on its device."""
    if isinstance(actor, CategoricalActor):
        return CategoricalHead.sample(actor(obs), deterministic)
    return actor(obs, deterministic)[0]


def head_actions(actor: CategoricalActor | SquashedGaussianActor, features: torch.Tensor,
                 deterministic: bool) -> torch.Tensor:
    """`actor_actions` from a memory core's features."""
    if isinstance(actor, CategoricalActor):
        return CategoricalHead.sample(actor.head(features), deterministic)
    return actor.head(features, deterministic)[0]


class SAC(OffPolicyAgent):
    name = "sac"
    config = SACConfig
    memory_cores = True
    graphs = True
    graphs_by_default = True  # SAC HalfCheetah on an H200: 3.5x the eager steps/s (docs/guide/performance.md, "CUDA graphs")
    monitors = {
        # α collapse: the learned temperature shrinks while the policy's entropy stays above target_entropy; four
        # orders of magnitude below its start (1 with ent_coef auto, as SB3) the entropy term no longer shapes the
        # actor and the entropy still misses its target (Pendulum preset: 1 → 0.2 in 2,000 steps, then slower).
        "diag/alpha": MonitorRule(min=1e-4, relative_to="initial"),
        "diag/q_mean": Q_DIVERGENCE,
        "loss/critic": VALUE_BLOWUP,
    }

    def __init__(self, cfg, spec, runtime: Runtime):
        algo = cfg.algo
        if algo.async_actors and (cfg.env.normalize_obs is True or cfg.env.normalize_reward):
            raise ConfigError(f"algo.async_actors = {algo.async_actors}: env.normalize_obs / normalize_reward would "
                              "keep separate statistics in each actor process; allowed with them: 0")
        if algo.async_actors and cfg.network.core != "identity":
            raise ConfigError(f"algo.async_actors = {algo.async_actors}: the actor processes act without memory; with "
                              f"network.core = '{cfg.network.core}' allowed: 0")
        super().__init__(cfg, spec, runtime)
        device = self.device
        # a memory of their own (Ni et al. 2022), or the actor's too (shared); an image encoder they share
        self.critic: TwinQ | TwinQDiscrete | RecurrentCritic = build_critics(spec, cfg.network).to(device)
        actor, acting_net = memory_actor(build_actor, spec, cfg.network, self.critic, algo.shared_memory)
        self.actor = cast(CategoricalActor | SquashedGaussianActor, actor.to(device))
        self.acting_net = acting_net.to(device)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor_opt = FlatOptimizer(self.actor, algo.lr(0.0), algo.adam_eps, None)
        self.critic_opt = FlatOptimizer(self.critic, algo.lr(0.0), algo.adam_eps, None)
        self.target_flat = flatten_parameters(self.critic_target).requires_grad_(False)
        self.log_alpha = torch.tensor(np.log(algo.ent_coef_init if algo.ent_coef == "auto" else algo.ent_coef),
                                      dtype=torch.float32, device=device, requires_grad=algo.ent_coef == "auto")
        self.alpha_opt = adam([self.log_alpha], algo.lr(0.0), 1e-8) if algo.ent_coef == "auto" else None
        if spec.discrete:
            auto_entropy = algo.target_entropy_scale * math.log(int(spec.action_space.n))
            action_shape: tuple[int, ...] = ()
            action_dtype: type[np.generic] = np.int64
        else:
            auto_entropy = -float(spec.action_space.shape[0])
            action_shape, action_dtype = spec.action_space.shape, np.float32
        self.target_entropy = float(auto_entropy if algo.target_entropy == "auto" else algo.target_entropy)
        self.own_memory = None if algo.shared_memory else cast(RecurrentCritic, self.critic)  # the critics', acting
        memory = partial(actor_critic_memory, self.acting_net, self.own_memory) if self.recurrent else None
        self.replay = self.make_replay(action_shape, action_dtype, initial_state=memory)
        runtime.compile_modules(self.actor, self.critic, self.critic_target)
        self.graphed_step = runtime.graphed(self.gradient_step)  # (a memory core's sequence step stays eager)
        self.pool: ActorPool | None = None  # async: the actor processes, started at the first iteration
        self.owed = 0.0  # async: gradient steps owed for the rows received (the fraction carried over)
        self.gradient_steps_done = 0
        if algo.async_actors:
            self.envs_elsewhere = "the envs live in the async actor processes; they start afresh"

    def schedule(self, progress: float) -> None:
        if self.algo.lr.kind != "constant":  # one schedule for the three optimizers, as SB3
            lr = self.algo.lr(progress)
            self.actor_opt.set_lr(lr)
            self.critic_opt.set_lr(lr)
            if self.alpha_opt is not None:
                set_lr(self.alpha_opt, lr)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        if self.env_steps >= self.algo.learning_starts:
            return self.act(obs)
        if self.recurrent:  # the memory follows the episodes, so the states the replay stores are the actor's
            self.act(obs)
        return self.random_actions()

    def act_step(self, obs: torch.Tensor, state: Any = None, deterministic: bool = False) -> dict[str, Any]:
        with torch.inference_mode(), self.autocast():
            if not self.recurrent:
                return {"actions": actor_actions(self.actor, obs, deterministic)}
            features, state = advance_actor_critic(self.acting_net, self.own_memory, obs, state)
            return {"actions": head_actions(self.actor, features, deterministic), "state": state}

    def iterate(self, envs, progress: float) -> Iteration:
        if not self.algo.async_actors:
            return super().iterate(envs, progress)
        from rlfoundry.buffers.actors import ActorPool

        algo = self.algo
        self.schedule(progress)
        if self.pool is None:  # the actors may run 2·train_freq rows ahead of what the learner has taken
            self.pool = ActorPool(algo.async_actors, self.cfg, self.spec, self.actor_opt.flat, build_actor, act,
                                  random_steps=max(0, algo.learning_starts - self.env_steps), chunk=algo.train_freq,
                                  lead=2 * algo.train_freq)
        got = self.pool.collect(self.replay, algo.train_freq)
        self.env_steps += got.rows * self.spec.num_envs
        start = time.perf_counter()
        if self.learning():  # the replay ratio of the synchronous agent: gradient_steps per train_freq rows
            self.owed += got.rows * algo.gradient_steps / algo.train_freq
        steps = int(self.owed)
        self.owed -= steps
        metrics = {"diag/replay_size": float(len(self.replay)), **averaged(steps, lambda: self.update(progress))}
        collected = Collected(None, got.episode_returns, got.episode_lengths, got.time_env, got.time_act)
        return finish_iteration(collected, got.rows * self.spec.num_envs, metrics, start)

    def update(self, progress: float) -> dict[str, torch.Tensor]:
        """One gradient step of α, the critics and the actor (async: the actors get the weights every
        actor_sync_every). Its metrics in float64, summed over the iteration's steps as Python floats would be."""
        stats = self._update()
        self.gradient_steps_done += 1
        if self.pool is not None and self.gradient_steps_done % self.algo.actor_sync_every == 0:
            self.pool.publish(self.actor_opt.flat)
        return {key: value.double() for key, value in stats.items()}

    def _update(self) -> dict[str, torch.Tensor]:
        if self.recurrent:
            return self.sequence_step(*self.sample_sequences()[1])
        batch = self.replay.sample(self.algo.batch_size, self.rng)
        return self.graphed_step(*self.to_device(batch.obs, batch.actions, batch.next_obs, batch.rewards,
                                                 batch.discounts))

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, rewards: torch.Tensor,
                      discounts: torch.Tensor) -> dict[str, torch.Tensor]:
        """One step of α, the critics and the actor on a batch, and the target update (a CUDA graph:
        `Runtime.graphed`)."""
        return self.soft_step(obs, next_obs, obs, next_obs, actions, rewards, discounts, self.actor, self.critic,
                              self.critic_target)

    def sequence_step(self, obs: torch.Tensor, actions: torch.Tensor, starts: torch.Tensor, states: torch.Tensor,
                      returns: torch.Tensor, discounts: torch.Tensor, bootstrap: torch.Tensor, mask: torch.Tensor,
                      weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """`soft_step` on replayed sequences (memory cores): the actor and the critics unroll their own memories from
        their stored states with burn-in (or the actor reads the critics' features, without their gradients, when
        they share one), the target critics from the same states over the whole window; the losses then take the
        features of the real trained steps and of their bootstrap rows."""
        burn, length = self.algo.burn_in, len(returns)
        obs = obs.flatten(0, 1)
        assert self.layout is not None
        memories = self.layout.unflatten(states)  # (the actor's,) the critics' last
        critic, target = cast(RecurrentCritic, self.critic), cast(RecurrentCritic, self.critic_target)
        with self.autocast():
            with torch.no_grad():
                target_features = unroll_window(target, obs, memories[-1], starts, 0)
            critic_features = unroll_window(critic, obs, memories[-1], starts, burn)
            pi: Callable
            if self.algo.shared_memory:  # the feed-forward actor on the shared features
                actor_features, pi = critic_features.detach(), self.actor
            else:
                actor_features, pi = unroll_window(self.actor, obs, memories[0], starts, burn), self.actor.head
        real = mask.bool()
        envs = torch.arange(starts.shape[1], device=obs.device)
        return self.soft_step(actor_features[:length][real], actor_features.detach()[bootstrap - burn, envs][real],
                              critic_features[:length][real], target_features[bootstrap, envs][real],
                              actions[burn:burn + length][real], returns[real], discounts[real], pi, critic.q,
                              target.q)

    def soft_step(self, actor_in: torch.Tensor, next_actor_in: torch.Tensor, critic_in: torch.Tensor,
                  next_critic_in: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                  pi: Callable, q_fn: Callable, q_target: Callable) -> dict[str, torch.Tensor]:
        """The losses and steps of α, the critics and the actor, and the target update, written once for what the
        networks take: observations (`pi` the actor, `q_fn` and `q_target` the critics), or a memory core's
        features (the actor's head, the critics' heads)."""
        discrete = self.spec.discrete
        with self.autocast():
            if discrete:  # log π(·|s) [N, A]; the expectations use its probabilities
                logp_new = pi(actor_in)
                probs_new = logp_new.exp()
            else:
                new_actions, logp_new = pi(actor_in)
                probs_new = None
        if self.alpha_opt is not None:
            self.alpha_opt.zero_grad(set_to_none=False)  # the gradient stays where a graph reads it
            sac_alpha_loss(self.log_alpha, logp_new, self.target_entropy, probs_new).backward()
            self.alpha_opt.step()
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad(), self.autocast():
            if discrete:
                next_logp = pi(next_actor_in)
                next_q, next_probs = q_target(next_critic_in).float(), next_logp.exp()
            else:
                next_actions, next_logp = pi(next_actor_in)
                next_q, next_probs = q_target(next_critic_in, next_actions).float(), None
            targets = rewards + discounts * sac_soft_value(next_q, next_logp, alpha, next_probs)
        with self.autocast():
            if discrete:
                taken = actions.long().view(1, -1, 1).expand(2, -1, 1)
                q = q_fn(critic_in).float().gather(-1, taken).squeeze(-1)
            else:
                q = q_fn(critic_in, actions).float()
        critic_loss = sac_critic_loss(q, targets)
        self.critic_opt.update(critic_loss)
        critic_in = critic_in.detach()  # a memory's features: the critics' step has used their graph
        with self.autocast():  # the updated critics judge the actor, as in SB3
            if discrete:
                with torch.no_grad():  # the expectation is exact: no gradient through the critics
                    q_new = q_fn(critic_in).float()
            else:  # gradients for the actions only: frozen critics skip their weight gradients (a fifth of it)
                with frozen(self.critic):
                    q_new = q_fn(critic_in, new_actions).float()
        actor_loss = sac_actor_loss(alpha, logp_new, q_new, probs_new)
        self.actor_opt.update(actor_loss)
        self.target_flat.data.lerp_(self.critic_opt.flat.data, self.algo.tau)
        entropy = -(logp_new if probs_new is None else (probs_new * logp_new).sum(-1)).detach().mean()
        return {"loss/critic": critic_loss.detach(), "loss/actor": actor_loss.detach(), "diag/alpha": alpha,
                "diag/entropy": entropy, "diag/q_mean": q.detach().mean()}

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        if self.recurrent:
            return self.eager_act(obs, memory, deterministic=deterministic)
        return act(self.actor, np.asarray(obs, dtype=self.spec.obs_dtype), self.runtime.precision, deterministic)

    def step_outputs(self, obs: torch.Tensor, action: np.ndarray, before: Any, after: Any) -> dict[str, Any]:
        actor = self.actor
        with torch.inference_mode(), self.autocast():
            features = self.step_features(self.acting_net, obs, before, 0)
            if self.recurrent:  # the critics' values from their memory (the last of the acting state)
                critic = cast(RecurrentCritic, self.critic)
                values = partial(critic.q, self.step_features(critic, obs, before, -1))
            else:
                values = partial(self.critic, obs)
            if isinstance(actor, CategoricalActor):
                probs = actor.head(features)[0].float().exp().cpu().numpy()
                q = values().float().amin(0)[0]  # [2, 1, A] -> [A]
                return {"probs": probs, "value": float(q[int(action)])}
            mean = actor.mean(features).float()
            log_std = actor.log_std(features).float().clamp(LOG_STD_MIN, LOG_STD_MAX)
            taken = torch.as_tensor(np.asarray(action, dtype=np.float32)[None], device=obs.device)
            value = float(values(taken).float().amin(0)[0])
        return {"mean": mean[0].cpu().numpy(), "std": log_std[0].exp().cpu().numpy(), "value": value,
                "memory_norm": state_norm(after) if self.recurrent else None}

    def acting_network(self) -> torch.nn.Module:
        return (Greedy if isinstance(self.actor, CategoricalActor) else SquashedMean)(self.acting_net)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(), "log_alpha": {"value": self.log_alpha.detach()},
            "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": None if self.alpha_opt is None else optimizer_state(self.alpha_opt),
            **self.replay_state(),
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
            load_optimizer_state(self.alpha_opt, state["alpha_opt"])
        self.load_replay_state(state)
