"""SimPLe's real experience (Kaiser et al. 2019, arXiv:1903.00374): the replay of one env, each frame stored once
(an episode's S reset frames, then one per step) and stacks rebuilt on demand, with the value head's targets:

    obs_i = frames[obs_index[i] - S + 1 : obs_index[i] + 1] (oldest first),  next_frame_i = frames[obs_index[i] + 1]
    v_last = 0,  v_i = (class_i - 1) + gamma * v_{i+1},  class = sign(r) + 1  (NaN, never sampled, until the end)

No ring: the capacity covers the whole run. Layout, values and footprint: docs/guide/model-based.md, "The
real-experience replay"; the value rule is the port's (docs/world-models/simple-mbarc.md §1).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from rlfoundry.buffers.rollout import discounted_scan


class FrameSequences(NamedTuple):
    """N windows of T consecutive transitions within one episode; time-major like the rest of `buffers`."""

    obs: np.ndarray  # [N, S * C, H, W] uint8: the observation the first step starts from
    actions: np.ndarray  # [T, N] int64
    next_frames: np.ndarray  # [T, N, C, H, W] uint8: the newest frame of each step's next observation
    rewards: np.ndarray  # [T, N] uint8 reward classes {0, 1, 2} = sign(reward) + 1
    values: np.ndarray  # [T, N] float32 value targets (NaN for transitions of an unfinished episode)
    dones: np.ndarray  # [T, N] bool: the step ended its episode
    indices: np.ndarray  # [N] int64: the transition each window starts at


class FrameReplay:
    """Real transitions of a single env with frame-stacked observations [S * C, H, W] uint8 (S = `frame_stack`)."""

    def __init__(self, capacity: int, frame_shape: tuple[int, int, int], num_actions: int, frame_stack: int = 4,
                 gamma: float = 0.99, max_episodes: int | None = None):
        """`capacity` transitions in all. The frame store holds `capacity + frame_stack * max_episodes` frames:
        one per step and `frame_stack` per episode start, so `max_episodes` starts fit in a full buffer (the
        default, capacity // 100, allows an average episode of 100 steps; each SimPLe epoch starts one more, as
        the real env is reset at every collection phase)."""
        shape = tuple(int(n) for n in frame_shape)
        if capacity < 1 or len(shape) != 3 or min(shape) < 1 or frame_stack < 1 or num_actions < 1:
            raise ValueError(f"capacity {capacity}, frame_shape {shape}, frame_stack {frame_stack}, num_actions "
                             f"{num_actions}: need positive sizes and a frame shape (C, H, W)")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma = {gamma}; allowed: 0 <= gamma <= 1")
        max_episodes = max(capacity // 100, 1) if max_episodes is None else int(max_episodes)
        if max_episodes < 1:
            raise ValueError(f"max_episodes = {max_episodes}; need at least 1")
        self.capacity, self.frame_stack, self.num_actions = int(capacity), int(frame_stack), int(num_actions)
        self.gamma, self.max_episodes = float(gamma), max_episodes
        C, H, W = shape
        self.frame_shape = (C, H, W)
        self.obs_shape = (frame_stack * C, H, W)
        self.frame_capacity = capacity + frame_stack * max_episodes
        self.frames = np.zeros((self.frame_capacity, *self.frame_shape), np.uint8)
        self.obs_index = np.zeros(capacity, np.int64)
        self.actions = np.zeros(capacity, np.min_scalar_type(num_actions - 1))
        self.rewards = np.zeros(capacity, np.uint8)
        self.dones = np.zeros(capacity, bool)
        self.values = np.full(capacity, np.nan, np.float32)
        self.num_steps = 0  # transitions stored
        self.num_frames = 0  # frames stored
        self.episode_start = 0  # the first transition of the current episode
        self.pending = -1  # newest frame of the observation the next step starts from; -1: the next step starts one
        self._starts: dict[int, np.ndarray] = {}  # window length -> valid first transitions (see `_valid_starts`)

    # ---------------------------------------------------------------- filling

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> None:
        """Store one step: the agent saw `obs` [S * C, H, W], took `action`, and the env returned `next_obs` (the
        next stack [S * C, H, W], or just its newest frame [C, H, W]), `reward` (clipped here to its sign) and
        `done` (the episode ended: terminated or truncated, as in SimPLe). A new episode starts at the first call,
        after `done` and after `interrupt`; its `obs` is stored whole. Otherwise `obs` must be the stack the
        previous step led to, and only the next frame is stored. Raises ValueError, changing nothing, on input
        that does not fit, and when the buffer is full."""
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        S, C = self.frame_stack, self.frame_shape[0]
        if obs.dtype != np.uint8 or next_obs.dtype != np.uint8 or obs.shape != self.obs_shape \
                or next_obs.shape not in (self.obs_shape, self.frame_shape):
            raise ValueError(f"obs {obs.dtype} {obs.shape} and next_obs {next_obs.dtype} {next_obs.shape}; this buffer "
                             f"takes uint8 {self.obs_shape} and uint8 {self.obs_shape} or {self.frame_shape}")
        if not 0 <= int(action) < self.num_actions:
            raise ValueError(f"action {action}; allowed: 0 to {self.num_actions - 1}")
        if not np.isfinite(reward):
            raise ValueError(f"reward {reward} is not finite")
        starts, p = self.pending < 0, self.pending
        if not starts and not np.array_equal(obs, self.frames[p - S + 1:p + 1].reshape(obs.shape)):
            raise ValueError("obs is not the observation the previous step led to; call `interrupt()` when the env "
                             "is reset without an episode end")
        if self.num_steps == self.capacity:
            raise ValueError(f"the frame replay is full: {self.capacity} transitions (capacity)")
        needed = self.num_frames + 1 + (S if starts else 0)
        if needed > self.frame_capacity:
            raise ValueError(f"the frame replay has no room for more frames: {self.frame_capacity} = capacity "
                             f"{self.capacity} + frame_stack {S} x max_episodes {self.max_episodes}; "
                             f"raise max_episodes")
        t, f = self.num_steps, self.num_frames
        if starts:
            self.frames[f:f + S] = obs.reshape(S, *self.frame_shape)
            f += S
            self.episode_start = t
        self.frames[f] = next_obs[-C:]
        self.obs_index[t] = f - 1
        self.actions[t] = action
        self.rewards[t] = np.sign(reward) + 1
        self.dones[t] = done
        self.num_steps, self.num_frames = t + 1, f + 1
        if done:
            self._finish_episode()
        else:
            self.pending = f

    def interrupt(self) -> None:
        """The env is reset without an episode end (SimPLe resets the real env at the start of every collection
        phase): the current episode stays unfinished, its steps keep NaN values and are never sampled, and the
        next `add` starts a new episode."""
        self.pending = -1

    def _finish_episode(self) -> None:
        """Values of the episode that just ended, back to its first step: v_last = 0, v_i = (class_i - 1) +
        gamma v_{i+1} (`discounted_scan`: log2(length) vector operations instead of a loop over steps)."""
        first, end = self.episode_start, self.num_steps
        x = torch.from_numpy(self.rewards[first:end].astype(np.float64) - 1.0)  # signed: no uint8 wrap of -1
        x[-1] = 0.0
        self.values[first:end] = discounted_scan(x, torch.full_like(x, self.gamma)).numpy()
        self.pending = -1
        self._starts.clear()

    # ---------------------------------------------------------------- reading

    def __len__(self) -> int:
        """The number of transitions with a known value (those that can be sampled)."""
        return int(self._valid_starts(1).size)

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self._storage().values())

    def stack(self, indices: np.ndarray) -> np.ndarray:
        """The observations of transitions `indices` [N]: uint8 [N, S * C, H, W], oldest frame first."""
        indices = np.asarray(indices, np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.num_steps):
            raise ValueError(f"transition indices from {indices.min()} to {indices.max()}; "
                             f"{self.num_steps} transitions are stored")
        newest = self.obs_index[indices]
        frames = self.frames[newest[:, None] + np.arange(1 - self.frame_stack, 1)]  # [N, S, C, H, W]
        return frames.reshape(indices.size, *self.obs_shape)

    def gather(self, starts: np.ndarray, length: int) -> FrameSequences:
        """The windows of `length` transitions from `starts` [N] (unchecked for episode ends and known values:
        `subsequences` draws valid ones)."""
        starts = np.asarray(starts, np.int64)
        if length < 1:
            raise ValueError(f"window length {length}; need at least 1")
        if starts.size and (starts.min() < 0 or starts.max() + length > self.num_steps):
            raise ValueError(f"windows of length {length} from transitions {starts.min()} to {starts.max()}; "
                             f"{self.num_steps} transitions are stored")
        steps = np.arange(length)[:, None] + starts[None]  # [T, N]
        return FrameSequences(
            obs=self.stack(starts),
            actions=self.actions[steps].astype(np.int64),
            next_frames=self.frames[self.obs_index[steps] + 1],
            rewards=self.rewards[steps],
            values=self.values[steps],
            dones=self.dones[steps],
            indices=starts,
        )

    def subsequences(self, rng: np.random.Generator, batch: int, length: int) -> FrameSequences:
        """`batch` windows of `length` consecutive transitions, drawn uniformly (with replacement) from those
        whose values are all known and that stay in one episode (only the last step may end it)."""
        starts = self._valid_starts(length)
        if starts.size == 0:
            raise ValueError(f"the frame replay has no window of {length} steps within a finished episode yet")
        return self.gather(starts[rng.integers(0, starts.size, batch)], length)

    def restart_states(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` observations [n, S * C, H, W] uint8 of transitions with a known value, drawn uniformly (with
        replacement): the states SimPLe restarts its simulated envs from."""
        starts = self._valid_starts(1)
        if starts.size == 0:
            raise ValueError("the frame replay has no transition of a finished episode yet")
        return self.stack(starts[rng.integers(0, starts.size, n)])

    def _valid_starts(self, length: int) -> np.ndarray:
        """First transitions of the windows of `length` steps with known values and no episode end before the
        last step, from prefix sums; cached until an episode ends."""
        if length < 1:
            raise ValueError(f"window length {length}; need at least 1")
        if length not in self._starts:
            n = self.num_steps
            unknown = np.concatenate([[0], np.cumsum(np.isnan(self.values[:n]))])
            ended = np.concatenate([[0], np.cumsum(self.dones[:n])])
            first = np.arange(max(n - length + 1, 0))
            ok = (unknown[first + length] == unknown[first]) & (ended[first + length - 1] == ended[first])
            self._starts[length] = first[ok]
        return self._starts[length]

    # ---------------------------------------------------------------- checkpoints

    def _storage(self) -> dict[str, np.ndarray]:
        return {"frames": self.frames, "obs_index": self.obs_index, "actions": self.actions, "rewards": self.rewards,
                "dones": self.dones, "values": self.values}

    def _config(self) -> np.ndarray:
        return np.array([self.capacity, self.max_episodes, self.frame_stack, *self.frame_shape, self.num_actions],
                        np.int64)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Plain arrays for `np.savez` / `np.load(allow_pickle=False)`: the filled part only. The storage entries
        are views of the buffer (no copy of gigabytes): save them before the next `add`."""
        state = {"frames": self.frames[:self.num_frames]}
        state.update({name: array[:self.num_steps] for name, array in self._storage().items() if name != "frames"})
        state.update(config=self._config(), gamma=np.array(self.gamma),
                     counters=np.array([self.episode_start, self.pending], np.int64))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore `state_dict()`. Raises ValueError, changing nothing, when it does not fit this buffer."""
        self._check_state(state)
        steps, frames = int(state["values"].shape[0]), int(state["frames"].shape[0])
        for name, array in self._storage().items():
            used = frames if name == "frames" else steps
            array[:used] = state[name]
            array[used:] = np.nan if name == "values" else 0
        self.num_steps, self.num_frames = steps, frames
        self.episode_start, self.pending = (int(n) for n in state["counters"])
        self._starts.clear()

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        names = [*self._storage(), "config", "gamma", "counters"]
        missing = [name for name in names if name not in state]
        if missing:
            raise ValueError(f"frame replay state lacks {', '.join(missing)}")
        if not np.array_equal(state["config"], self._config()) or float(state["gamma"]) != self.gamma:
            raise ValueError(f"frame replay state for [capacity, max_episodes, frame_stack, C, H, W, num_actions] = "
                             f"{np.asarray(state['config']).tolist()}, gamma {float(state['gamma'])}; this buffer has "
                             f"{self._config().tolist()}, gamma {self.gamma}")
        steps, frames = int(state["values"].shape[0]), int(state["frames"].shape[0])
        if steps > self.capacity or frames > self.frame_capacity:
            raise ValueError(f"frame replay state of {steps} transitions and {frames} frames; this buffer holds "
                             f"{self.capacity} and {self.frame_capacity}")
        for name, array in self._storage().items():
            got, used = state[name], frames if name == "frames" else steps
            if got.dtype != array.dtype or got.shape != (used, *array.shape[1:]):
                raise ValueError(f"frame replay state '{name}': {got.dtype} {got.shape}, expected {array.dtype} "
                                 f"{(used, *array.shape[1:])}")
        index, counters = state["obs_index"], np.asarray(state["counters"])
        if counters.shape != (2,) or (steps and (index.min() < self.frame_stack - 1 or index.max() + 1 >= frames)) \
                or not -1 <= counters[1] < frames or not 0 <= counters[0] <= steps:
            raise ValueError("frame replay state: frame indices or counters outside the stored frames")
