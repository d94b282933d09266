"""The off-policy replay (DQN, SAC, TD3): a preallocated time-major ring `[R, B, ...]` filled from a NEXT_STEP vector
env, with n-step returns and proportional prioritisation through a sum tree (Schaul et al. 2016, arXiv:1511.05952).
Each observation is stored once (a transition's next observation is the next row's), and stacked frames once per
frame, so that a million Atari transitions fit in memory; reset rows are never sampled, and the arrays go into the
checkpoint for exact resumes. With `keep_on(device)` the frames and actions are mirrored on the device and samples
gathered there (`DeviceMirror`): the same draws, the same values, as tensors. The layout, frame stacks and footprint
are described in docs/algorithms/dqn.md, "The replay buffer".
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import torch

from rlfoundry.buffers.transfer import DeviceMirror
from rlfoundry.envs import env_seed

PADDING = ("zero", "first")


class ReplaySample(NamedTuple):
    """A batch of N transitions; `rewards`, `next_obs` and `discounts` are n-step. Observations and actions are
    tensors on the device when the replay is mirrored there (`keep_on`), arrays otherwise."""

    obs: np.ndarray | torch.Tensor  # [N, *obs_shape]
    actions: np.ndarray | torch.Tensor  # [N, *action_shape]
    rewards: np.ndarray  # [N] float32: sum_{i<=k} gamma^i r_{t+i}, k the last step of the window
    next_obs: np.ndarray | torch.Tensor  # [N, *obs_shape]: the observation after step t+k (the true final one at an end)
    discounts: np.ndarray  # [N] float32: gamma^(k+1), 0 when step t+k terminated
    weights: np.ndarray  # [N] float32: importance weights (ones for uniform sampling)
    indices: np.ndarray  # [N] int64: flat slots (row * num_envs + env), for `update_priorities`


class ReplayBuffer:
    """Uniform replay over the ready transitions of the newest `capacity // num_envs` vector steps."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype, action_shape: tuple[int, ...],
                 action_dtype, n_step: int = 1, gamma: float = 0.99, frame_stack: int = 1, frame_padding: str = "zero"):
        obs_shape, action_shape = tuple(obs_shape), tuple(action_shape)
        self.capacity_rows = capacity // num_envs
        if n_step < 1 or self.capacity_rows < n_step + 1:
            raise ValueError(f"capacity {capacity} with num_envs {num_envs} and n_step {n_step}: need n_step >= 1 and "
                             f"capacity >= num_envs * (n_step + 1)")
        if frame_stack < 1 or (frame_stack > 1 and (not obs_shape or obs_shape[0] % frame_stack)):
            raise ValueError(f"frame_stack {frame_stack} does not divide the leading axis of obs_shape {obs_shape}")
        if frame_padding not in PADDING:
            raise ValueError(f"frame_padding = {frame_padding!r}; allowed: {', '.join(PADDING)}")
        self.capacity, self.num_envs, self.n_step, self.gamma = capacity, num_envs, n_step, float(gamma)
        self.obs_shape, self.obs_dtype = obs_shape, np.dtype(obs_dtype)
        self.action_shape, self.action_dtype = action_shape, np.dtype(action_dtype)
        self.frame_stack, self.frame_padding = frame_stack, frame_padding
        self.channels = obs_shape[0] // frame_stack if frame_stack > 1 else 0
        frame_shape = obs_shape if frame_stack == 1 else (self.channels, *obs_shape[1:])
        self.num_rows = R = self.capacity_rows + frame_stack  # + history rows + the pending row
        B = num_envs
        self.frames = np.zeros((R, B, *frame_shape), self.obs_dtype)  # the whole obs when frame_stack == 1
        self.actions = np.zeros((R, B, *action_shape), self.action_dtype)
        self.rewards = np.zeros((R, B), np.float32)
        self.terminated = np.zeros((R, B), bool)
        self.truncated = np.zeros((R, B), bool)
        self.reset_rows = np.zeros((R, B), bool)
        self.ready = np.zeros((R, B), bool)
        # real frames per stack (see the module docstring); always 1 without frame stacking, at no cost
        self.depth = np.ones((R, B), np.int8) if frame_stack > 1 else np.broadcast_to(np.int8(1), (R, B))
        self.step = 0  # full rows written so far; row `step` is the pending one
        self.prev_done = np.zeros(B, bool)
        self.num_ready = 0
        self.mirror: DeviceMirror | None = None

    def keep_on(self, device: torch.device) -> None:
        """Mirror the frames and actions on `device` from now on, and gather samples there (module docstring)."""
        mirrored = {"frames": self.frames, "actions": self.actions}
        self.mirror = DeviceMirror(mirrored, device)
        if self.step > 0:  # something was written already
            self.mirror.load(mirrored)

    @property
    def mirrored_nbytes(self) -> int:
        """What `keep_on` takes on the device."""
        return self.frames.nbytes + self.actions.nbytes

    # ---------------------------------------------------------------- filling

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
            truncated: np.ndarray, next_obs: np.ndarray) -> None:
        """Store one vector step: the agent saw `obs` [B, ...], took `actions`, and `envs.step` returned
        `next_obs, rewards, terminated, truncated` (`next_obs` is the true final observation where an episode
        ended). `obs` is written only on the first call; later it is the pending row already (and is read for
        the frame-stack comparison). Reset rows follow from the previous call's `terminated | truncated`."""
        self._add(obs, actions, rewards, terminated, truncated, next_obs)

    def _add(self, obs, actions, rewards, terminated, truncated, next_obs) -> tuple[np.ndarray, np.ndarray]:
        """`add`, returning the flat slots that became ready and those that left the buffer."""
        t, R, B = self.step, self.num_rows, self.num_envs
        s = t % R
        if t == 0:
            self._write_obs(0, obs, None, np.zeros(B, bool))
        self.actions[s] = actions
        if self.mirror is not None:
            self.mirror.write("actions", s, self.actions[s])
        self.rewards[s] = rewards
        self.terminated[s] = terminated
        self.truncated[s] = truncated
        self.reset_rows[s] = self.prev_done
        self.ready[s] = False
        removed = np.empty(0, np.int64)
        if t >= self.capacity_rows:  # row t - capacity_rows leaves the stored window (it may stay as history)
            left = (t - self.capacity_rows) % R
            removed = np.flatnonzero(self.ready[left]) + left * B
            self.num_ready -= removed.size
            self.ready[left] = False
        done = self.terminated[s] | self.truncated[s]
        self._write_obs((t + 1) % R, next_obs, obs, self.reset_rows[s])
        bootstrap_ok = self.depth[(t + 1) % R] > 0
        blocked = np.zeros(B, bool)  # an episode ended within rows t-k .. t-1
        became_rows: list[np.ndarray] = []
        for k in range(min(self.n_step, t + 1)):
            r = (t - k) % R
            if k > 0:
                blocked |= self.terminated[r] | self.truncated[r]
            complete = ~blocked & (done if k < self.n_step - 1 else True)
            new = complete & ~self.reset_rows[r] & (self.depth[r] > 0) & bootstrap_ok
            self.ready[r] |= new
            became_rows.append(np.flatnonzero(new) + r * B)
        self.prev_done = done
        self.step = t + 1
        became = np.concatenate(became_rows)
        self.num_ready += became.size
        return became, removed

    def _write_obs(self, slot: int, obs: np.ndarray, prev_obs: np.ndarray | None, after_reset: np.ndarray) -> None:
        """Write an observation into `slot` and, with frame stacking, its depth (see the module docstring)."""
        obs = np.asarray(obs)
        if obs.shape != (self.num_envs, *self.obs_shape):
            raise ValueError(f"observations of shape {obs.shape}; this buffer stores {(self.num_envs, *self.obs_shape)}")
        S, C = self.frame_stack, self.channels
        self.frames[slot] = obs if S == 1 else obs[:, -C:]
        if self.mirror is not None:
            self.mirror.write("frames", slot, self.frames[slot])
        if S == 1:
            return
        older = obs[:, :-C].reshape(self.num_envs, -1)
        if self.frame_padding == "zero":
            padded = ~older.any(axis=1)
        else:
            padded = (obs[:, :-C] == np.tile(obs[:, -C:], (1, S - 1) + (1,) * (obs.ndim - 2))).reshape(self.num_envs, -1).all(1)
        if prev_obs is None:
            continued = np.zeros(self.num_envs, bool)
        else:
            continued = (older == np.asarray(prev_obs)[:, C:].reshape(self.num_envs, -1)).all(axis=1)
        fresh_bad = after_reset & ~continued & ~padded
        if fresh_bad.any():
            raise ValueError(f"env {int(np.flatnonzero(fresh_bad)[0])}: the first observation of an episode has older "
                             f"frames that are neither the previous stack's nor frame_padding = '{self.frame_padding}' "
                             f"padding; allowed: {', '.join(PADDING)}")
        prev = self.depth[(slot - 1) % self.num_rows].astype(np.int16)
        grown = np.where(prev > 0, np.minimum(prev + 1, S), np.where(-prev + 1 >= S, S, prev - 1))
        self.depth[slot] = np.where(continued, grown, np.where(padded, 1, -1))

    def restart(self, obs: np.ndarray) -> None:
        """The envs start again from `obs` without an episode end (a resume whose envs were reset, new actor
        processes): the stored episodes end at their last step as truncations, which bootstrap from the pending
        row (their true next observation), and the pending row becomes a reset row whose next observation is
        `obs`, exactly as after NEXT_STEP autoreset. Before the first `add` there is nothing to end."""
        if self.step == 0:
            return
        t, R, B = self.step, self.num_rows, self.num_envs
        ongoing = ~self.prev_done  # envs whose last step did not already end an episode
        self.truncated[(t - 1) % R] |= ongoing
        # the n-step windows that now end at that truncation are complete: mark them as `add` would have
        bootstrap_ok = self.depth[t % R] > 0
        blocked = np.zeros(B, bool)
        became_rows: list[np.ndarray] = []
        for k in range(min(self.n_step, t)):
            r = (t - 1 - k) % R
            if k > 0:
                blocked |= self.terminated[r] | self.truncated[r]
            new = ongoing & ~blocked & ~self.ready[r] & ~self.reset_rows[r] & (self.depth[r] > 0) & bootstrap_ok
            self.ready[r] |= new
            became_rows.append(np.flatnonzero(new) + r * B)
        became = np.concatenate(became_rows)
        self.num_ready += became.size
        self._became_ready(became)
        self.prev_done = np.ones(B, bool)  # so the pending row is a reset row
        pending = self._stacks(np.full(B, t), np.arange(B))
        self.add(pending, np.zeros((B, *self.action_shape), self.action_dtype), np.zeros(B, np.float32),
                 np.zeros(B, bool), np.zeros(B, bool), obs)

    def _became_ready(self, slots: np.ndarray) -> None:
        """Flat slots that became ready outside `add` (see `restart`)."""

    # ---------------------------------------------------------------- sampling

    def __len__(self) -> int:
        """The number of transitions that can be sampled now."""
        return self.num_ready

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._storage().values())

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplaySample:
        """`batch_size` transitions drawn uniformly (with replacement) from the ready ones."""
        if self.num_ready == 0:
            raise ValueError("the replay buffer has no complete transition to sample yet")
        B, R = self.num_envs, self.num_rows
        low = max(0, self.step - self.capacity_rows)
        rows = np.empty(batch_size, np.int64)
        envs = np.empty(batch_size, np.int64)
        todo = np.arange(batch_size)
        for _ in range(64):  # rejection: exactly uniform over ready slots; reset rows etc. are a small fraction
            rows[todo] = rng.integers(low, self.step, todo.size)
            envs[todo] = rng.integers(0, B, todo.size)
            todo = todo[~self.ready[rows[todo] % R, envs[todo]]]
            if todo.size == 0:
                break
        else:  # almost nothing ready: pick among the ready slots directly
            ready = np.flatnonzero(self.ready)
            pick = ready[rng.integers(0, ready.size, todo.size)]
            rows[todo] = self._absolute(pick // B)
            envs[todo] = pick % B
        return self._gather(rows, envs, np.ones(batch_size, np.float32))

    def _absolute(self, slots: np.ndarray) -> np.ndarray:
        """Absolute row numbers of ring slots (the rows within the last R written)."""
        return self.step - (self.step - slots) % self.num_rows

    def _n_step(self, rows: np.ndarray, envs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For transitions at absolute `rows` of `envs` (broadcast together): their n-step returns, the last step k of
        each window (the return stops at an episode's end) and their discounts γ^(k+1), 0 after a termination."""
        returns = np.zeros(np.broadcast_shapes(rows.shape, envs.shape))
        last = np.zeros(returns.shape, np.int64)
        alive = np.ones(returns.shape, bool)
        terminal = np.zeros(returns.shape, bool)
        for k in range(self.n_step):
            sk = (rows + k) % self.num_rows
            returns += np.where(alive, self.gamma**k * self.rewards[sk, envs], 0.0)
            last[alive] = k
            terminal |= alive & self.terminated[sk, envs]
            alive &= ~(self.terminated[sk, envs] | self.truncated[sk, envs])
        return returns.astype(np.float32), last, np.where(terminal, 0.0, self.gamma ** (last + 1.0)).astype(np.float32)

    def _gather(self, rows: np.ndarray, envs: np.ndarray, weights: np.ndarray) -> ReplaySample:
        """Transitions starting at absolute `rows` of `envs`, with vectorised n-step returns."""
        slots = rows % self.num_rows
        returns, last, discounts = self._n_step(rows, envs)
        (obs, next_obs), actions = self._observed([(rows, envs), (rows + last + 1, envs)], (slots, envs))
        return ReplaySample(obs=obs, actions=actions, rewards=returns, next_obs=next_obs, discounts=discounts,
                            weights=weights, indices=slots * self.num_envs + envs)

    def _observed(self, stacks: list[tuple[np.ndarray, np.ndarray]], actions: tuple[np.ndarray, np.ndarray]) -> tuple:
        """The observations at each (absolute rows [N], envs [N]) of `stacks`, and the actions at (ring slots, envs)
        `actions`: from the host arrays, or gathered on the device (one batch of index copies) when it mirrors them."""
        if self.mirror is None:
            return [self._stacks(*where) for where in stacks], self.actions[actions]
        places = [self._stack_index(*where) for where in stacks]  # (slots, envs, padding or None) each
        padded = places[0][2] is not None  # zero padding: in every place or in none
        moved = iter(self.mirror.to_device(*actions, *[a for place in places for a in place if a is not None]))
        taken = self.mirror.take("actions", next(moved), next(moved))
        observations = []
        for where in stacks:
            frames = self.mirror.take("frames", next(moved), next(moved))
            if padded:
                frames = frames.masked_fill(_broadcast(next(moved), frames), 0)
            observations.append(frames.reshape(where[0].size, *self.obs_shape))
        return observations, taken

    def _stack_index(self, rows: np.ndarray, envs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Where the stacks of absolute `rows` lie in `frames`: ring slots and envs ([N], or [N, S] oldest first and
        [N, 1] with frame stacking), and with zero padding where the stack is padding (true there)."""
        if self.frame_stack == 1:
            return rows % self.num_rows, envs, None
        S = self.frame_stack
        depth = self.depth[rows % self.num_rows, envs].astype(np.int64)[:, None]  # > 0 for ready rows
        back = np.arange(S - 1, -1, -1)[None]  # how many rows back each position of the stack lies, oldest first
        slots = (rows[:, None] - np.minimum(back, depth - 1)) % self.num_rows
        return slots, envs[:, None], back >= depth if self.frame_padding == "zero" else None

    def _stacks(self, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Observations of absolute `rows` from the host arrays: stacks rebuilt from the newest frame of each row and
        its padding."""
        slots, env_index, padding = self._stack_index(rows, envs)
        frames = self.frames[slots, env_index]
        if padding is not None:
            frames[padding] = 0
        return frames.reshape(rows.size, *self.obs_shape)

    # ---------------------------------------------------------------- checkpoints

    def _storage(self) -> dict[str, np.ndarray]:
        arrays = {"frames": self.frames, "actions": self.actions, "rewards": self.rewards, "terminated": self.terminated,
                  "truncated": self.truncated, "reset_rows": self.reset_rows, "ready": self.ready}
        if self.frame_stack > 1:
            arrays["depth"] = self.depth
        return arrays

    def _config(self) -> np.ndarray:
        return np.array([self.capacity, self.num_envs, self.n_step, self.frame_stack], np.int64)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Plain arrays for `np.savez` / `np.load(allow_pickle=False)`. The storage entries are views of the
        buffer (no copy of gigabytes), cut to the rows written so far: save them before the next `add`."""
        used = min(self.step + 1, self.num_rows)
        state = {name: array[:used] for name, array in self._storage().items()}
        state.update(config=self._config(), gamma=np.array(self.gamma), step=np.array(self.step, np.int64),
                     prev_done=self.prev_done.copy())
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore `state_dict()`. Raises ValueError, changing nothing, when it does not fit this buffer."""
        self._check_state(state)
        used = int(state["frames"].shape[0])
        for name, array in self._storage().items():
            array[:used] = state[name]
            array[used:] = 0 if name != "depth" else 1
        self.step = int(state["step"])
        self.prev_done = np.array(state["prev_done"], bool)
        self.num_ready = int(self.ready.sum())
        if self.mirror is not None:
            self.mirror.load({"frames": self.frames, "actions": self.actions})

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        names = [*self._storage(), "config", "gamma", "step", "prev_done"]
        missing = [name for name in names if name not in state]
        if missing:
            raise ValueError(f"replay state lacks {', '.join(missing)}")
        if not np.array_equal(state["config"], self._config()) or float(state["gamma"]) != self.gamma:
            raise ValueError(f"replay state for [capacity, num_envs, n_step, frame_stack] = {state['config'].tolist()}, "
                             f"gamma {float(state['gamma'])}; this buffer has {self._config().tolist()}, gamma {self.gamma}")
        step = int(state["step"])
        used = min(step + 1, self.num_rows)
        for name, array in self._storage().items():
            got = state[name]
            if got.dtype != array.dtype or got.shape != (used, *array.shape[1:]):
                raise ValueError(f"replay state '{name}': {got.dtype} {got.shape}, expected {array.dtype} "
                                 f"{(used, *array.shape[1:])}")
        if state["prev_done"].shape != (self.num_envs,):
            raise ValueError(f"replay state 'prev_done': shape {state['prev_done'].shape}, expected ({self.num_envs},)")


def _broadcast(mask: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """A mask over a gather's leading axes, with unit axes for the frames' own."""
    return mask.reshape(*mask.shape, *[1] * (frames.dim() - mask.dim()))


class SumTree:
    """A binary tree of sums over `capacity` non-negative leaves, in one float64 array (node i has children
    2i and 2i + 1; leaves start at `size`, a power of two). Updates and searches work on whole batches with a
    loop over the tree's levels."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())
        self.levels = self.size.bit_length() - 1
        self.nodes = np.zeros(2 * self.size)

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        return self.nodes[self.size:self.size + self.capacity]

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set leaves (the last value wins for repeated indices) and recompute their ancestors from their
        children, so sums never accumulate rounding drift."""
        indices = np.asarray(indices, np.int64)
        priorities = np.broadcast_to(np.asarray(priorities, np.float64), indices.shape)
        unique, last = np.unique(indices[::-1], return_index=True)  # first in reversed order: the last given
        nodes = unique + self.size
        self.nodes[nodes] = priorities[::-1][last]
        for _ in range(self.levels):
            nodes = np.unique(nodes // 2)
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """The leaf i for each value v with sum(leaves[:i]) <= v < sum(leaves[:i+1]). Values are clamped into
        the tree's mass, and a leaf of priority 0 is never returned while the total is positive."""
        value = np.asarray(prefix_sums, np.float64).copy()
        node = np.ones(value.shape, np.int64)
        for _ in range(self.levels):
            left = self.nodes[2 * node]
            right = (value >= left) & (self.nodes[2 * node + 1] > 0)
            value -= np.where(right, left, 0.0)
            node = 2 * node + right
        return node - self.size


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritisation (Schaul et al. 2016): P(i) = p_i / sum_j p_j with p_i = (|delta_i| + eps)^alpha,
    new transitions at the largest priority so far, stratified sampling over `batch_size` equal segments of the
    total, and importance weights (N P(i))^-beta divided by their maximum in the batch (N: ready transitions)."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype, action_shape: tuple[int, ...],
                 action_dtype, n_step: int = 1, gamma: float = 0.99, frame_stack: int = 1, frame_padding: str = "zero",
                 alpha: float = 0.6, eps: float = 1e-6):
        super().__init__(capacity, num_envs, obs_shape, obs_dtype, action_shape, action_dtype, n_step, gamma,
                         frame_stack, frame_padding)
        self.alpha, self.eps = float(alpha), float(eps)
        self.tree = SumTree(self.num_rows * num_envs)  # leaf = flat slot; 0 for anything not ready
        self.max_priority = 1.0

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
            truncated: np.ndarray, next_obs: np.ndarray) -> None:
        became, removed = self._add(obs, actions, rewards, terminated, truncated, next_obs)
        self.tree.update(np.concatenate([removed, became]),
                         np.concatenate([np.zeros(removed.size), np.full(became.size, self.max_priority)]))

    def sample(self, batch_size: int, rng: np.random.Generator, beta: float = 1.0) -> ReplaySample:
        """`batch_size` transitions, one from each of `batch_size` equal segments of the priority mass; `beta`
        (annealed by the caller towards 1) sets how much the weights correct for the non-uniform draw."""
        if self.num_ready == 0:
            raise ValueError("the replay buffer has no complete transition to sample yet")
        total = self.tree.total
        slots = self.tree.find((np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size))
        probs = self.tree.leaves[slots] / total
        weights = (self.num_ready * probs) ** -beta
        weights /= weights.max()
        rows = self._absolute(slots // self.num_envs)
        return self._gather(rows, slots % self.num_envs, weights.astype(np.float32))

    def _became_ready(self, slots: np.ndarray) -> None:
        self.tree.update(slots, np.full(slots.size, self.max_priority))

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set p = (|td_error| + eps)^alpha for sampled `indices`; slots that left the buffer since are skipped."""
        indices = np.asarray(indices, np.int64)
        priorities = (np.abs(np.asarray(td_errors, np.float64)) + self.eps) ** self.alpha
        keep = self.ready.reshape(-1)[indices]
        if keep.any():
            self.tree.update(indices[keep], priorities[keep])
            self.max_priority = max(self.max_priority, float(priorities[keep].max()))

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.tree.nodes.nbytes

    def state_dict(self) -> dict[str, np.ndarray]:
        state = super().state_dict()
        state.update(priorities=self.tree.leaves, max_priority=np.array(self.max_priority))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        got = state.get("priorities")
        if got is None or got.dtype != np.float64 or got.shape != (self.tree.capacity,) or "max_priority" not in state:
            raise ValueError(f"replay state: 'priorities' float64 ({self.tree.capacity},) and 'max_priority' expected")
        super().load_state_dict(state)
        self.tree.update(np.arange(self.tree.capacity), got)
        self.max_priority = float(state["max_priority"])


class Collected(NamedTuple):
    obs: np.ndarray | None  # the observation the next step starts from (None: SAC's async actors keep it)
    episode_returns: list[float]
    episode_lengths: list[int]
    time_env: float
    time_act: float


def start_envs(envs, replay: ReplayBuffer, seed: int) -> np.ndarray:
    """The first observation of off-policy collection: the envs reset, and the replay told, so that no stored
    transition spans the reset (after a resume whose envs could not be restored)."""
    obs, _ = envs.reset(seed=env_seed(seed))
    replay.restart(obs)
    return obs


def replay_state(replay: ReplayBuffer, obs: np.ndarray | None) -> dict[str, np.ndarray]:
    """The replay's arrays plus the observation the next step starts from (none before the first step)."""
    state = replay.state_dict()
    return state if obs is None else {**state, "current_obs": np.ascontiguousarray(obs)}


def load_replay_state(replay: ReplayBuffer, state: dict[str, np.ndarray]) -> np.ndarray | None:
    """Restore what `replay_state` saved; returns the observation the next step starts from, or None."""
    state = dict(state)
    current = state.pop("current_obs", None)
    replay.load_state_dict(state)
    return None if current is None else np.array(current)


def collect(envs, replay: ReplayBuffer, obs: np.ndarray, choose_actions, steps: int) -> Collected:
    """Step a NEXT_STEP vector env `steps` times from `obs` with the actions `choose_actions(obs)`, storing every
    transition in `replay`; off-policy collection."""
    returns: list[float] = []
    lengths: list[int] = []
    time_env = time_act = 0.0
    for _ in range(steps):
        tick = time.perf_counter()
        actions = choose_actions(obs)
        middle = time.perf_counter()
        next_obs, rewards, terminated, truncated, info = envs.step(actions)
        time_act += middle - tick
        time_env += time.perf_counter() - middle
        replay.add(obs, actions, rewards, terminated, truncated, next_obs)
        obs = next_obs
        if "_episode" in info:
            ended = info["_episode"]
            returns.extend(info["episode"]["r"][ended].tolist())
            lengths.extend(info["episode"]["l"][ended].tolist())
    return Collected(obs, returns, lengths, time_env, time_act)
