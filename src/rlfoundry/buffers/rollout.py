"""On-policy rollouts: time-major storage, collection from a NEXT_STEP vector env, and GAE.

With Gymnasium's NEXT_STEP autoreset (see `rlfoundry.envs`) a rollout row `t` whose previous step
ended the episode is a *reset row*: its observation is that episode's true final observation, the
env ignores its action, and its reward is 0. Such rows are marked `valid = False` and never learned
from, but their value estimate is exactly V(final observation), which is what bootstrapping on
truncation needs — so it comes for free from the normal forward pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rlfoundry.envs import EnvSpec
from rlfoundry.run.seeding import env_seed


def discounted_scan(x: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """y[t] = x[t] + coef[t] * y[t+1] along dim 0, with y[T] = 0.

    A log-depth parallel scan (Hillis–Steele): ⌈log2 T⌉ tensor operations instead of a Python loop
    over time. After the round with stride s, y[t] sums x over [t, t + 2s) and coef[t] carries the
    product of coefficients over the same span.
    """
    y, c = x, coef
    steps = x.shape[0]
    shift = 1
    while shift < steps:
        y = torch.cat([y[:-shift] + c[:-shift] * y[shift:], y[-shift:]])
        c = torch.cat([c[:-shift] * c[shift:], c[-shift:]])
        shift *= 2
    return y


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """Generalised advantage estimates [T, B] (Schulman et al. 2016, arXiv:1506.02438).

    `next_values[t]` is V of the observation that followed step t (the true final observation when
    the episode ended there). Termination zeroes the bootstrap; any episode end (termination or
    truncation) stops the λ-chain.
    """
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    return discounted_scan(deltas, gamma * gae_lambda * (1.0 - dones))


@dataclass
class Rollout:
    """One rollout, time-major [T, B, ...]."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor  # False on reset rows
    last_value: torch.Tensor  # [B]: V of the observation after the last step

    @property
    def next_values(self) -> torch.Tensor:
        return torch.cat([self.values[1:], self.last_value.unsqueeze(0)])

    @property
    def dones(self) -> torch.Tensor:
        return torch.logical_or(self.terminated, self.truncated).float()


@dataclass
class CollectStats:
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    time_env: float = 0.0
    time_act: float = 0.0


class RolloutCollector:
    """Steps a vector env with a policy and fills preallocated rollout storage.

    Owns what carries over between rollouts: the current observation and which envs just ended.
    """

    def __init__(self, envs: VectorEnv, spec: EnvSpec, num_steps: int, device: torch.device, seed: int,
                 resume: dict[str, np.ndarray] | None = None):
        """`resume` (what `state()` returned) continues from restored envs instead of resetting them."""
        self.envs, self.spec, self.num_steps, self.device = envs, spec, num_steps, device
        shape = (num_steps, spec.num_envs)
        self.obs = np.zeros(shape + spec.obs_shape, dtype=spec.obs_dtype)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=np.float32)
        self.truncated = np.zeros(shape, dtype=np.float32)
        self.valid = np.zeros(shape, dtype=bool)
        if resume is None:
            self.next_obs, _ = envs.reset(seed=env_seed(seed))
            self.prev_done = np.zeros(spec.num_envs, dtype=bool)
        else:
            self.next_obs, self.prev_done = resume["next_obs"].copy(), resume["prev_done"].copy()
            self.valid[-1] = resume.get("last_valid", ~self.prev_done)
        if spec.discrete:
            self.low = self.high = None
        else:
            self.low, self.high = spec.action_space.low, spec.action_space.high

    def state(self) -> dict[str, np.ndarray]:
        """What carries over between rollouts, for checkpoints."""
        return {"next_obs": np.ascontiguousarray(self.next_obs, dtype=self.obs.dtype), "prev_done": self.prev_done.copy(),
                "last_valid": self.valid[-1].copy()}

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device, non_blocking=True)

    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        """Actions as the env takes them: Gaussian samples are clipped to the bounds (stored unclipped)."""
        array = actions.cpu().numpy()
        return array if self.low is None else np.clip(array, self.low, self.high)

    def collect(self, policy) -> tuple[Rollout, CollectStats]:
        stats = CollectStats()
        actions, logprobs, values = [], [], []
        clock = time.perf_counter
        with torch.inference_mode():
            for t in range(self.num_steps):
                start = clock()
                self.obs[t] = self.next_obs
                self.valid[t] = ~self.prev_done
                out = policy.act(self._tensor(self.obs[t]))
                actions.append(out.actions)
                logprobs.append(out.logprobs)
                values.append(out.values)
                env_actions = self.env_actions(out.actions)
                middle = clock()
                self.next_obs, reward, terminated, truncated, info = self.envs.step(env_actions)
                stats.time_act += middle - start
                stats.time_env += clock() - middle
                self.rewards[t] = reward
                self.terminated[t] = terminated
                self.truncated[t] = truncated
                self.prev_done = terminated | truncated
                if "_episode" in info:
                    ended = info["_episode"]
                    stats.episode_returns.extend(info["episode"]["r"][ended].tolist())
                    stats.episode_lengths.extend(info["episode"]["l"][ended].tolist())
            start = clock()
            last_value = policy.value(self._tensor(np.asarray(self.next_obs, dtype=self.obs.dtype)))
            stats.time_act += clock() - start
        rollout = Rollout(
            obs=self._tensor(self.obs),
            actions=torch.stack(actions),
            logprobs=torch.stack(logprobs),
            values=torch.stack(values),
            rewards=self._tensor(self.rewards),
            terminated=self._tensor(self.terminated),
            truncated=self._tensor(self.truncated),
            valid=self._tensor(self.valid),
            last_value=last_value.clone(),
        )
        return rollout, stats
