"""Asynchronous off-policy collection (SAC's `algo.async_actors`): N spawned actor processes step the envs while the
learner trains. Actor k owns envs k·m .. (k+1)·m − 1 (m = num_envs / N), built and seeded as those sub-envs of one
vector env would be, so the replay keeps its layout: one row per vector step, assembled from the N actors' pieces.

Learner -> actors, in shared memory: the weights behind a sequence counter (odd while being written), and an
allowance of rows (taken so far + lead) that holds the replay ratio. Actors -> learner, through a queue: transitions
in chunks, episode statistics, errors. Not bit-reproducible. The flow in full: docs/algorithms/sac.md,
"Asynchronous actors".
"""

from __future__ import annotations

import os
import queue as queue_lib
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
import torch.multiprocessing as mp

VERSION, ALLOWED, STOP = 0, 1, 2  # slots of the shared control tensor
STALL_SECONDS = 300.0  # no transitions for this long while every actor is alive: something is wrong


class AsyncCollected(NamedTuple):
    rows: int  # vector steps of all envs added to the replay
    episode_returns: list[float]
    episode_lengths: list[int]
    time_env: float  # the learner's time waiting for transitions and adding them
    time_act: float


class ActorPool:
    """`num_actors` actor processes feeding one replay buffer (see the module docstring).

    `build_policy(spec, net_cfg)` builds the acting network (its parameters in the order of `weights`, the
    learner's flat parameter buffer) and `act(policy, obs, precision)` returns its actions; both must be
    module-level functions, since the processes are spawned. `random_steps`: env steps (all envs) acted
    uniformly at random first. `chunk`: vector steps per message.
    """

    def __init__(self, num_actors: int, cfg, spec, weights: torch.Tensor, build_policy: Callable, act: Callable,
                 random_steps: int, chunk: int, lead: int):
        if spec.num_envs % num_actors:
            raise ValueError(f"{spec.num_envs} envs do not split evenly over {num_actors} actor processes")
        self.num_actors, self.lead = num_actors, lead
        self.taken = 0  # rows (per actor) added to the replay so far
        self.weights = weights.detach().to("cpu", copy=True).share_memory_()
        self.control = torch.zeros(3, dtype=torch.int64).share_memory_()
        self.control[ALLOWED] = lead
        context = mp.get_context("spawn")  # fork would copy the learner's threads and locks (OpenMP, sinks)
        self.queue = context.Queue()
        self.pending: list[deque] = [deque() for _ in range(num_actors)]  # rows received, per actor
        self.first_obs: list[np.ndarray | None] = [None] * num_actors
        self.obs: np.ndarray | None = None  # the observation the replay's next row starts from
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.processes = [
            context.Process(target=run_actor, name=f"rlfoundry-actor-{k}", daemon=True,
                            args=(k, num_actors, cfg, spec, build_policy, act, self.weights, self.control, self.queue,
                                  random_steps, chunk))
            for k in range(num_actors)
        ]
        for process in self.processes:
            process.start()

    # ---------------------------------------------------------------- learner side

    def publish(self, flat: torch.Tensor) -> None:
        """Give the actors the learner's current weights (`flat`, as the `weights` the pool was built with)."""
        self.control[VERSION] += 1  # odd: being written
        self.weights.copy_(flat.detach())
        self.control[VERSION] += 1

    def collect(self, replay, min_rows: int) -> AsyncCollected:
        """Wait until `min_rows` whole rows (every actor's piece of a vector step) have arrived, take everything
        that has arrived by then, and add the whole rows to `replay` in order. A replay that already holds data
        from envs that are gone (a resumed run) is restarted from the actors' fresh observations first."""
        tick = time.perf_counter()
        while min(map(len, self.pending)) < min_rows or any(obs is None for obs in self.first_obs):
            self._receive(block=True)
        while self._receive(block=False):
            pass
        rows = min(map(len, self.pending))
        if self.obs is None:  # the actors' first observations: where the replay's next row starts
            self.obs = np.concatenate([obs for obs in self.first_obs if obs is not None])  # all are, by the wait
            replay.restart(self.obs)
        for _ in range(rows):
            pieces = [actor.popleft() for actor in self.pending]
            actions, rewards, terminated, truncated, next_obs = (np.concatenate(field) for field in zip(*pieces))
            replay.add(self.obs, actions, rewards, terminated, truncated, next_obs)
            self.obs = next_obs
        self.taken += rows
        self.control[ALLOWED] = self.taken + self.lead  # while the learner learns from these, the next ones come
        returns, lengths, self.returns, self.lengths = self.returns, self.lengths, [], []
        return AsyncCollected(rows, returns, lengths, time.perf_counter() - tick, 0.0)

    def _receive(self, block: bool) -> bool:
        """Take one message from the actors; False when there was none."""
        deadline = time.monotonic() + STALL_SECONDS
        while True:
            try:
                message = self.queue.get(timeout=0.5) if block else self.queue.get_nowait()
                break
            except queue_lib.Empty:
                if not block:
                    return False
                for k, process in enumerate(self.processes):
                    if process.exitcode is not None:  # died without reporting an error (killed, or failed to start)
                        raise RuntimeError(
                            f"actor process {k} exited with code {process.exitcode} (its output, if any, is on stderr; "
                            "a script that calls rlfoundry.train needs `if __name__ == '__main__':`, since actor "
                            "processes are spawned)") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no transitions from the actor processes for {STALL_SECONDS:.0f} s") from None
        kind, k, *payload = message
        if kind == "error":
            raise RuntimeError(f"actor process {k} failed:\n{payload[0]}")
        if kind == "reset":
            self.first_obs[k] = payload[0]
            return True
        steps, returns, lengths = payload
        self.pending[k].extend(steps)
        self.returns.extend(returns)
        self.lengths.extend(lengths)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop and join the actor processes (terminate, then kill, those that do not exit in time)."""
        self.control[STOP] = 1
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.terminate()
                process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join()
        self.queue.close()
        self.queue.cancel_join_thread()
        self.processes = []

    @property
    def alive(self) -> list[int]:
        """Process ids of the actor processes still running."""
        # a started process has a pid; the check narrows Process.pid's `int | None`
        return [process.pid for process in self.processes if process.is_alive() and process.pid is not None]


# ---------------------------------------------------------------- actor side


def run_actor(k: int, num_actors: int, cfg, spec, build_policy: Callable, act: Callable, weights: torch.Tensor,
              control: torch.Tensor, queue, random_steps: int, chunk: int) -> None:
    """Actor process `k` (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner decides when the run stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    queue.cancel_join_thread()  # exit without waiting for unsent data: the learner may have stopped reading
    parent = os.getppid()
    envs = None
    try:
        from rlfoundry import envs as envs_lib
        from rlfoundry.envs import env_seed
        from rlfoundry.nets.flat import flatten_parameters

        torch.set_num_threads(1)
        m = spec.num_envs // num_actors
        env_cfg = cfg.env.model_copy(update={"num_envs": m})
        mode = envs_lib.choose_vectorization(env_cfg, m)
        # the actor processes are the parallelism: no env worker processes below them
        envs, local_spec = envs_lib.build(env_cfg, gamma=cfg.algo.gamma, vectorization="sync" if mode == "async" else mode)
        seeds = np.random.SeedSequence([cfg.train.seed, k])
        torch.manual_seed(int(seeds.generate_state(1)[0]))
        rng = np.random.default_rng(seeds.spawn(1)[0])
        policy = build_policy(local_spec, cfg.network)
        flat = flatten_parameters(policy).requires_grad_(False)
        version = -1
        space = spec.action_space
        obs, _ = envs.reset(seed=env_seed(cfg.train.seed) + k * m)
        queue.put(("reset", k, obs))
        steps: list[tuple] = []
        returns: list[float] = []
        lengths: list[int] = []
        rows = 0
        while not control[STOP]:
            if rows >= int(control[ALLOWED]):  # ahead of the learner: hand over what we have and wait
                if steps:
                    queue.put(("steps", k, steps, returns, lengths))
                    steps, returns, lengths = [], [], []
                if os.getppid() != parent:
                    return
                time.sleep(2e-4)
                continue
            published = int(control[VERSION])
            if published != version and published % 2 == 0:
                flat.copy_(weights)
                if int(control[VERSION]) == published:  # else it changed while copying: try again next step
                    version = published
            if rows * spec.num_envs < random_steps:
                if spec.discrete:
                    actions = rng.integers(space.n, size=m)
                else:
                    actions = rng.uniform(space.low, space.high, size=(m, *space.shape)).astype(np.float32)
            else:
                actions = act(policy, obs, cfg.train.precision)
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            steps.append((actions, rewards, terminated, truncated, next_obs))
            if "_episode" in info:
                ended = info["_episode"]
                returns.extend(info["episode"]["r"][ended].tolist())
                lengths.extend(info["episode"]["l"][ended].tolist())
            obs = next_obs
            rows += 1
            if len(steps) >= chunk:
                queue.put(("steps", k, steps, returns, lengths))
                steps, returns, lengths = [], [], []
    except BaseException:  # noqa: BLE001 - anything, even KeyboardInterrupt, goes to the learner as an error
        queue.put(("error", k, traceback.format_exc()))
    finally:
        if envs is not None:
            envs.close()
