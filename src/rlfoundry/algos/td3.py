"""Twin Delayed DDPG (TD3; Fujimoto et al. 2018, arXiv:1802.09477), and DDPG (Lillicrap et al. 2016,
arXiv:1509.02971) as its settings: one critic, no target smoothing, no delay (`algo.name: ddpg`).

    for each iteration:
        step the envs train_freq times with a = clip(μ(s) + ε, low, high), ε ~ N(0, (σ·h)²)
            (h: half the action range; uniform random actions before learning_starts), into the replay
        gradient_steps times, on a sampled batch:
            ã' = clip(μ_target(s') + clip(ε', −c·h, c·h), low, high),  ε' ~ N(0, (σ̃·h)²)   (target smoothing)
            y = r + γ^n · min_i Q_target_i(s', ã')
            critic loss = Σ_i mean((Q_i(s, a) − y)²); one Adam step
            every policy_delay-th step:
                actor loss = −mean(Q_1(s, μ(s))); one Adam step
                θ_target ← τ·θ + (1 − τ)·θ_target   (actor and critics)

Deliberate choices: defaults and update order are Stable-Baselines3's TD3 (lr 1e-3 for both networks, batch 256,
τ 0.005, σ̃ 0.2, c 0.5, delay 2 counted over all gradient steps so far, critic loss Σ_i MSE, 400x300 ReLU
networks), so rl-baselines3-zoo hyperparameters carry over; noises are in units of half the action range, as SB3
draws them on actions rescaled to [−1, 1]. Exploration noise σ (`exploration_noise`) is SB3's NormalActionNoise.
Truncation bootstraps and termination does not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, cast

import numpy as np
import torch
from pydantic import Field, PositiveInt
from torch import nn

from rlfoundry.algos.base import Memory, Runtime
from rlfoundry.algos.families import (
    SHARED_MEMORY,
    OffPolicyAgent,
    OffPolicyConfig,
    actor_critic_memory,
    advance_actor_critic,
    memory_actor,
    unroll_window,
)
from rlfoundry.algos.optim import FlatOptimizer, frozen
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.monitors import Q_DIVERGENCE, VALUE_BLOWUP
from rlfoundry.config.schedule import Schedule
from rlfoundry.nets.flat import flatten_parameters
from rlfoundry.nets.policy import MemoryActing, MemoryNet, RecurrentCritic, TwinQ, build_critics, state_norm


class TD3Config(OffPolicyConfig):
    name: Literal["td3"] = "td3"
    lr: Schedule = Field(Schedule(start=1e-3), description="Adam learning rate of actor and critics (a number or "
                         "lin_<start>).")
    tau: float = Field(0.005, gt=0, le=1, description="Polyak factor of the target networks.")
    exploration_noise: float = Field(0.1, ge=0, description="σ of the Gaussian noise on the actions that collect "
                                     "experience, in units of half the action range.")
    policy_delay: PositiveInt = Field(2, description="Critic steps per actor (and target) step.")
    target_policy_noise: float = Field(0.2, ge=0, description="σ̃ of the target policy smoothing noise, in units of "
                                       "half the action range (0: none).")
    target_noise_clip: float = Field(0.5, ge=0, description="The smoothing noise is clipped to ± this.")
    twin_critics: bool = Field(True, description="Two critics and the minimum of their targets (false: one, DDPG).")
    adam_eps: float = Field(1e-8, gt=0, description="Adam ε.")
    shared_memory: bool = SHARED_MEMORY

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        """An env without a preset: SB3's TD3 defaults (one env, 400x300 ReLU networks) over 1M steps."""
        return {"env": {"num_envs": 1}, "train": {"total_timesteps": 1_000_000},
                "network": {"hidden_sizes": [400, 300], "activation": "relu", "ortho_init": False}}


class DDPGConfig(TD3Config):
    """DDPG: TD3 with one critic, no target policy smoothing and no delay (SB3's DDPG is its TD3 so set)."""

    name: Literal["ddpg"] = "ddpg"  # type: ignore[assignment]
    policy_delay: PositiveInt = Field(1, description="Critic steps per actor (and target) step.")
    target_policy_noise: float = Field(0.0, ge=0, description="σ̃ of the target policy smoothing noise (0: none).")
    twin_critics: bool = Field(False, description="One critic (true: TD3's two).")


def td3_critic_loss(q: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Σ_i mean((Q_i(s, a) − y)²) for the critics `q` [C, N] and targets `targets` [N]."""
    return (q - targets).square().mean(-1).sum()


def td3_actor_loss(q_first: torch.Tensor) -> torch.Tensor:
    """−mean(Q_1(s, μ(s))) for the first critic's values of the actor's actions [N]."""
    return -q_first.mean()


def smoothed_targets(next_actions: torch.Tensor, noise: torch.Tensor, clip: float, scale: torch.Tensor,
                     low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Target policy smoothing: clip(μ'(s') + clip(noise·h, −c·h, c·h), low, high), with `noise` ~ N(0, σ̃²) drawn
    in units of half the action range h = `scale`."""
    return (next_actions + (noise.clamp(-clip, clip) * scale)).clamp(low, high)


class DeterministicActor(MemoryNet):
    """encoder → core → linear → tanh, scaled to the action bounds: μ(s) [N, A]."""

    scale: torch.Tensor  # buffers, registered in __init__
    offset: torch.Tensor

    def __init__(self, spec, net_cfg):
        super().__init__(spec.observation_space, net_cfg)
        self.out = nn.Linear(self.width, int(spec.action_space.shape[0]))
        low, high = torch.as_tensor(spec.action_space.low), torch.as_tensor(spec.action_space.high)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("offset", (high + low) / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """μ(s) of a feed-forward actor."""
        return self.head(self.encoder(obs).squeeze(0))

    def head(self, features: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.out(features).float()) * self.scale + self.offset


class MeanAction(MemoryActing):
    """A DeterministicActor's action, its memory as flat tensors (export)."""

    def act(self, features: torch.Tensor) -> torch.Tensor:
        return cast(DeterministicActor, self.net).head(features)


class TD3(OffPolicyAgent):
    name = "td3"
    actions = ("Box",)
    config = TD3Config
    memory_cores = True
    graphs = True
    graphs_by_default = True  # TD3 HalfCheetah on an H200: 2.5x the eager steps/s (docs/guide/performance.md, "CUDA graphs")
    monitors = {"diag/q_mean": Q_DIVERGENCE, "loss/critic": VALUE_BLOWUP}

    def __init__(self, cfg, spec, runtime: Runtime):
        if spec.discrete or len(spec.action_space.shape) != 1:
            raise ConfigError(f"algo.name = '{cfg.algo.name}': {spec.id} has {spec.action_space} actions; it acts "
                              "with a deterministic actor on a 1-D Box (for Discrete actions try sac or dqn)")
        super().__init__(cfg, spec, runtime)
        algo, device = self.algo, self.device
        critics = 2 if algo.twin_critics else 1
        # a memory of their own (Ni et al. 2022), or the actor's too (shared); an image encoder they share
        self.critic = cast(TwinQ | RecurrentCritic, build_critics(spec, cfg.network, critics).to(device))
        actor, acting_net = memory_actor(DeterministicActor, spec, cfg.network, self.critic, algo.shared_memory)
        self.actor, self.acting_net = cast(DeterministicActor, actor.to(device)), acting_net.to(device)
        self.actor_target = copy.deepcopy(self.actor)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor_opt = FlatOptimizer(self.actor, algo.lr(0.0), algo.adam_eps, None)
        self.critic_opt = FlatOptimizer(self.critic, algo.lr(0.0), algo.adam_eps, None)
        self.actor_target_flat = flatten_parameters(self.actor_target).requires_grad_(False)
        self.critic_target_flat = flatten_parameters(self.critic_target).requires_grad_(False)
        self.own_memory = None if algo.shared_memory else cast(RecurrentCritic, self.critic)  # the critics', acting
        memory = partial(actor_critic_memory, self.acting_net, self.own_memory) if self.recurrent else None
        self.replay = self.make_replay(spec.action_space.shape, np.float32, initial_state=memory)
        self.low = torch.as_tensor(spec.action_space.low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(spec.action_space.high, dtype=torch.float32, device=device)
        self.half_range = (spec.action_space.high - spec.action_space.low) / 2  # the unit of the noises
        self.updates = 0  # gradient steps so far: the actor steps on every policy_delay-th
        self.graphed_step = runtime.graphed(self.gradient_step)  # two graphs: with and without the actor's step
        runtime.compile_modules(self.actor, self.critic, self.actor_target, self.critic_target)

    def schedule(self, progress: float) -> None:
        if self.algo.lr.kind != "constant":
            lr = self.algo.lr(progress)
            self.actor_opt.set_lr(lr)
            self.critic_opt.set_lr(lr)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        if self.env_steps < self.algo.learning_starts:
            if self.recurrent:  # the memory follows the episodes, so the states the replay stores are the actor's
                self.act(obs)
            return self.random_actions()
        actions = self.act(obs)
        noise = self.rng.normal(0.0, self.algo.exploration_noise, size=actions.shape) * self.half_range
        return np.clip(actions + noise, self.spec.action_space.low, self.spec.action_space.high).astype(np.float32)

    def update(self, progress: float) -> dict[str, torch.Tensor]:
        self.updates += 1
        actor = self.updates % self.algo.policy_delay == 0
        if self.recurrent:  # (eager: a memory core's unroll reads the episode starts on the host)
            return self.sequence_step(actor, *self.sample_sequences()[1])
        batch = self.replay.sample(self.algo.batch_size, self.rng)
        inputs = self.to_device(batch.obs, batch.actions, batch.next_obs, batch.rewards, batch.discounts)
        return self.graphed_step(*inputs, actor)

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, rewards: torch.Tensor,
                      discounts: torch.Tensor, actor: bool) -> dict[str, torch.Tensor]:
        """One critic step on a batch and, with `actor`, the actor's step and the target updates (a CUDA graph for
        each value of `actor`: `Runtime.graphed`)."""
        return self.td3_step(obs if actor else None, next_obs, obs, next_obs, actions, rewards, discounts, self.actor,
                             self.actor_target, self.critic, self.critic_target)

    def sequence_step(self, actor: bool, obs: torch.Tensor, actions: torch.Tensor, starts: torch.Tensor,
                      states: torch.Tensor, returns: torch.Tensor, discounts: torch.Tensor, bootstrap: torch.Tensor,
                      mask: torch.Tensor, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """`td3_step` on replayed sequences (memory cores): the actor (when it steps) and the critics unroll their
        own memories from their stored states with burn-in (or the actor reads the critics' features, without their
        gradients, when they share one), the targets from the same states over the whole window; the losses then
        take the features of the real trained steps and of their bootstrap rows."""
        burn, length = self.algo.burn_in, len(returns)
        obs = obs.flatten(0, 1)
        assert self.layout is not None
        memories = self.layout.unflatten(states)  # (the actor's,) the critics' last
        critic, critic_target = cast(RecurrentCritic, self.critic), cast(RecurrentCritic, self.critic_target)
        real = mask.bool()
        envs = torch.arange(starts.shape[1], device=obs.device)
        with self.autocast():
            with torch.no_grad():
                next_critic_in = unroll_window(critic_target, obs, memories[-1], starts, 0)[bootstrap, envs][real]
            critic_in = unroll_window(critic, obs, memories[-1], starts, burn)[:length][real]
            mu: Callable
            mu_target: Callable
            if self.algo.shared_memory:  # the feed-forward actor and its target read the critics' features
                next_actor_in, actor_in = next_critic_in, critic_in.detach() if actor else None
                mu, mu_target = self.actor, self.actor_target
            else:
                with torch.no_grad():
                    next_actor_in = unroll_window(self.actor_target, obs, memories[0], starts, 0)[bootstrap, envs][real]
                actor_in = unroll_window(self.actor, obs, memories[0], starts, burn)[:length][real] if actor else None
                mu, mu_target = self.actor.head, self.actor_target.head
        return self.td3_step(actor_in, next_actor_in, critic_in, next_critic_in, actions[burn:burn + length][real],
                             returns[real], discounts[real], mu, mu_target, critic.q, critic_target.q)

    def td3_step(self, actor_in: torch.Tensor | None, next_actor_in: torch.Tensor, critic_in: torch.Tensor,
                 next_critic_in: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                 mu: Callable, mu_target: Callable, q_fn: Callable, q_target: Callable) -> dict[str, torch.Tensor]:
        """The critics' step and, given `actor_in`, the actor's step and the target updates, written once for what
        the networks take: observations (`mu`, `q_fn` and their targets are the networks), or a memory core's
        features (their heads)."""
        algo = self.algo
        with torch.no_grad(), self.autocast():
            next_actions = mu_target(next_actor_in)
            if algo.target_policy_noise > 0:
                noise = torch.randn_like(next_actions) * algo.target_policy_noise
                next_actions = smoothed_targets(next_actions, noise, algo.target_noise_clip, self.actor.scale,
                                                self.low, self.high)
            next_q = q_target(next_critic_in, next_actions).float().amin(0)
            targets = rewards + discounts * next_q
        with self.autocast():
            q = q_fn(critic_in, actions).float()
        critic_loss = td3_critic_loss(q, targets)
        self.critic_opt.update(critic_loss)
        stats = {"loss/critic": critic_loss.detach().double(), "diag/q_mean": q.detach().mean().double()}
        if actor_in is not None:
            with self.autocast(), frozen(self.critic):  # gradients for the actions only
                actor_loss = td3_actor_loss(q_fn(critic_in.detach(), mu(actor_in)).float()[0])
            self.actor_opt.update(actor_loss)
            self.critic_target_flat.data.lerp_(self.critic_opt.flat.data, algo.tau)
            self.actor_target_flat.data.lerp_(self.actor_opt.flat.data, algo.tau)
            stats["loss/actor"] = actor_loss.detach().double()
        return stats

    def act_step(self, obs: torch.Tensor, state: Any = None) -> dict[str, Any]:
        with torch.inference_mode(), self.autocast():
            if not self.recurrent:
                return {"actions": self.actor(obs)}
            features, state = advance_actor_critic(self.acting_net, self.own_memory, obs, state)
            return {"actions": self.actor.head(features), "state": state}

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        """μ(s); with exploration noise (from NumPy's global generator, which an evaluation gives a state of its own)
        when not deterministic. A memory core's state is carried in `memory`."""
        actions = self.eager_act(obs, memory)
        if not deterministic:
            noise = np.random.normal(0.0, self.algo.exploration_noise, size=actions.shape)
            actions = actions + noise * self.half_range
        return np.clip(actions, self.spec.action_space.low, self.spec.action_space.high)

    def step_outputs(self, obs: torch.Tensor, action: np.ndarray, before: Any, after: Any) -> dict[str, Any]:
        with torch.inference_mode(), self.autocast():
            mean = self.actor.head(self.step_features(self.acting_net, obs, before, 0))[0].float()
            taken = torch.as_tensor(np.asarray(action, dtype=np.float32)[None], device=obs.device)
            if self.recurrent:  # the critics' values from their memory (the last of the acting state)
                critic = cast(RecurrentCritic, self.critic)
                q = critic.q(self.step_features(critic, obs, before, -1), taken)
            else:
                q = self.critic(obs, taken)
            value = float(q.float().amin(0)[0])
        return {"mean": mean.cpu().numpy(), "value": value,
                "memory_norm": state_norm(after) if self.recurrent else None}

    def acting_network(self) -> nn.Module:
        return MeanAction(self.acting_net)

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(), "critic_target": self.critic_target.state_dict(),
            "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            **self.replay_state(updates=self.updates),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.updates = self.load_replay_state(state)["updates"]


class DDPG(TD3):
    name = "ddpg"
    config = DDPGConfig
