"""Sequence replay for latent world models (DreamerV3, PlaNet): every env step in a preallocated time-major ring
`[R, B, ...]`, sampled as windows of consecutive steps of one env, each with the latent state the agent had there.

Row t of an env: obs_t, reward_t (that came with obs_t), is_first_t, is_terminal_t, action_t (taken at obs_t) and
latent_t (after observing obs_t). With NEXT_STEP autoreset an env's rows are an unbroken stream of whole episodes
(the reset row: is_first, reward 0), so a window may cross episode starts. A window of `length + 1` rows begins
with a context row, whose stored latent (zero if none) the model starts from. With `keep_on(device)` the
observations are mirrored on the device and windows of them gathered there (`DeviceMirror`). Filling, sampling,
online windows and checkpoints: docs/algorithms/dreamer.md, "The sequence replay".
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np
import torch

from rlfoundry.buffers.transfer import DeviceMirror


class SequenceBatch(NamedTuple):
    """N windows of L + 1 rows, batch-major: row 0 is the context."""

    obs: np.ndarray | torch.Tensor  # [N, L+1, *obs_shape] (a tensor on the device where the replay is mirrored)
    actions: np.ndarray  # [N, L+1, *action_shape]: actions[:, t] was taken at obs[:, t]
    rewards: np.ndarray  # [N, L+1] float32
    is_first: np.ndarray  # [N, L+1] bool
    is_terminal: np.ndarray  # [N, L+1] bool
    latents: np.ndarray  # [N, L+1, latent_size] float32, zeros where `has_latent` is false
    has_latent: np.ndarray  # [N, L+1] bool
    rows: np.ndarray  # [N] int64 absolute row of each window's context
    envs: np.ndarray  # [N] int64


class SequenceReplay:
    """The newest `capacity // num_envs` steps of each of `num_envs` envs."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype, action_shape: tuple[int, ...],
                 action_dtype, latent_size: int, online_length: int | None = None):
        self.rows_per_env = R = capacity // num_envs
        if R < 2:
            raise ValueError(f"capacity {capacity} for {num_envs} envs: need at least 2 steps per env")
        self.capacity, self.num_envs, self.latent_size = capacity, num_envs, latent_size
        self.obs_shape, self.action_shape = tuple(obs_shape), tuple(action_shape)
        B = num_envs
        self.obs = np.zeros((R, B, *self.obs_shape), obs_dtype)
        self.actions = np.zeros((R, B, *self.action_shape), action_dtype)
        self.rewards = np.zeros((R, B), np.float32)
        self.is_first = np.zeros((R, B), bool)
        self.is_terminal = np.zeros((R, B), bool)
        self.latents = np.zeros((R, B, latent_size), np.float32)
        self.has_latent = np.zeros((R, B), bool)
        self.step = -1  # absolute row of the pending row (the newest); -1 before `start`
        self.prev_done = np.zeros(B, bool)
        self.online_length = online_length
        self.queue: deque[tuple[int, int]] = deque()  # (start row, env) of online windows not served yet
        self.mirror: DeviceMirror | None = None

    def keep_on(self, device: torch.device) -> None:
        """Mirror the observations on `device` from now on, and gather the windows' observations there."""
        self.mirror = DeviceMirror({"obs": self.obs}, device)
        if self.step >= 0:  # something was written already
            self.mirror.load({"obs": self.obs})

    @property
    def mirrored_nbytes(self) -> int:
        """What `keep_on` takes on the device."""
        return self.obs.nbytes

    # ---------------------------------------------------------------- filling

    def start(self, obs: np.ndarray) -> None:
        """The envs were reset (at the start, or after a resume whose envs could not be restored): their first
        observations begin episodes."""
        self._write_row(obs, np.zeros(self.num_envs, np.float32), np.ones(self.num_envs, bool),
                        np.zeros(self.num_envs, bool))
        self.prev_done[:] = False

    def add(self, actions: np.ndarray, latents: np.ndarray | None, next_obs: np.ndarray, rewards: np.ndarray,
            terminated: np.ndarray, truncated: np.ndarray) -> None:
        """The agent took `actions` at the pending row's observations with `latents` [B, latent_size] (None: no
        latent yet), and `envs.step` answered."""
        if self.step < 0:
            raise ValueError("SequenceReplay.add before start(obs)")
        slot = self.step % self.rows_per_env
        self.actions[slot] = actions
        if latents is None:
            self.has_latent[slot] = False
        else:
            self.latents[slot] = latents
            self.has_latent[slot] = True
        self._write_row(next_obs, rewards, self.prev_done.copy(), terminated)
        self.prev_done = np.asarray(terminated | truncated, bool)

    def _write_row(self, obs, rewards, is_first, terminal) -> None:
        self.step += 1
        slot = self.step % self.rows_per_env
        self.obs[slot] = obs
        if self.mirror is not None:
            self.mirror.write("obs", slot, self.obs[slot])
        self.rewards[slot] = np.where(is_first, 0.0, rewards)
        self.is_first[slot] = is_first
        self.is_terminal[slot] = terminal
        self.actions[slot] = 0
        self.has_latent[slot] = False
        L = self.online_length
        if L is not None and self.step >= L and (self.step - L) % (L + 1) == 0:  # a window became complete
            self.queue.extend((self.step - L, env) for env in range(self.num_envs))

    # ---------------------------------------------------------------- sampling

    def starts(self, length: int) -> int:
        """How many windows of `length` trained steps (plus the context row) each env can give now."""
        oldest = max(0, self.step - self.rows_per_env + 1)
        return max(0, self.step - length - oldest + 1)

    def __len__(self) -> int:
        """Steps stored (all envs)."""
        return (min(self.step + 1, self.rows_per_env)) * self.num_envs if self.step >= 0 else 0

    def sample(self, batch_size: int, length: int, rng: np.random.Generator) -> SequenceBatch:
        """`batch_size` windows of `length + 1` rows: queued online windows first (when `length` is the online
        length), the rest uniformly over starts and envs (with replacement)."""
        count = self.starts(length)
        if count <= 0:
            raise ValueError(f"the sequence replay holds no window of {length + 1} steps yet")
        oldest = max(0, self.step - self.rows_per_env + 1)
        online: list[tuple[int, int]] = []
        while length == self.online_length and self.queue and len(online) < batch_size:
            start, env = self.queue.popleft()
            if start >= oldest:
                online.append((start, env))
        uniform = batch_size - len(online)
        rows = np.concatenate([np.array([start for start, _ in online], np.int64),
                               oldest + rng.integers(0, count, uniform)])
        envs = np.concatenate([np.array([env for _, env in online], np.int64),
                               rng.integers(0, self.num_envs, uniform)])
        slots = (rows[:, None] + np.arange(length + 1)[None]) % self.rows_per_env  # [N, L+1]
        cols = envs[:, None]
        if self.mirror is None:
            obs: np.ndarray | torch.Tensor = self.obs[slots, cols]
        else:
            obs = self.mirror.take("obs", *self.mirror.to_device(slots, cols))
        return SequenceBatch(
            obs=obs, actions=self.actions[slots, cols], rewards=self.rewards[slots, cols],
            is_first=self.is_first[slots, cols], is_terminal=self.is_terminal[slots, cols],
            latents=self.latents[slots, cols], has_latent=self.has_latent[slots, cols], rows=rows, envs=envs)

    def write_latents(self, rows: np.ndarray, envs: np.ndarray, latents: np.ndarray) -> None:
        """Store `latents` [N, K, latent_size] for rows rows[i] .. rows[i] + K - 1 of env envs[i] (those still
        stored: a row overwritten since it was sampled is left alone)."""
        K = latents.shape[1]
        absolute = rows[:, None] + np.arange(K)[None]
        keep = absolute > self.step - self.rows_per_env
        slots = absolute % self.rows_per_env
        cols = np.broadcast_to(envs[:, None], absolute.shape)
        self.latents[slots[keep], cols[keep]] = latents[keep]
        self.has_latent[slots[keep], cols[keep]] = True

    # ---------------------------------------------------------------- checkpoints

    def _storage(self) -> dict[str, np.ndarray]:
        return {"obs": self.obs, "actions": self.actions, "rewards": self.rewards, "is_first": self.is_first,
                "is_terminal": self.is_terminal, "latents": self.latents, "has_latent": self.has_latent}

    def _config(self) -> np.ndarray:
        return np.array([self.capacity, self.num_envs, self.latent_size], np.int64)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._storage().values())

    def state_dict(self) -> dict[str, np.ndarray]:
        """Plain arrays for `np.savez` (loadable with allow_pickle=False), cut to the rows written so far; views,
        not copies: save them before the next `add`."""
        used = min(self.step + 1, self.rows_per_env)
        state = {name: array[:used] for name, array in self._storage().items()}
        state.update(config=self._config(), step=np.array(self.step, np.int64), prev_done=self.prev_done.copy(),
                     queue=np.array(self.queue, np.int64).reshape(-1, 2))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore `state_dict()`. Raises ValueError, changing nothing, when it does not fit this buffer."""
        missing = [name for name in [*self._storage(), "config", "step", "prev_done"] if name not in state]
        if missing:
            raise ValueError(f"sequence replay state lacks {', '.join(missing)}")
        if not np.array_equal(state["config"], self._config()):
            raise ValueError(f"sequence replay state for [capacity, num_envs, latent_size] = "
                             f"{state['config'].tolist()}; this buffer has {self._config().tolist()}")
        used = min(int(state["step"]) + 1, self.rows_per_env)
        for name, array in self._storage().items():
            got = state[name]
            if got.dtype != array.dtype or got.shape != (used, *array.shape[1:]):
                raise ValueError(f"sequence replay state '{name}': {got.dtype} {got.shape}, expected {array.dtype} "
                                 f"{(used, *array.shape[1:])}")
        for name, array in self._storage().items():
            array[:used] = state[name]
            array[used:] = 0
        self.step = int(state["step"])
        self.prev_done = np.array(state["prev_done"], bool)
        self.queue = deque((int(start), int(env)) for start, env in state.get("queue", np.zeros((0, 2), np.int64)))
        if self.mirror is not None:
            self.mirror.load({"obs": self.obs})
