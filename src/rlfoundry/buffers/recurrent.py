"""Recurrent replay for off-policy agents with a memory core (R2D2, Kapturowski et al. 2019): the transition replay's
ring, plus the core's state stored at every sequence start, sampled as whole windows of one env.

A window starts at a row that is a multiple of `stride` and spans `burn_in + length + n_step` rows: the burn-in
only refreshes the stored state, the `length` trained steps follow, and the last `n_step` rows give their n-step
targets. Episode starts inside a window reset the core (`starts`); reset rows are masked out of the loss. With
`prioritized`, each window has the priority η·max|δ| + (1 − η)·mean|δ| of its last TD errors, to the power α.
The layout and the choices: docs/algorithms/dqn.md, "Memory cores".
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from rlfoundry.buffers.replay import ReplayBuffer, SumTree


class StateLayout:
    """A core state (nested tuples of tensors, each with the env batch on axis 1) as one float32 row per env, and
    back: how a replay stores it."""

    def __init__(self, example):
        self.shapes = [tuple(t.shape) for t in _leaves(example)]  # batch axis 1 of size 1
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.size = sum(self.sizes)
        self._tree = example

    def flatten(self, state) -> torch.Tensor:
        """[B, size] (the env batch first), float32."""
        parts = [t.transpose(0, 1).reshape(t.shape[1], -1).float() for t in _leaves(state)]
        return torch.cat(parts, 1) if parts else torch.zeros(0)

    def unflatten(self, flat: torch.Tensor):
        """The nested state for `flat` [B, size]."""
        tensors, start = [], 0
        for shape, size in zip(self.shapes, self.sizes):
            part = flat[:, start:start + size].reshape(len(flat), shape[0], *shape[2:])
            tensors.append(part.transpose(0, 1).contiguous())
            start += size
        return _rebuild(self._tree, iter(tensors))


def _leaves(state) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    return [leaf for part in (state or ()) for leaf in _leaves(part)]


def _rebuild(tree, tensors):
    if isinstance(tree, torch.Tensor):
        return next(tensors)
    return tuple(_rebuild(part, tensors) for part in tree)


def reset_state(state, starts: torch.Tensor):
    """`state` with the envs where `starts` [B] is true zeroed (a fresh episode)."""
    keep = (~starts.bool()).float()
    return _rebuild(state, iter([t * keep.view(1, -1, *([1] * (t.dim() - 2))).to(t.dtype) for t in _leaves(state)]))


class SequenceSample(NamedTuple):
    """N windows, time-major: W = burn_in + length + n_step rows, of which T = length are trained."""

    obs: np.ndarray | torch.Tensor  # [W, N, *obs_shape] (tensors on the device where the replay is mirrored)
    actions: np.ndarray | torch.Tensor  # [W, N, *action_shape]
    starts: np.ndarray  # [W, N] bool: an episode begins at this row (the core resets before it)
    states: np.ndarray  # [N, state_size] float32: the core's state before the first row
    returns: np.ndarray  # [T, N] float32: n-step returns from each trained row
    discounts: np.ndarray  # [T, N] float32: γ^(k+1), 0 after a termination
    bootstrap: np.ndarray  # [T, N] int64: the window row whose value closes each return
    mask: np.ndarray  # [T, N] float32: 1 for real steps, 0 for reset rows (and stacks that cannot be rebuilt)
    weights: np.ndarray  # [N] float32: importance weights (ones for uniform sampling)
    indices: np.ndarray  # [N] int64: window slots, for `update_priorities`


class RecurrentReplay(ReplayBuffer):
    """The newest `capacity // num_envs` steps of each env, sampled as windows; `state_size` floats of core state
    stored per env at every `stride`-th row (the acting agent hands them in with `note_state`)."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype,
                 action_shape: tuple[int, ...], action_dtype, state_size: int, length: int, burn_in: int = 0,
                 stride: int | None = None, n_step: int = 1, gamma: float = 0.99, frame_stack: int = 1,
                 prioritized: bool = False, alpha: float = 0.9, eta: float = 0.9, eps: float = 1e-6):
        super().__init__(capacity, num_envs, obs_shape, obs_dtype, action_shape, action_dtype, n_step, gamma,
                         frame_stack)
        self.length, self.burn_in = length, burn_in
        self.stride = stride or max(1, length // 2)
        self.window = burn_in + length + n_step
        if length < 1 or burn_in < 0 or self.stride < 1 or self.window > self.capacity_rows:
            raise ValueError(f"sequences of {burn_in} + {length} + {n_step} rows (burn-in, trained, n-step) every "
                             f"{self.stride} rows do not fit {self.capacity_rows} rows per env")
        self.state_size = state_size
        # one state row per stride of the ring, plus one so that a live window's start never shares a slot
        self.state_rows = -(-self.num_rows // self.stride) + 1
        self.states = np.zeros((self.state_rows, num_envs, state_size), np.float32)
        self.prioritized, self.alpha, self.eta, self.eps = prioritized, float(alpha), float(eta), float(eps)
        self.tree = SumTree(self.state_rows * num_envs) if prioritized else None
        self.max_priority = 1.0

    # ---------------------------------------------------------------- filling

    def pending_starts(self) -> np.ndarray:
        """[B] bool: whether the pending row (the observation the agent acts on next) begins an episode."""
        t = self.step
        if t == 0:
            return np.ones(self.num_envs, bool)
        return self.reset_rows[(t - 1) % self.num_rows].copy()

    def wants_state(self) -> bool:
        """Whether the pending row starts sequences: then `note_state` keeps the state the agent acts from."""
        return self.step % self.stride == 0

    def note_state(self, states: np.ndarray) -> None:
        """The core state [B, state_size] the agent acts on the pending row from (already reset where an episode
        begins); kept when that row starts sequences."""
        if self.wants_state():
            self.states[(self.step // self.stride) % self.state_rows] = states

    def _add(self, obs, actions, rewards, terminated, truncated, next_obs):
        became, removed = super()._add(obs, actions, rewards, terminated, truncated, next_obs)
        if self.tree is not None:
            slots = []
            first = self.step - self.window  # the window starting here just got its last row (the new pending one)
            if first >= 0 and first % self.stride == 0:
                slots.append(self._window_slots(first, np.full(self.num_envs, self.max_priority)))
            gone = self.step - 1 - self.capacity_rows  # the row that just left the stored steps
            if gone >= 0 and gone % self.stride == 0:
                slots.append(self._window_slots(gone, np.zeros(self.num_envs)))
            for indices, priorities in slots:
                self.tree.update(indices, priorities)
        return became, removed

    def _window_slots(self, row: int, priorities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        first = (row // self.stride) % self.state_rows * self.num_envs
        return np.arange(first, first + self.num_envs), priorities

    def restart(self, obs: np.ndarray) -> None:
        """As the transition replay's; the reset row it adds starts no window with a stale state."""
        if self.step % self.stride == 0:
            self.states[(self.step // self.stride) % self.state_rows] = 0
        super().restart(obs)

    # ---------------------------------------------------------------- sampling

    def _window_range(self) -> tuple[int, int]:
        """The first and last window index (start row // stride) whose rows are all stored."""
        low = max(0, self.step - self.capacity_rows)
        return -(-low // self.stride), (self.step - self.window) // self.stride

    def __len__(self) -> int:
        """Windows that can be sampled now (for each env)."""
        first, last = self._window_range()
        return max(0, last - first + 1) * self.num_envs

    def sample(self, batch_size: int, rng: np.random.Generator, beta: float = 1.0) -> SequenceSample:  # type: ignore[override]
        """`batch_size` windows: uniform over the stored ones, or by priority with importance weights
        (N·P)^-β / max."""
        first, last = self._window_range()
        if last < first:
            raise ValueError("the replay has no complete sequence to sample yet")
        if self.tree is None:
            windows = rng.integers(first, last + 1, batch_size)
            envs = rng.integers(0, self.num_envs, batch_size)
            weights = np.ones(batch_size, np.float32)
        else:
            total = self.tree.total
            slots = self.tree.find((np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size))
            probs = self.tree.leaves[slots] / total
            weights = (len(self) * probs) ** -beta
            weights = (weights / weights.max()).astype(np.float32)
            envs = slots % self.num_envs
            # a slot's window: the newest one at or before `last` that maps to it (the live ones all map apart)
            windows = last - (last - slots // self.num_envs) % self.state_rows
        return self._windows(windows * self.stride, envs, weights)

    def _windows(self, starts: np.ndarray, envs: np.ndarray, weights: np.ndarray) -> SequenceSample:
        R, W, T = self.num_rows, self.window, self.length
        rows = starts[None] + np.arange(W)[:, None]  # [W, N] absolute rows
        slots = rows % R
        (obs,), actions = self._observed([(rows.reshape(-1), np.tile(envs, W))], (slots, envs))
        obs = obs.reshape(W, len(envs), *self.obs_shape)
        episode_starts = np.zeros((W, len(envs)), bool)
        episode_starts[1:] = self.reset_rows[slots[:-1], envs]
        trained = rows[self.burn_in:self.burn_in + T]  # [T, N]
        returns, last, discounts = self._n_step(trained, envs)
        trained_slots = trained % R
        mask = ~self.reset_rows[trained_slots, envs] & (self.depth[trained_slots, envs] > 0)
        state_slots = (starts // self.stride) % self.state_rows
        return SequenceSample(
            obs=obs, actions=actions, starts=episode_starts, states=self.states[state_slots, envs],
            returns=returns, discounts=discounts,
            bootstrap=np.arange(self.burn_in, self.burn_in + T)[:, None] + last + 1,
            mask=mask.astype(np.float32), weights=weights, indices=state_slots * self.num_envs + envs)

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray, mask: np.ndarray) -> None:
        """Each sampled window's priority from its |TD errors| [T, N] over its real steps (`mask`); windows that
        left the buffer since are skipped."""
        if self.tree is None:
            return
        errors = np.abs(np.asarray(td_errors, np.float64)) * mask
        count = np.maximum(mask.sum(0), 1)
        mixed = self.eta * errors.max(0) + (1 - self.eta) * errors.sum(0) / count
        priorities = (mixed + self.eps) ** self.alpha
        keep = self.tree.leaves[indices] > 0
        if keep.any():
            self.tree.update(indices[keep], priorities[keep])
            self.max_priority = max(self.max_priority, float(priorities[keep].max()))

    # ---------------------------------------------------------------- checkpoints

    def _config(self) -> np.ndarray:
        return np.array([*super()._config(), self.state_size, self.length, self.burn_in, self.stride,
                         int(self.prioritized)], np.int64)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = super().state_dict()
        state["states"] = self.states
        if self.tree is not None:
            state.update(priorities=self.tree.leaves, max_priority=np.array(self.max_priority))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        got = state.get("states")
        if got is None or got.shape != self.states.shape or got.dtype != np.float32:
            raise ValueError(f"replay state: 'states' float32 {self.states.shape} expected")
        if self.tree is not None:
            priorities = state.get("priorities")
            if priorities is None or priorities.shape != (self.tree.capacity,) or "max_priority" not in state:
                raise ValueError(f"replay state: 'priorities' ({self.tree.capacity},) and 'max_priority' expected")
        super().load_state_dict(state)
        self.states[:] = got
        if self.tree is not None:
            self.tree.update(np.arange(self.tree.capacity), state["priorities"])
            self.max_priority = float(state["max_priority"])
