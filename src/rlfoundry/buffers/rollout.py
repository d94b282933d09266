"""On-policy rollouts: time-major storage, collection from a NEXT_STEP vector env, and GAE.

With Gymnasium's NEXT_STEP autoreset (see `rlfoundry.envs`) a rollout row `t` whose previous step
ended the episode is a *reset row*: its observation is that episode's true final observation, the
env ignores its action, and its reward is 0. Such rows are marked `valid = False` and never learned
from, but their value estimate is exactly V(final observation), which is what bootstrapping on
truncation needs — so it comes for free from the normal forward pass.

`starts` [T, B] is true on the first row of an episode: the row after a reset row (or after the envs were
reset). Recurrent policies reset their memory there — the reset row itself still sees the ended episode's
memory — and also get the memory at the start of each `sequence_length` chunk, from which the update
replays it.

The observations are stored on the agent's device as they arrive (each step's copied once, through pinned memory on
CUDA, and acted on from there), so the update finds the rollout's largest part in place. Envs that step on the
device: an env whose observations come as torch tensors (the world-model agent's
`rlfoundry.world_models.simulated_env.SimulatedEnv`) gets its actions as tensors and its whole rollout stored in
tensors on the same device, so collecting from it copies nothing to the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from rlfoundry.buffers.transfer import HostToDevice
from rlfoundry.envs import EnvInfo, env_seed


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
    starts: torch.Tensor  # [T, B]: true where an episode begins
    states: list | None = None  # recurrent policies: the memory at rows 0, L, 2L, ... (L = sequence_length)

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

    Owns what carries over between rollouts: the current observation, which envs just ended and, for a
    recurrent policy, its memory.
    """

    def __init__(self, envs: VectorEnv, spec: EnvInfo, num_steps: int, device: torch.device, seed: int,
                 resume: dict[str, np.ndarray] | None = None, sequence_length: int | None = None):
        """`resume` (what `state()` returned) continues from restored envs instead of resetting them.
        `sequence_length` (recurrent policies only) is the chunk length whose starting memory is kept."""
        self.envs, self.spec, self.num_steps, self.device = envs, spec, num_steps, device
        self.sequence_length = sequence_length
        self.memory = None  # a recurrent policy's memory after the last step (built at the first collect)
        self.obs_to_device = HostToDevice(device)
        if resume is None:
            self.next_obs, _ = envs.reset(seed=env_seed(seed) + spec.first_env)
        else:
            self.next_obs = resume["next_obs"].copy()
        self.on_device = isinstance(self.next_obs, torch.Tensor)  # the env steps on the device (module docstring)
        # the storage: torch tensors on the device when the env steps there, else numpy arrays
        zeros: Callable[..., np.ndarray | torch.Tensor] = self._device_zeros if self.on_device else np.zeros
        shape = (num_steps, spec.num_envs)
        self.obs = self._device_zeros(shape + spec.obs_shape, dtype=spec.obs_dtype)  # on the device in any case
        self.rewards = zeros(shape, dtype=np.float32)
        self.terminated = zeros(shape, dtype=np.float32)
        self.truncated = zeros(shape, dtype=np.float32)
        self.valid = zeros(shape, dtype=bool)
        self.starts = zeros(shape, dtype=bool)
        self.prev_done = zeros(spec.num_envs, dtype=bool)
        if resume is not None:
            # on the device these are tensors, which take numpy arrays (torch's stubs allow only tensors and scalars)
            self.prev_done[:] = resume["prev_done"]  # type: ignore[assignment]
            self.valid[-1] = resume.get("last_valid", ~resume["prev_done"])  # type: ignore[assignment]
            self.memory = _unflatten_memory(resume, device)
        self.low: np.ndarray | torch.Tensor | None
        self.high: np.ndarray | torch.Tensor | None
        if not isinstance(spec.action_space, spaces.Box):  # choices: Discrete, MultiDiscrete, MultiBinary
            self.low = self.high = None
        else:
            self.low, self.high = spec.action_space.low, spec.action_space.high
            if self.on_device:
                self.low, self.high = (torch.as_tensor(bound, device=device) for bound in (self.low, self.high))

    def _device_zeros(self, shape: int | tuple[int, ...], dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.from_numpy(np.zeros((), dtype)).dtype, device=self.device)

    def restart(self, seed: int | None = None) -> None:
        """Reset the envs now: the next rollout starts from fresh episodes (the world-model agent restarts its
        simulated envs from real frames before every rollout)."""
        self.next_obs, _ = self.envs.reset(seed=seed)
        self.prev_done = self.prev_done & False  # a new array: the last one may be an inference tensor
        self.valid[-1] = True
        self.memory = None

    def state(self) -> dict[str, np.ndarray]:
        """What carries over between rollouts, for checkpoints."""
        state = {"next_obs": np.ascontiguousarray(_host(self.next_obs), dtype=self.spec.obs_dtype),
                 "prev_done": _host(self.prev_done).copy(), "last_valid": _host(self.valid[-1]).copy()}
        if self.memory is not None:
            for g, core_state in enumerate(self.memory):
                for i, tensor in enumerate(core_state):
                    state[f"memory.{g}.{i}"] = tensor.cpu().numpy()
        return state

    def _tensor(self, array: np.ndarray | torch.Tensor) -> torch.Tensor:
        if isinstance(array, torch.Tensor):
            return array
        return torch.from_numpy(array).to(self.device, non_blocking=True)

    def _store_obs(self, t: int) -> None:
        """Row t's observations into the device storage (cast to its dtype): copied there once, through pinned memory
        on CUDA (`HostToDevice.into`), or from the device env's tensors."""
        if isinstance(self.next_obs, torch.Tensor):
            self.obs[t] = self.next_obs
        else:
            self.obs_to_device.into((self.obs[t],), self.next_obs)

    def env_actions(self, actions: torch.Tensor) -> np.ndarray | torch.Tensor:
        """Actions as the env takes them: Gaussian samples are clipped to the bounds (stored unclipped)."""
        if self.on_device:
            if self.low is None:
                return actions
            assert isinstance(self.low, torch.Tensor) and isinstance(self.high, torch.Tensor)  # moved in __init__
            return actions.clamp(self.low, self.high)
        array = actions.cpu().numpy()
        return array if self.low is None else np.clip(array, self.low, self.high)

    def collect(self, policy, act: Callable | None = None) -> tuple[Rollout, CollectStats]:
        """A rollout of `num_steps` steps; `act(obs, memory, starts)` -> (PolicyOutput, memory) acts (by default
        `policy.act`; an agent passes its graphed step)."""
        act = act or policy.act
        stats = CollectStats()
        actions, logprobs, values, states = [], [], [], []
        clock = time.perf_counter
        recurrent = self.sequence_length is not None
        if recurrent and self.memory is None:
            self.memory = policy.initial_state(self.spec.num_envs)
        self.starts[0] = ~self.valid[-1]  # row 0 starts an episode when the last rollout ended on a reset row
        starts = None
        with torch.inference_mode():
            for t in range(self.num_steps):
                start = clock()
                self._store_obs(t)
                if self.sequence_length is not None:  # recurrent
                    # `starts` of row t, from row t - 1 (not yet overwritten at t = 0); None: none
                    none = not self.on_device and self.valid[t - 1].all()  # (on the device: no sync to find out)
                    starts = None if none else self._tensor(~self.valid[t - 1])
                    if t % self.sequence_length == 0:
                        assert self.memory is not None  # initial_state above, then each act's
                        states.append(self.memory)
                # both numpy or both torch (self.on_device); mypy also checks the mixed pairs, which never occur
                self.valid[t] = ~self.prev_done  # type: ignore[assignment]
                out, self.memory = act(self.obs[t], self.memory, starts)
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
            if recurrent:
                starts = self._tensor(~self.valid[-1])
            next_obs = self.next_obs if self.on_device else np.asarray(self.next_obs, dtype=self.spec.obs_dtype)
            last_value = policy.value(self._tensor(next_obs), self.memory, starts)
            stats.time_act += clock() - start
        self.starts[1:] = ~self.valid[:-1]  # type: ignore[assignment]  # both numpy or both torch, as above
        rollout = Rollout(
            obs=self.obs,
            actions=torch.stack(actions),
            logprobs=torch.stack(logprobs),
            values=torch.stack(values),
            rewards=self._tensor(self.rewards),
            terminated=self._tensor(self.terminated),
            truncated=self._tensor(self.truncated),
            valid=self._tensor(self.valid),
            last_value=last_value.clone(),
            starts=self._tensor(self.starts),
        )
        if recurrent:
            rollout.states = [tuple(tuple(t.clone() for t in core) for core in memory) for memory in states]
        return rollout, stats


def _host(x: np.ndarray | torch.Tensor) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else x


def to_sequences(x: torch.Tensor, length: int) -> torch.Tensor:
    """[T, B, ...] → [length, T / length × B, ...]: column c·B + b is env b's chunk c (rows c·length ...)."""
    steps, envs = x.shape[:2]
    chunks = x.reshape(steps // length, length, envs, *x.shape[2:]).transpose(0, 1)
    return chunks.reshape(length, -1, *x.shape[2:])


def memory_columns(states: list) -> tuple:
    """The memory at each chunk start (`Rollout.states`), concatenated in `to_sequences`' column order (every
    core keeps the env batch on dim 1)."""
    return tuple(tuple(torch.cat(parts, 1) for parts in zip(*cores)) for cores in zip(*states))


class EpisodePieces(NamedTuple):
    """Where each element of chunks [L, S] goes when every episode start inside a chunk begins a new sequence
    (see `split_at_episode_starts`)."""

    row: torch.Tensor  # [L, S]: time step within its new sequence
    column: torch.Tensor  # [L, S]: the new sequence
    count: int  # type: ignore[assignment]  # new sequences (the public name shadows tuple.count, unused here)
    length: int  # rows of the new layout: the longest piece
    first: torch.Tensor  # [S]: the new sequence holding each chunk's first piece (which keeps its stored memory)


def split_at_episode_starts(starts: torch.Tensor) -> EpisodePieces:
    """Cut chunks [L, S] at the episode starts after their first row, so that memory is only ever reset at a
    sequence's first step: a core then replays each sequence in one call (no resets inside it), which for
    LSTM/GRU is one native call instead of one per segment. Pieces are padded at the end (later rows are
    invalid); a causal core's outputs before the padding are unaffected by it."""
    steps, columns = starts.shape
    inner = starts.clone()
    inner[0] = False
    piece = inner.long().cumsum(0)  # piece number within its chunk
    pieces = piece[-1] + 1
    first = pieces.cumsum(0) - pieces
    t = torch.arange(steps, device=starts.device).unsqueeze(1).expand(steps, columns)
    row = t - torch.where(inner, t, 0).cummax(0).values
    return EpisodePieces(row, first + piece, int(pieces.sum()), int(row.max()) + 1, first)


class Minibatch(NamedTuple):
    """Rows for one gradient step. Feed-forward: the learned rows, flat [N]. Recurrent: `steps` × M whole
    sequences of observations flattened time-major, replayed from `state` (no episode starts inside them: a
    sequence that begins an episode starts from zero memory); `learned` [K] indexes the rows the loss uses,
    and `actions` and `targets` hold those rows only."""

    obs: torch.Tensor
    actions: torch.Tensor
    targets: tuple[torch.Tensor, ...]  # per-row quantities of the algorithm's loss, in the order given
    state: tuple | None = None
    steps: int = 1
    learned: torch.Tensor | None = None


def minibatch_count(learned: torch.Tensor, minibatch_rows: int | None) -> int:
    """How many minibatches of `minibatch_rows` (None: one, the whole rollout) the learned rows [T, B] make."""
    return 1 if minibatch_rows is None else max(1, round(int(learned.sum()) / minibatch_rows))


def minibatches(rollout: Rollout, targets: tuple[torch.Tensor, ...], learned: torch.Tensor, policy,
                minibatch_rows: int | None = None, sequence_length: int | None = None, count: int | None = None):
    """A function that yields one epoch of shuffled minibatches of the rollout's rows where `learned` [T, B] is
    true (reset rows never are), with `targets` ([T, B] each) alongside: as many minibatches as `minibatch_rows`
    fit in the learned rows (None: one, the whole rollout).

    Feed-forward policies get rows. Recurrent ones get whole sequences: each env's rollout cut into chunks of
    `sequence_length` (default: the whole rollout), cut again at episode starts (`split_at_episode_starts`),
    each replayed from its stored memory or a fresh one; there are then at most as many minibatches as sequences.
    `count`: the number of minibatches, when it is given (the ranks of a run across processes agree on one).
    """
    count = count or minibatch_count(learned, minibatch_rows)
    if not policy.recurrent:
        index = learned.flatten().nonzero().squeeze(-1)
        rows = [x.flatten(0, 1)[index] for x in (rollout.obs, rollout.actions, *targets)]

        def rows_epoch():
            if count == 1:  # the whole rollout: its order does not matter, so skip the gathers
                yield Minibatch(rows[0], rows[1], tuple(rows[2:]))
                return
            for mb in torch.randperm(len(index), device=index.device).tensor_split(count):
                yield Minibatch(rows[0][mb], rows[1][mb], tuple(x[mb] for x in rows[2:]))

        return rows_epoch

    length = sequence_length or len(rollout.obs)
    chunks = [to_sequences(x, length) for x in (rollout.obs, rollout.actions, *targets, learned, rollout.starts)]
    pieces = split_at_episode_starts(chunks[-1])

    def relayout(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros((pieces.length, pieces.count, *x.shape[2:]))
        out[pieces.row, pieces.column] = x
        return out

    obs, actions, *values, learned_rows = (relayout(x) for x in chunks[:-1])  # the starts are not replayed
    # Every sequence starts from zero memory (a fresh episode, as the cores define it) except a chunk's first
    # piece, which continues its stored memory unless the chunk's first row starts an episode. The cores then
    # need no episode starts at all: cheaper than a reset mask per step.
    memory = policy.initial_state(pieces.count)
    continues = ~chunks[-1][0]
    assert rollout.states is not None  # a recurrent policy's rollout
    for core, stored in zip(memory, memory_columns(rollout.states)):
        for tensor, columns in zip(core, stored):
            tensor[:, pieces.first] = columns * continues.view(1, -1, *[1] * (columns.dim() - 2))
    count = min(count, pieces.count)

    def sequence_batch(mb) -> Minibatch:
        rows = learned_rows[:, mb].flatten().nonzero().squeeze(-1)
        return Minibatch(obs[:, mb].flatten(0, 1), actions[:, mb].flatten(0, 1)[rows],
                         tuple(x[:, mb].flatten()[rows] for x in values),
                         state=tuple(tuple(t[:, mb] for t in core) for core in memory),
                         steps=pieces.length, learned=rows)

    whole = sequence_batch(slice(None)) if count == 1 else None  # one minibatch: the same every epoch

    def sequences_epoch():
        if whole is not None:
            yield whole
            return
        for mb in torch.randperm(pieces.count, device=obs.device).tensor_split(count):
            yield sequence_batch(mb)

    return sequences_epoch


def evaluate_minibatch(policy, mb: Minibatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log-probabilities, entropies, values) of the minibatch's learned rows, with gradients."""
    return policy.evaluate(mb.obs, mb.actions, mb.state, mb.steps, mb.learned)


def _unflatten_memory(resume: dict[str, np.ndarray], device: torch.device) -> tuple | None:
    """The memory that `RolloutCollector.state()` flattened to `memory.<trunk>.<tensor>` arrays, or None."""
    keys = sorted((tuple(map(int, key.split(".")[1:])), key) for key in resume if key.startswith("memory."))
    if not keys:
        return None
    memory: list[list[torch.Tensor]] = []
    for (g, _), key in keys:
        if g == len(memory):
            memory.append([])
        memory[g].append(torch.from_numpy(resume[key].copy()).to(device))
    return tuple(tuple(core) for core in memory)
