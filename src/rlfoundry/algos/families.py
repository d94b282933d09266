"""The three kinds of loop, each written once: an algorithm subclasses its family and writes its loss and update.

- `OnPolicyAgent` (PPO, A2C, REINFORCE): collect a rollout with the current actor-critic, then `learn` from it.
- `OffPolicyAgent` (DQN, SAC, TD3): step the envs `train_freq` times with `explore`d actions into a replay; once
  `learning_starts` steps are stored, `gradient_steps` calls of `update` (one gradient step each); then
  `after_updates` (target networks on a schedule of env steps).
- `LatentAgent` (DreamerV3, PlaNet): step the envs with actions from a world model's latent state, storing sequences;
  after each step, the updates the algorithm's ratio owes.
"""

from __future__ import annotations

import dataclasses
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium
import numpy as np
import torch
from pydantic import Field, PositiveInt

from rlfoundry.algos.base import Agent, AlgorithmConfig, Iteration, Memory, Runtime, averaged, finish_iteration
from rlfoundry.algos.optim import FlatOptimizer
from rlfoundry.buffers import sized_by
from rlfoundry.buffers.recurrent import RecurrentReplay, SequenceSample, StateLayout, reset_state
from rlfoundry.buffers.replay import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    collect,
    load_replay_state,
    replay_state,
    start_envs,
)
from rlfoundry.buffers.rollout import Rollout, RolloutCollector
from rlfoundry.buffers.sequences import SequenceReplay
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import EnvInfo, env_seed, frame_stack
from rlfoundry.nets.heads import CategoricalHead, MultiCategoricalHead
from rlfoundry.nets.policy import GreedyActorCritic, MemoryNet, SharedMemory, build_actor_critic, state_norm
from rlfoundry.world_models.latent import (
    ACTING_KEYS,
    LatentModel,
    acting_arrays,
    acting_inputs,
    restore_acting,
    to_env_actions,
)
from rlfoundry.world_models.rssm import State

# logging.every_steps=auto for the agents that iterate every few env steps: a metrics row per this many env steps
ROW_STEPS = 1000

# ---------------------------------------------------------------- on-policy


class OnPolicyAgent(Agent):
    """An actor-critic `policy` (any memory core), its `optimizer` (a FlatOptimizer, all-reduced across processes)
    and a rollout `collector`; each iteration collects `algo.num_steps` steps per env and hands them to `learn`."""

    iteration_settings = ("env.num_envs", "algo.num_steps")
    actions = ("Discrete", "Box", "MultiDiscrete", "MultiBinary")  # a categorical per entry for the multi ones

    memory_cores = True
    distributed = True
    graphs = True  # the acting step (PPO adds its minibatch step); not yet measured on a GPU: auto leaves it eager
    smoke: ClassVar[tuple[str, ...]] = ("algo.num_steps=64",)
    compile_evaluate: ClassVar[bool] = True  # train.compile also compiles the policy's `evaluate` (the update's forward)

    def __init__(self, cfg, spec, runtime: Runtime):
        super().__init__(cfg, spec, runtime)
        self.policy = build_actor_critic(spec, cfg.network).to(self.device)
        self.optimizer = self.make_optimizer()
        self.collector: RolloutCollector | None = None  # built at the first iteration
        self.resume_collector: dict[str, np.ndarray] | None = None  # from load_state_dict, used at the first iterate
        self.acting = runtime.graphed(self.act_step, copies=True)  # the rollout keeps every step's outputs
        if runtime.compile:  # the compiled methods shadow the class's on this instance
            self.policy.act = runtime.compiled(self.policy.act)  # type: ignore[method-assign]
            if self.compile_evaluate:
                self.policy.evaluate = runtime.compiled(self.policy.evaluate)  # type: ignore[method-assign]

    def make_optimizer(self) -> FlatOptimizer:
        algo = self.algo
        return FlatOptimizer(self.policy, algo.lr(0.0), algo.adam_eps, algo.max_grad_norm)

    @abstractmethod
    def learn(self, rollout: Rollout, progress: float) -> dict[str, float]:
        """Learn from one rollout; the iteration's metrics."""

    def iteration_steps(self, first: bool = False) -> int:
        return self.algo.num_steps * self.spec.num_envs

    def iterate(self, envs, progress: float) -> Iteration:
        with self.autocast():
            rollout, collected = self._collector(envs).collect(self.policy, self.act)
        start = time.perf_counter()
        metrics = self.learn(rollout, progress)
        return finish_iteration(collected, self.algo.num_steps * self.spec.num_envs, metrics, start)

    def act_step(self, obs: torch.Tensor, state: Any, starts: torch.Tensor | None) -> dict[str, Any]:
        """The policy's acting step (actions, log-probabilities, values, the new memory) on device tensors: a CUDA
        graph when the run uses them (`Runtime.graphed`, one per memory layout and `starts` present or not)."""
        out, state = self.policy.act(obs, state, starts)
        return {"out": out, "state": state}

    def act(self, obs: torch.Tensor, state: Any = None, starts: torch.Tensor | None = None) -> tuple[Any, Any]:
        """`policy.act` through `act_step` (the collector's acting)."""
        result = self.acting(obs, state, starts)
        return result["out"], result["state"]

    def _collector(self, envs) -> RolloutCollector:
        """Built at the first iteration; after a resume it continues from the restored envs (`resume_collector`)
        instead of resetting them."""
        if self.collector is None:
            algo = self.algo
            sequence_length = (getattr(algo, "sequence_length", None) or algo.num_steps) if self.policy.recurrent \
                else None
            self.collector = RolloutCollector(envs, self.spec, algo.num_steps, self.device, self.cfg.train.seed,
                                              resume=self.resume_collector, sequence_length=sequence_length)
        return self.collector

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        return predict_actions(self.policy, self.spec, self.runtime, obs, deterministic, memory)

    def state_dict(self) -> dict[str, Any]:
        state = {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.collector is not None:  # the observation the next rollout starts from
            state["collector"] = {key: torch.from_numpy(value) for key, value in self.collector.state().items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        if "collector" in state:  # used when the first iteration builds the collector: no env reset
            self.resume_collector = {key: value.numpy() for key, value in state["collector"].items()}

    def forget_env_position(self) -> None:
        self.resume_collector = None

    def step_outputs(self, obs: torch.Tensor, action: np.ndarray, before: Any, after: Any) -> dict[str, Any]:
        return actor_critic_outputs(self.policy, self.runtime, obs, before, after)

    def acting_network(self) -> torch.nn.Module:
        return GreedyActorCritic(self.policy, self.spec)

    def synced_parameters(self) -> torch.Tensor:
        return self.optimizer.flat


def predict_actions(policy, spec, runtime: Runtime, obs: np.ndarray, deterministic: bool,
                    memory: Memory | None) -> np.ndarray:
    """An actor-critic's actions for a batch of observations, as the env takes them (Gaussian means/samples
    clipped)."""
    with torch.inference_mode(), runtime.autocast():
        tensor = torch.as_tensor(np.asarray(obs, dtype=spec.obs_dtype), device=runtime.device)
        if not policy.recurrent:
            actions = policy.predict(tensor, deterministic)[0].cpu().numpy()
        else:
            if memory is None:
                raise ValueError("a recurrent policy needs a Memory to carry its state between predict calls")
            state = memory.state if memory.state is not None else policy.initial_state(len(tensor))
            starts = None if memory.starts is None else torch.as_tensor(memory.starts, device=runtime.device)
            out, memory.state = policy.predict(tensor, deterministic, state, starts)
            actions = out.cpu().numpy()
    if spec.choices:
        return actions
    return np.clip(actions, spec.action_space.low, spec.action_space.high)


def actor_critic_outputs(policy, runtime: Runtime, obs: torch.Tensor, before: Any, after: Any) -> dict[str, Any]:
    """The inspector's outputs of an ActorCritic on o_t from the memory before it (the one `act` started from)."""
    state = before if before is not None or not policy.recurrent else policy.initial_state(1)
    with torch.inference_mode(), runtime.autocast():
        actor, critic, _ = policy._features(obs, state, None, 1)
        head, value = policy.pi(actor)[0].float(), float(policy.v(critic)[0])
    outputs: dict[str, Any] = {"value": value, "memory_norm": state_norm(after) if policy.recurrent else None}
    if isinstance(policy.pi, CategoricalHead):
        return {**outputs, "probs": head.exp().cpu().numpy()}
    if isinstance(policy.pi, MultiCategoricalHead):  # (the inspector draws one distribution, of Discrete actions)
        return outputs
    std = policy.pi.log_std.detach().float().exp().expand_as(head)
    return {**outputs, "mean": head.cpu().numpy(), "std": std.cpu().numpy()}


# ---------------------------------------------------------------- off-policy


class OffPolicyConfig(AlgorithmConfig):
    """The settings the off-policy loop reads; an algorithm's config adds its own and may change these defaults."""

    buffer_size: PositiveInt = Field(1_000_000, description="Replay capacity in transitions.")
    learning_starts: int = Field(100, ge=0, description="Env steps stored before the first gradient step (the "
                                 "actor-critics act uniformly at random until then).")
    batch_size: PositiveInt = Field(256, description="Transitions per gradient step.")
    train_freq: PositiveInt = Field(1, description="Vector-env steps per iteration.")
    gradient_steps: PositiveInt = Field(1, description="Gradient steps per iteration.")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    n_step: PositiveInt = Field(1, description="n-step returns.")
    sequence_length: PositiveInt = Field(16, description="Memory cores: trained steps per replayed sequence (a batch "
                                         "holds batch_size // sequence_length sequences).")
    burn_in: int = Field(8, ge=0, description="Memory cores: steps before each sequence that only refresh the stored "
                         "state (R2D2's burn-in).")
    sequence_stride: PositiveInt | None = Field(None, description="Memory cores: env steps between sequence starts "
                                                "(null: half of sequence_length, overlapping sequences).")
    priority_eta: float = Field(0.9, ge=0, le=1, description="Memory cores with prioritized replay: a sequence's "
                                "priority mixes η·max + (1 − η)·mean of its |TD errors| (R2D2).")

    def check_with(self, num_envs: int) -> None:
        if self.buffer_size < num_envs * max(self.n_step, 2):
            raise ValueError(f"algo.buffer_size = {self.buffer_size}: too small for {num_envs} envs and n_step "
                             f"{self.n_step}")


class OffPolicyAgent(Agent):
    """A `replay` of transitions and the env steps taken (`env_steps`); its config is an `OffPolicyConfig`. `rng`
    (seeded from train.seed + 1) draws exploration and replay samples.

    With a memory core (`recurrent`) the replay is a `RecurrentReplay` of sequences, the acting network carries
    its state across steps (`acting_state`, reset where episodes start and stored at each sequence start), and a
    batch is `sequences` sequences of `algo.sequence_length` trained steps."""

    iteration_settings = ("env.num_envs", "algo.train_freq")

    smoke = ("algo.train_freq=64", "algo.learning_starts=0", "algo.gradient_steps=2", "algo.batch_size=16")
    row_steps = ROW_STEPS  # an iteration is train_freq env steps: a row per step would cost more than the step
    replay: ReplayBuffer  # built by each algorithm's __init__ (`make_replay`)

    def __init__(self, cfg, spec, runtime: Runtime):
        super().__init__(cfg, spec, runtime)
        self.rng = np.random.default_rng(env_seed(cfg.train.seed + 1))
        self.obs: np.ndarray | None = None  # the observation the next step starts from
        self.env_steps = 0
        self.to_device = runtime.to_device()  # replay samples to the device
        self.obs_to_device = runtime.to_device()  # acting observations to the device (buffers of their own)
        self.recurrent = cfg.network.core != "identity"
        self.acting = runtime.graphed(self.act_step, copies=self.recurrent)  # the acting state outlives the call
        self.sequences = max(1, self.algo.batch_size // self.algo.sequence_length)
        self.layout: StateLayout | None = None  # the acting network's state as a flat row (memory cores)
        self.acting_state: Any = None

    def make_replay(self, action_shape: tuple[int, ...], action_dtype, prioritized: bool = False,
                    initial_state: Callable[[int], Any] | None = None, **extra) -> ReplayBuffer:
        """The replay: of sequences when the run has a memory core (`initial_state`: the acting network's, for
        a batch size); of transitions otherwise."""
        algo = self.algo
        shapes = (algo.buffer_size, self.spec.num_envs, self.spec.obs_shape, self.spec.obs_dtype, action_shape,
                  action_dtype)
        with sized_by("algo.buffer_size", algo.buffer_size):
            if self.recurrent:
                assert initial_state is not None, "a memory core's replay needs the acting network's state"
                self.layout = StateLayout(initial_state(1))
                self.acting_state = initial_state(self.spec.num_envs)
                replay: ReplayBuffer = RecurrentReplay(
                    *shapes, state_size=self.layout.size, length=algo.sequence_length, burn_in=algo.burn_in,
                    stride=algo.sequence_stride, n_step=algo.n_step, gamma=algo.gamma, frame_stack=frame_stack(self.cfg.env),
                    prioritized=prioritized, eta=algo.priority_eta, **extra)
            else:
                kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
                replay = kind(*shapes, n_step=algo.n_step, gamma=algo.gamma, frame_stack=frame_stack(self.cfg.env),
                              **extra)
        self.runtime.keep_replay(replay)
        return replay

    # ------------------------------------------------------------ what an algorithm writes

    @abstractmethod
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """The actions that collect experience from `obs` [B, ...], as the env takes them."""

    @abstractmethod
    def act_step(self, obs: torch.Tensor, state: Any = None) -> dict[str, Any]:
        """The acting network on observations on the device: {"actions": the policy's actions (before any noise
        the host adds)}, and with a memory core from `state`, the new one under "state"; under inference mode. A
        CUDA graph when the run uses them (`Runtime.graphed`): no host sync inside."""

    def act(self, obs: np.ndarray) -> np.ndarray:
        """`act_step` on a batch of observations: copied to the device once (through pinned memory, on CUDA), the
        actions read back once. A memory core's state is reset where the replay's pending row begins an episode,
        handed to the replay where a sequence starts, and carried to the next step."""
        (tensor,) = self.obs_to_device(np.asarray(obs, dtype=self.spec.obs_dtype))
        if not self.recurrent:
            return self.acting(tensor)["actions"].cpu().numpy()
        assert isinstance(self.replay, RecurrentReplay) and self.layout is not None
        state, starts = self.acting_state, self.replay.pending_starts()
        if starts.any():  # most steps begin no episode: nothing to reset
            state = reset_state(state, torch.as_tensor(starts, device=self.device))
        if self.replay.wants_state():
            self.replay.note_state(self.layout.flatten(state).cpu().numpy())
        out = self.acting(tensor, state)
        self.acting_state = out["state"]
        return out["actions"].cpu().numpy()

    def eager_act(self, obs: np.ndarray, memory: Memory | None = None, **options: Any) -> np.ndarray:
        """`act_step` run eagerly on a batch of any size (evaluation, play): no graph, no pinned buffers. A memory
        core's state is carried in `memory`; `options` go to `act_step`."""
        tensor = torch.as_tensor(np.asarray(obs, dtype=self.spec.obs_dtype), device=self.device)
        if not self.recurrent:
            return self.act_step(tensor, **options)["actions"].cpu().numpy()
        if memory is None:
            raise ValueError("a recurrent policy needs a Memory to carry its state between predict calls")
        state = memory.state if memory.state is not None else self.initial_state(len(tensor))
        if memory.starts is not None:
            state = reset_state(state, torch.as_tensor(memory.starts, device=self.device))
        out = self.act_step(tensor, state, **options)
        memory.state = out["state"]
        return out["actions"].cpu().numpy()

    def initial_state(self, batch_size: int) -> Any:
        """A memory core's state at an episode's start, for `batch_size` envs (on the device)."""
        assert self.layout is not None
        return self.layout.unflatten(torch.zeros(batch_size, self.layout.size, device=self.device))

    def sample_sequences(self, beta: float = 1.0) -> tuple[SequenceSample, tuple[torch.Tensor, ...]]:
        """A batch of `sequences` replayed sequences (memory cores), and its arrays on the device in the order of
        `SequenceSample`'s fields up to `weights`."""
        assert isinstance(self.replay, RecurrentReplay)  # make_replay with a memory core
        batch = self.replay.sample(self.sequences, self.rng, beta=beta)
        return batch, self.to_device(*batch[:-1])

    def step_features(self, net: MemoryNet | SharedMemory, obs: torch.Tensor, before: Any, index: int | None = None) -> torch.Tensor:
        """A network's features of o_t [1, ...] for the episode inspector, from the memory before the step (a fresh
        one at an episode's start), or its entry `index` where the acting state holds several memories."""
        if not self.recurrent:
            return net.features(obs)[0]
        state = before if before is not None else self.initial_state(1)
        return net.features(obs, state if index is None else state[index], None)[0]

    @abstractmethod
    def update(self, progress: float) -> dict[str, torch.Tensor]:
        """One gradient step from a replay sample; its metrics (tensors: they are read once per iteration)."""

    def schedule(self, progress: float) -> None:
        """Set what follows a schedule (learning rates, ε) at the start of an iteration."""

    def diagnostics(self) -> dict[str, float]:
        """Metrics of every iteration besides the updates' (ε)."""
        return {}

    def after_updates(self) -> None:
        """After each iteration's updates (target networks updated on a schedule of env steps)."""

    # ------------------------------------------------------------ the loop

    def iteration_steps(self, first: bool = False) -> int:
        return self.algo.train_freq * self.spec.num_envs

    def iterate(self, envs, progress: float) -> Iteration:
        algo = self.algo
        self.schedule(progress)
        if self.obs is None:
            self.obs = start_envs(envs, self.replay, self.cfg.train.seed)
        collected = collect(envs, self.replay, self.obs, self.explore, algo.train_freq)
        self.obs = collected.obs
        self.env_steps += algo.train_freq * self.spec.num_envs
        start = time.perf_counter()
        metrics = {**self.diagnostics(), "diag/replay_size": float(len(self.replay))}
        if self.learning():
            metrics.update(averaged(algo.gradient_steps, lambda: self.update(progress)))
        self.after_updates()
        return finish_iteration(collected, algo.train_freq * self.spec.num_envs, metrics, start)

    def learning(self) -> bool:
        batch = self.sequences if self.recurrent else self.algo.batch_size
        return self.env_steps >= self.algo.learning_starts and len(self.replay) >= batch

    def random_actions(self) -> np.ndarray:
        """Uniformly random actions for every env (the exploration before learning starts, as SB3)."""
        space, num_envs = self.spec.action_space, self.spec.num_envs
        if self.spec.discrete:
            return self.rng.integers(space.n, size=num_envs)
        return self.rng.uniform(space.low, space.high, size=(num_envs, *space.shape)).astype(np.float32)

    def replay_state(self, **counters) -> dict[str, Any]:
        """The replay, the next observation, a memory core's acting state and the counters (env steps, the
        generator, and `counters`)."""
        arrays = replay_state(self.replay, self.obs)  # numpy arrays: they go to the checkpoint's .npz
        if self.layout is not None:
            arrays["acting_state"] = self.layout.flatten(self.acting_state).cpu().numpy()
        return {"replay": arrays,
                "counters": {"env_steps": self.env_steps, **counters, "rng": self.rng.bit_generator.state}}

    def load_replay_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Restore what `replay_state` saved; returns the counters."""
        arrays = dict(state["replay"])
        acting = arrays.pop("acting_state", None)
        self.obs = load_replay_state(self.replay, arrays)
        if self.layout is not None and acting is not None:
            self.acting_state = self.layout.unflatten(torch.as_tensor(acting, device=self.device))
        counters = state["counters"]
        self.env_steps = counters["env_steps"]
        self.rng.bit_generator.state = counters["rng"]
        return counters

    def forget_env_position(self) -> None:
        self.obs = None
        if self.layout is not None:  # the envs restart: so does the memory (the replay marks the episode start)
            self.acting_state = self.initial_state(self.spec.num_envs)


SHARED_MEMORY = Field(False, description="Memory cores: the actor reads the critics' memory (one encoder → core, "
                      "trained by the critics' loss only) instead of a memory of its own; separate memories are what "
                      "Ni et al. 2022 found steadier.")


def memory_actor(build: Callable[[EnvInfo, Any], MemoryNet], spec: EnvInfo, net_cfg, critic: Any,
                 shared: bool) -> tuple[MemoryNet, MemoryNet | SharedMemory]:
    """SAC's or TD3's actor (`build`) and the network that acts: the actor itself, or with `shared` a feed-forward
    actor over the critics' memory features and SharedMemory(critic, actor)."""
    if not shared:
        actor = build(spec, net_cfg)
        return actor, actor
    if net_cfg.core == "identity":
        raise ConfigError("algo.shared_memory = true: shares a memory core between the actor and the critics; with "
                          "network.core = 'identity' there is none (set network.core, or shared_memory: false)")
    features = gymnasium.spaces.Box(-np.inf, np.inf, (critic.width,), np.float32)
    actor = build(dataclasses.replace(spec, observation_space=features),
                  net_cfg.model_copy(update={"encoder": "mlp", "core": "identity"}))
    return actor, SharedMemory(critic, actor)


def actor_critic_memory(acting: MemoryNet | SharedMemory, critic: MemoryNet | None, batch_size: int) -> tuple:
    """SAC's and TD3's acting state with a memory core at an episode's start: the acting network's memory and the
    critics' (`critic`), or the one memory they share (`critic` None)."""
    return tuple(net.initial_state(batch_size) for net in (acting, critic) if net is not None)


def advance_actor_critic(acting: MemoryNet | SharedMemory, critic: MemoryNet | None, obs: torch.Tensor,
                         state: tuple) -> tuple[torch.Tensor, tuple]:
    """One acting step of the memories (the replay stores them all): the acting network's features of `obs` and
    the new state."""
    features, acting_state = acting.features(obs, state[0], None)
    if critic is None:
        return features, (acting_state,)
    return features, (acting_state, critic.features(obs, state[1], None)[1])


def unroll_window(net: MemoryNet, obs: torch.Tensor, state: Any, starts: torch.Tensor, burn_in: int) -> torch.Tensor:
    """A network's features [W − burn_in, N, H] over replayed windows (`obs` [W·N, ...] time-major, `starts`
    [W, N]) from their stored `state`: the first `burn_in` rows only refresh the state, without gradients (R2D2's
    burn-in); the rest carry gradients where they are enabled."""
    window, n = starts.shape
    if burn_in:
        with torch.no_grad():
            state = net.features(obs[:burn_in * n], state, starts[:burn_in], burn_in)[1]
    features = net.features(obs[burn_in * n:], state, starts[burn_in:], window - burn_in, final_state=False)[0]
    return features.view(window - burn_in, n, -1)


# ---------------------------------------------------------------- latent world models


class LatentAgent(Agent):
    """A world model acting from its latent state: `replay` (a SequenceReplay), `memory` (the acting state), `obs`
    (None before the first step), `env_steps` and `updates`; the algorithm chooses actions (`explore`), says how many
    updates each step owes (`updates_owed`) and writes one update (`update`). Actions are in [-1, 1] for Box
    spaces (`to_env` scales them)."""

    iteration_settings = ("env.num_envs", "algo.collect_steps")

    compiles = False  # torch.compile of the world-model loss gained nothing on a CPU after 15 minutes (docs/guide/performance.md)
    row_steps = ROW_STEPS  # an iteration is a few env steps and their updates
    replay: SequenceReplay  # built by each algorithm's __init__
    model: LatentModel

    def __init__(self, cfg, spec, runtime: Runtime):
        super().__init__(cfg, spec, runtime)
        self.rng = np.random.default_rng(env_seed(cfg.train.seed + 1))
        self.obs: np.ndarray | None = None
        self.memory = Memory()
        self.env_steps = 0
        self.updates = 0
        self.acting = runtime.graphed(self.act_step, copies=True)  # the memory keeps the new state
        self.obs_to_device = runtime.to_device()  # the acting observations (buffers of their own)

    @abstractmethod
    def explore(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Actions (the replay's units) for `obs`, and their latent features or None, updating `self.memory`."""

    @abstractmethod
    def act_step(self, obs: torch.Tensor, deter: torch.Tensor, stoch: torch.Tensor, prev: torch.Tensor,
                 starts: torch.Tensor, *options: Any) -> dict[str, torch.Tensor]:
        """One acting step on the device, without gradients: from the acting state (`deter`, `stoch`), the previous
        actions and the episode starts, the posterior after `obs` and the actions: {"actions", "deter", "stoch", and
        what the algorithm adds}. A CUDA graph when the run uses them (`Runtime.graphed`): no host read inside."""

    def latent_act(self, obs: np.ndarray, memory: Memory, explore: bool, *options: Any) -> dict[str, torch.Tensor]:
        """`act_step` from the state `memory` holds, which it then holds the new state: while exploring through the
        graphed step and pinned buffers, else (evaluation, any batch size) eagerly."""
        state, prev, starts = acting_inputs(self.model, memory, len(obs), self.replay.action_shape)
        if explore:
            obs_t, starts_t = self.obs_to_device(np.asarray(obs), starts)
            out = self.acting(obs_t, state.deter, state.stoch, prev, starts_t, *options)
        else:
            obs_t, starts_t = (torch.as_tensor(np.asarray(a), device=self.device) for a in (obs, starts))
            out = self.act_step(obs_t, state.deter, state.stoch, prev, starts_t, *options)
        memory.state = (State(out["deter"], out["stoch"]), out["actions"])
        return out

    @abstractmethod
    def updates_owed(self, done: np.ndarray) -> int:
        """After a step whose episodes ended where `done`: the updates due now."""

    @abstractmethod
    def update(self) -> dict[str, torch.Tensor]:
        """One update of the world model (and the behaviour); its metrics."""

    def iteration_steps(self, first: bool = False) -> int:
        return self.algo.collect_steps * self.spec.num_envs

    def iterate(self, envs, progress: float) -> Iteration:
        """`algo.collect_steps` vector steps, each stored, each followed by the updates it owes."""
        if self.obs is None:
            self.obs, _ = envs.reset(seed=env_seed(self.cfg.train.seed))
            self.replay.start(self.obs)
            self.memory = Memory()
        steps = self.algo.collect_steps
        returns: list[float] = []
        lengths: list[int] = []
        totals: dict[str, float] = {}
        time_env = time_act = time_learn = 0.0
        updates = 0
        for _ in range(steps):
            tick = time.perf_counter()
            actions, latents = self.explore(self.obs)
            middle = time.perf_counter()
            next_obs, rewards, terminated, truncated, info = envs.step(self.to_env(actions))
            time_act += middle - tick
            time_env += time.perf_counter() - middle
            done = terminated | truncated
            self.replay.add(actions, latents, next_obs, rewards, terminated, truncated)
            self.memory.ended(done)
            self.obs = next_obs
            self.env_steps += self.spec.num_envs
            if "_episode" in info:
                ended = info["_episode"]
                returns.extend(info["episode"]["r"][ended].tolist())
                lengths.extend(info["episode"]["l"][ended].tolist())
            start = time.perf_counter()
            for _ in range(self.updates_owed(done)):
                for key, value in self.update().items():
                    totals[key] = totals.get(key, 0.0) + float(value)
                updates += 1
            time_learn += time.perf_counter() - start
        metrics = {key: value / updates for key, value in totals.items()}
        metrics.update({"diag/replay_size": float(len(self.replay)), "diag/updates": float(self.updates),
                        "time/env": time_env, "time/act": time_act, "time/learn": time_learn})
        return Iteration(steps * self.spec.num_envs, metrics, returns, lengths)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return to_env_actions(actions, self.spec.action_space)

    def replay_state(self, **counters) -> dict[str, Any]:
        """The sequence replay with the acting state (numpy arrays: the checkpoint's .npz), and the counters (env
        steps, updates, the generator, and `counters`)."""
        return {"replay": {**self.replay.state_dict(), **acting_arrays(self.memory, self.obs)},
                "counters": {"env_steps": self.env_steps, "updates": self.updates, **counters,
                             "rng": self.rng.bit_generator.state}}

    def load_replay_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Restore what `replay_state` saved; returns the counters."""
        self.replay.load_state_dict({key: value for key, value in state["replay"].items() if key not in ACTING_KEYS})
        self.memory = Memory()
        self.obs = restore_acting(state["replay"], self.memory, self.device)
        counters = state["counters"]
        self.env_steps, self.updates = counters["env_steps"], counters["updates"]
        self.rng.bit_generator.state = counters["rng"]
        return counters

    def forget_env_position(self) -> None:
        self.obs = None
