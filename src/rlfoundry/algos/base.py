"""The interface the trainer drives. Every algorithm is one `Agent` subclass in its own file."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rlfoundry.buffers.rollout import RolloutCollector
from rlfoundry.envs import env_seed


class Iteration(NamedTuple):
    """What one `iterate` call reports to the trainer."""

    steps: int  # env steps taken (all envs)
    metrics: dict[str, float]  # loss/*, diag/*, time/* ...
    episode_returns: list[float]  # episodes that ended during this iteration (true, unnormalised)
    episode_lengths: list[int]


class Memory:
    """A recurrent policy's state across `Agent.predict` calls on one vector env (evaluation, video, play).

    After each env step, `ended(terminated | truncated)`: with NEXT_STEP autoreset the observation after an
    ended episode is its final one, and the episode that the following observation begins resets the state.
    """

    def __init__(self) -> None:
        self.state = None
        self.starts: np.ndarray | None = None  # [B], true where the next observation begins an episode
        self._ended: np.ndarray | None = None

    def ended(self, done: np.ndarray) -> None:
        self.starts, self._ended = self._ended, np.asarray(done, dtype=bool)


class Agent:
    """One iteration = collect some experience, then learn from it."""

    device: torch.device  # where the agent's networks live
    # Whether `train.compile` compiles anything of this agent; where not, `true` runs eager with a warning.
    compiles: bool = True

    def iterate(self, envs: VectorEnv, progress: float) -> Iteration:
        """`progress` is the fraction of training done (0 → 1), for schedules."""
        raise NotImplementedError

    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        """Actions for a batch of observations, as the env takes them. A recurrent policy keeps its state
        across calls in `memory` (one per vector env); feed-forward ones ignore it."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def forget_env_position(self) -> None:
        """After a resume whose envs could not be restored (they are reset): drop what the agent
        remembers of the envs' current step, so its first iteration starts from a reset."""
        self.resume_collector = None

    # Why the trainer's envs are not the ones the agent steps (e.g. they live in actor processes), or None:
    # their state then is not checkpointed, and a resume resets the agent's envs (logged as for other envs).
    envs_elsewhere: str | None = None

    def close(self) -> None:
        """Release what the agent runs besides its networks (actor processes); the trainer calls it at the end."""


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """The mixed-precision context for `train.precision`: a no-op for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def compiled(fn, setting: bool | str):
    """`fn` through torch.compile when `train.compile` resolved to true (the first calls then compile, for tens of
    seconds on a CPU); `fn` itself otherwise (false, or an unresolved auto)."""
    return torch.compile(fn) if setting is True else fn


def compile_policy(policy, setting: bool | str, learning: bool = True) -> None:
    """train.compile for an actor-critic: its acting (`act`, as the collector calls it) and, with `learning`, its
    update's forward pass (`evaluate`) compiled in place; nothing when the setting is not true."""
    if setting is True:
        policy.act = compiled(policy.act, True)
        if learning:
            policy.evaluate = compiled(policy.evaluate, True)


def compile_modules(setting: bool | str, *modules: torch.nn.Module) -> None:
    """train.compile for agents whose update interleaves several networks and optimizers (DQN, SAC): each network's
    forward pass compiled in place (its state dict keeps its names), for acting and learning alike."""
    if setting is True:
        for module in modules:
            module.compile()


# ---------------------------------------------------------------- shared by the on-policy actor-critics
# (PPO, A2C, REINFORCE): agents with `policy` (an ActorCritic), `optimizer` (a FlatOptimizer), `collector`
# (a RolloutCollector, or None before the first iteration) and `resume_collector`.


def finish_iteration(collected, steps: int, metrics: dict[str, float], learn_start: float) -> Iteration:
    """The iteration's report: the algorithm's metrics plus the time breakdown every run records."""
    metrics = {**metrics, "time/env": collected.time_env, "time/act": collected.time_act,
               "time/learn": time.perf_counter() - learn_start}
    return Iteration(steps, metrics, collected.episode_returns, collected.episode_lengths)


def rollout_collector(agent, envs) -> RolloutCollector:
    """The agent's collector, built at its first iteration; after a resume it continues from the restored envs
    (`resume_collector`) instead of resetting them."""
    if agent.collector is None:
        algo = agent.algo
        sequence_length = (getattr(algo, "sequence_length", None) or algo.num_steps) if agent.policy.recurrent else None
        agent.collector = RolloutCollector(envs, agent.spec, algo.num_steps, agent.device, agent.cfg.train.seed,
                                           resume=agent.resume_collector, sequence_length=sequence_length)
    return agent.collector


def predict_actions(agent, obs: np.ndarray, deterministic: bool, memory: Memory | None) -> np.ndarray:
    """Actions for a batch of observations, as the env takes them (Gaussian means/samples clipped)."""
    spec, policy = agent.spec, agent.policy
    with torch.inference_mode(), agent.autocast():
        tensor = torch.as_tensor(np.asarray(obs, dtype=spec.obs_dtype), device=agent.device)
        if not policy.recurrent:
            actions = policy.predict(tensor, deterministic)[0].cpu().numpy()
        else:
            if memory is None:
                raise ValueError("a recurrent policy needs a Memory to carry its state between predict calls")
            state = memory.state if memory.state is not None else policy.initial_state(len(tensor))
            starts = None if memory.starts is None else torch.as_tensor(memory.starts, device=agent.device)
            out, memory.state = policy.predict(tensor, deterministic, state, starts)
            actions = out.cpu().numpy()
    if spec.discrete:
        return actions
    return np.clip(actions, spec.action_space.low, spec.action_space.high)


def actor_critic_state(agent) -> dict[str, Any]:
    state = {"policy": agent.policy.state_dict(), "optimizer": agent.optimizer.state_dict()}
    if agent.collector is not None:  # the observation the next rollout starts from
        state["collector"] = {key: torch.from_numpy(value) for key, value in agent.collector.state().items()}
    return state


def load_actor_critic_state(agent, state: dict[str, Any]) -> None:
    agent.policy.load_state_dict(state["policy"])
    agent.optimizer.load_state_dict(state["optimizer"])
    if "collector" in state:  # used when the first iteration builds the collector: no env reset
        agent.resume_collector = {key: value.numpy() for key, value in state["collector"].items()}


# ---------------------------------------------------------------- shared by the latent-model agents (DreamerV3,
# PlaNet): agents with `obs` (None before the first step), `memory` (the acting state), `replay` (a SequenceReplay),
# `env_steps`, and `_learn()` (one update's metrics).


def latent_iteration(agent, envs, steps: int, choose, owed) -> Iteration:
    """`steps` vector steps: `choose(obs)` -> (actions in the replay's units, their latents or None), the env
    stepped with them in its own units (`to_env(actions)` of the agent), each step stored; after each, `owed(done)`
    updates (`agent._learn()`, their metrics averaged)."""
    if agent.obs is None:
        agent.obs, _ = envs.reset(seed=env_seed(agent.cfg.train.seed))
        agent.replay.start(agent.obs)
        agent.memory = Memory()
    returns, lengths, totals = [], [], {}
    time_env = time_act = time_learn = 0.0
    updates = 0
    for _ in range(steps):
        tick = time.perf_counter()
        actions, latents = choose(agent.obs)
        middle = time.perf_counter()
        next_obs, rewards, terminated, truncated, info = envs.step(agent.to_env(actions))
        time_act += middle - tick
        time_env += time.perf_counter() - middle
        done = terminated | truncated
        agent.replay.add(actions, latents, next_obs, rewards, terminated, truncated)
        agent.memory.ended(done)
        agent.obs = next_obs
        agent.env_steps += agent.spec.num_envs
        if "_episode" in info:
            ended = info["_episode"]
            returns.extend(info["episode"]["r"][ended].tolist())
            lengths.extend(info["episode"]["l"][ended].tolist())
        start = time.perf_counter()
        for _ in range(owed(done)):
            for key, value in agent._learn().items():
                totals[key] = totals.get(key, 0.0) + float(value)
            updates += 1
        time_learn += time.perf_counter() - start
    metrics = {key: value / updates for key, value in totals.items()}
    metrics.update({"diag/replay_size": float(len(agent.replay)), "diag/updates": float(agent.updates),
                    "time/env": time_env, "time/act": time_act, "time/learn": time_learn})
    return Iteration(steps * agent.spec.num_envs, metrics, returns, lengths)
