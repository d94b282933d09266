"""Deep Q-Networks (Mnih et al. 2015) and the usual improvements, each switched in config:
Double DQN (van Hasselt et al. 2016), dueling heads (Wang et al. 2016), n-step returns (Sutton 1988),
prioritized replay (Schaul et al. 2016), hard or Polyak target updates.

    for each iteration:
        step the envs train_freq times with ε-greedy actions (ε: a linear schedule), into the replay
        once learning_starts steps are stored, gradient_steps times:
            sample a batch (uniform, or ∝ priority with importance weights (N·P)^-β, β annealed to 1)
            target = R_n + γ^n · Q_target(s', argmax_a Q(s', a))   (double)   or  max_a Q_target(s', a)
            loss = mean(w · Huber(Q(s, a) − target)); one Adam step, gradient norm clipped
            (prioritized: new priorities |Q(s, a) − target|)
        every target_update_interval env steps: θ_target ← τ·θ + (1 − τ)·θ_target   (τ = 1: a copy)

With a memory core (R2D2, Kapturowski et al. 2019) a batch is whole sequences from the stored core state: a
burn-in without gradients, then the trained steps, each with its n-step target from the target network unrolled
over the same window; the loss is averaged over real steps (not reset rows).

Deliberate choices: defaults are Stable-Baselines3's DQN (Huber loss, grad norm 10, τ 1), so
rl-baselines3-zoo hyperparameters carry over; truncation bootstraps and termination does not (the
replay's n-step discounts carry that); reset rows of NEXT_STEP autoreset never enter a batch.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, PositiveInt

from rlfoundry.algos.base import Memory, Runtime
from rlfoundry.algos.families import OffPolicyAgent, OffPolicyConfig, unroll_window
from rlfoundry.algos.optim import FlatOptimizer
from rlfoundry.buffers.recurrent import RecurrentReplay
from rlfoundry.buffers.replay import PrioritizedReplayBuffer
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.monitors import Q_DIVERGENCE, VALUE_BLOWUP
from rlfoundry.config.schedule import Schedule
from rlfoundry.nets.flat import flatten_parameters
from rlfoundry.nets.policy import Greedy, QNetwork, state_norm


class DQNConfig(OffPolicyConfig):
    name: Literal["dqn"] = "dqn"
    lr: Schedule = Field(Schedule(start=1e-4), description="Adam learning rate (number or lin_<start>).")
    batch_size: PositiveInt = Field(32, description="Transitions per gradient step.")
    train_freq: PositiveInt = Field(4, description="Vector-env steps per iteration.")
    tau: float = Field(1.0, gt=0, le=1, description="Target update: 1 copies the weights, < 1 is Polyak averaging.")
    target_update_interval: PositiveInt = Field(10_000, description="Env steps between target updates.")
    exploration_initial_eps: float = Field(1.0, ge=0, le=1, description="ε at the start.")
    exploration_final_eps: float = Field(0.05, ge=0, le=1, description="ε after the decay.")
    exploration_fraction: float = Field(0.1, gt=0, le=1, description="Fraction of training over which ε decays.")
    double: bool = Field(True, description="Double DQN: the online network picks the next action.")
    dueling: bool = Field(False, description="Dueling value/advantage heads.")
    prioritized: bool = Field(False, description="Prioritized replay (proportional, sum tree).")
    per_alpha: float = Field(0.6, ge=0, description="Priority exponent α.")
    per_beta: float = Field(0.4, ge=0, le=1, description="Importance-weight exponent β at the start (annealed to 1).")
    max_grad_norm: float = Field(10.0, gt=0, description="Global gradient-norm clip.")
    value_rescale: bool = Field(False, description="Learn h(Q) with R2D2's invertible rescaling h(x) = sign(x)("
                                "√(|x|+1) − 1) + 0.001·x: targets h(R + γ^n·h⁻¹(Q')), so values stay small (a memory "
                                "core's bounded features reach them).")
    adam_eps: float = Field(1e-8, gt=0, description="Adam ε.")

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        from gymnasium import spaces

        if not isinstance(action_space, spaces.Discrete):
            return {}  # the env check refuses it: DQN needs discrete actions
        if len(observation_space.shape) == 3:  # SB3 / zoo Atari settings
            return {"env": {"num_envs": 1}, "algo": {"buffer_size": 100_000, "learning_starts": 100_000,
                    "target_update_interval": 1000, "exploration_fraction": 0.1, "exploration_final_eps": 0.01},
                    "train": {"total_timesteps": 10_000_000}}
        return {"env": {"num_envs": 1}, "algo": {"buffer_size": 100_000, "learning_starts": 1000},
                "network": {"activation": "relu"}, "train": {"total_timesteps": 100_000}}


RESCALE_EPS = 1e-3  # ε of R2D2's h (Kapturowski et al. 2019, after Pohlen et al. 2018)


def rescale(x: torch.Tensor) -> torch.Tensor:
    """h(x) = sign(x)(√(|x| + 1) − 1) + εx."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + RESCALE_EPS * x


def unrescale(x: torch.Tensor) -> torch.Tensor:
    """h⁻¹(x) = sign(x)(((√(1 + 4ε(|x| + 1 + ε)) − 1) / 2ε)² − 1)."""
    root = (torch.sqrt(1 + 4 * RESCALE_EPS * (x.abs() + 1 + RESCALE_EPS)) - 1) / (2 * RESCALE_EPS)
    return torch.sign(x) * (root.square() - 1)


def dqn_loss(q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
             mask: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Importance-weighted Huber loss over a batch [N] (or sequences [T, N], weights [N], averaged over the steps
    `mask` keeps); `stats` are detached scalars."""
    losses = weights * torch.nn.functional.smooth_l1_loss(q_taken, targets, reduction="none")
    if mask is None:
        loss, q_mean = losses.mean(), q_taken.detach().mean()
    else:
        count = mask.sum().clamp(min=1)
        loss, q_mean = (losses * mask).sum() / count, (q_taken.detach() * mask).sum() / count
    return loss, {"loss/q": loss.detach(), "diag/q_mean": q_mean}


class DQN(OffPolicyAgent):
    name = "dqn"
    actions = ("Discrete",)
    config = DQNConfig
    memory_cores = True
    graphs = True
    graphs_by_default = True  # DQN Breakout on an H200: 1.25x the eager steps/s (docs/guide/performance.md, "CUDA graphs")
    monitors = {"diag/q_mean": Q_DIVERGENCE, "loss/q": VALUE_BLOWUP}

    def __init__(self, cfg, spec, runtime: Runtime):
        if not spec.discrete:
            raise ConfigError(f"algo.name = 'dqn': {spec.id} has continuous actions; DQN needs Discrete (try sac)")
        super().__init__(cfg, spec, runtime)
        algo = self.algo
        self.q = QNetwork(spec, cfg.network, algo.dueling).to(self.device)
        self.target = copy.deepcopy(self.q)
        self.optimizer = FlatOptimizer(self.q, algo.lr(0.0), algo.adam_eps, algo.max_grad_norm)
        self.target_flat = flatten_parameters(self.target).requires_grad_(False)
        self.replay = self.make_replay((), np.int64, algo.prioritized, initial_state=self.q.initial_state,
                                       **({"alpha": algo.per_alpha} if algo.prioritized else {}))
        self.next_target_update = algo.target_update_interval
        self.epsilon = algo.exploration_initial_eps
        runtime.compile_modules(self.q, self.target)
        self.graphed_step = runtime.graphed(self.gradient_step)  # (a memory core's sequence step stays eager)

    def act_step(self, obs: torch.Tensor, state: Any = None) -> dict[str, Any]:
        with torch.inference_mode(), self.autocast():
            if not self.recurrent:
                return {"actions": self.q(obs).argmax(-1)}
            q, state = self.q.unroll(obs, state, None)
            return {"actions": q.argmax(-1), "state": state}

    def schedule(self, progress: float) -> None:
        algo = self.algo
        done = min(1.0, progress / algo.exploration_fraction)
        self.epsilon = algo.exploration_initial_eps + done * (algo.exploration_final_eps - algo.exploration_initial_eps)
        self.optimizer.set_lr(algo.lr(progress))

    def diagnostics(self) -> dict[str, float]:
        return {"diag/epsilon": self.epsilon}

    def explore(self, obs: np.ndarray) -> np.ndarray:  # ε-greedy
        num_envs = self.spec.num_envs
        actions = self.act(obs)
        explore = self.rng.random(num_envs) < self.epsilon
        return np.where(explore, self.rng.integers(self.spec.action_space.n, size=num_envs), actions)

    def after_updates(self) -> None:
        while self.env_steps >= self.next_target_update:
            self.target_flat.data.lerp_(self.optimizer.flat.data, self.algo.tau)  # τ = 1: an exact copy
            self.next_target_update += self.algo.target_update_interval

    def update(self, progress: float) -> dict[str, torch.Tensor]:
        algo = self.algo
        if self.recurrent:
            return self.sequence_update(progress)
        if algo.prioritized:
            assert isinstance(self.replay, PrioritizedReplayBuffer)  # make_replay(prioritized=True)
            beta = algo.per_beta + progress * (1.0 - algo.per_beta)  # annealed to 1
            batch = self.replay.sample(algo.batch_size, self.rng, beta=beta)
        else:
            batch = self.replay.sample(algo.batch_size, self.rng)
        stats = self.graphed_step(*self.to_device(batch.obs, batch.actions, batch.next_obs, batch.rewards,
                                                  batch.discounts, batch.weights))
        if algo.prioritized:
            assert isinstance(self.replay, PrioritizedReplayBuffer)
            self.replay.update_priorities(batch.indices, stats.pop("td_error").cpu().numpy())
        return stats

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, rewards: torch.Tensor,
                      discounts: torch.Tensor, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """One step of the Q-network on a batch (a CUDA graph: `Runtime.graphed`); its metrics, and with prioritised
        replay each transition's |TD error| under `td_error` (the priorities)."""
        with torch.no_grad(), self.autocast():
            next_q = self.target(next_obs)
            if self.algo.double:
                next_q = next_q.gather(-1, self.q(next_obs).argmax(-1, keepdim=True)).squeeze(-1)
            else:
                next_q = next_q.max(-1).values
            targets = self.targets(rewards, discounts, next_q)
        with self.autocast():
            q_taken = self.q(obs).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        loss, stats = dqn_loss(q_taken, targets, weights)
        self.optimizer.update(loss, stats)
        if self.algo.prioritized:
            stats["td_error"] = (q_taken.detach() - targets).abs()
        return stats

    def sequence_update(self, progress: float) -> dict[str, torch.Tensor]:
        """One gradient step on a batch of replayed sequences (a memory core); with prioritized replay, new
        priorities for them."""
        algo = self.algo
        batch, tensors = self.sample_sequences(beta=algo.per_beta + progress * (1.0 - algo.per_beta))
        stats = self.sequence_step(*tensors)
        errors = stats.pop("td_error")
        if algo.prioritized:
            assert isinstance(self.replay, RecurrentReplay)
            self.replay.update_priorities(batch.indices, errors.cpu().numpy(), batch.mask)
        return stats

    def sequence_step(self, obs: torch.Tensor, actions: torch.Tensor, starts: torch.Tensor, states: torch.Tensor,
                      returns: torch.Tensor, discounts: torch.Tensor, bootstrap: torch.Tensor, mask: torch.Tensor,
                      weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """R2D2's step on sequences [W, N] (see `buffers.recurrent.SequenceSample`): both networks start from the
        stored state; the online one refreshes it over the burn-in without gradients, then unrolls the rest; the
        targets take the target network's values at each return's bootstrap row (the online argmax, double)."""
        burn, length = self.algo.burn_in, len(returns)
        obs = obs.flatten(0, 1)
        assert self.layout is not None
        state = self.layout.unflatten(states)
        with self.autocast():
            with torch.no_grad():
                target_q = self.target.head(unroll_window(self.target, obs, state, starts, 0))
            q = self.q.head(unroll_window(self.q, obs, state, starts, burn))
        with torch.no_grad():
            envs = torch.arange(starts.shape[1], device=obs.device)
            next_q = target_q[bootstrap, envs]  # [T, N, A]
            if self.algo.double:
                next_q = next_q.gather(-1, q[bootstrap - burn, envs].argmax(-1, keepdim=True)).squeeze(-1)
            else:
                next_q = next_q.max(-1).values
            targets = self.targets(returns, discounts, next_q)
        q_taken = q[:length].gather(-1, actions[burn:burn + length].long().unsqueeze(-1)).squeeze(-1)
        loss, stats = dqn_loss(q_taken, targets, weights, mask)
        self.optimizer.update(loss, stats)
        stats["td_error"] = (q_taken.detach() - targets).abs()
        return stats

    def targets(self, returns: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor) -> torch.Tensor:
        """R + γ^n·Q', or with value rescaling h(R + γ^n·h⁻¹(Q'))."""
        if self.algo.value_rescale:
            return rescale(returns + discounts * unrescale(next_q))
        return returns + discounts * next_q

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        """Greedy actions (ε-greedy with the final ε when not deterministic, drawn from NumPy's global generator,
        which an evaluation gives a state of its own: the agent's generator, that training draws from, is not
        touched); a memory core's state is carried in `memory`."""
        actions = self.eager_act(obs, memory)
        if deterministic:
            return actions
        explore = np.random.random(len(actions)) < self.algo.exploration_final_eps
        return np.where(explore, np.random.randint(self.spec.action_space.n, size=len(actions)), actions)

    def step_outputs(self, obs: torch.Tensor, action: np.ndarray, before: Any, after: Any) -> dict[str, Any]:
        with torch.inference_mode(), self.autocast():
            q = self.q.head(self.step_features(self.q, obs, before))[0].float().cpu().numpy()
        return {"q": q, "value": float(q[int(action)]), "memory_norm": state_norm(after) if self.recurrent else None}

    def acting_network(self) -> torch.nn.Module:
        return Greedy(self.q)

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.state_dict(), "target": self.target.state_dict(), "optimizer": self.optimizer.state_dict(),
                **self.replay_state(next_target_update=self.next_target_update)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.next_target_update = self.load_replay_state(state)["next_target_update"]
