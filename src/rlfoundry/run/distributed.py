"""One run across processes: `rlfoundry train SPEC --nproc N` on this machine, or N processes that torchrun starts
on one machine or several.

    rank 0            the Trainer: its own envs, and everything the run writes (evaluation, metrics, checkpoints)
    ranks 1 … N-1     `follow()`: their own envs; they write nothing
    every update      the gradient averaged over the ranks (`rlfoundry.algos.ranks`): the parameters stay identical
    every iteration   `Lockstep.report`: the normalisation statistics merged over the ranks, and the episodes that
                      ended and any stop signal gathered at rank 0; `Lockstep.decide`: rank 0 tells every rank the
                      step reached, whether to checkpoint and whether to stop
    every checkpoint  `Lockstep.gather`: each rank sends what only it holds (its envs, its collector's position, its
                      RNGs), and rank 0 writes them into the checkpoint with its own; resume hands them back

Rank r steps the run's envs r·num_envs … (r+1)·num_envs − 1, seeded as one process with N × num_envs envs would
seed them; its torch and NumPy RNGs (action sampling) get a seed of their own. Only on-policy agents with
feed-forward cores run this way: their whole learning step is one all-reduced gradient.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import sys
import traceback
from datetime import timedelta
from multiprocessing import get_context
from typing import Any, NamedTuple

import gymnasium.wrappers.vector as vw
import numpy as np
import torch
import torch.distributed as dist

from rlfoundry import envs as envs_lib
from rlfoundry.algos import Runtime, algorithm, algorithms, ranks
from rlfoundry.algos.base import Iteration
from rlfoundry.algos.optim import debug_checks
from rlfoundry.config.errors import ConfigError
from rlfoundry.envs import state as envs_state
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.run.seeding import resolve_device, rng_state, seed_everything, set_rng_state

TIMEOUT = timedelta(hours=1)  # a rank waits this long for the others (rank 0 evaluating, saving a checkpoint)
PER_PROCESS = "collector"  # the part of an agent's state that differs between ranks


@dataclasses.dataclass(frozen=True)
class Group:
    """This process's place in a run across processes."""

    rank: int
    world: int
    local_world: int  # ranks on this machine: they share its cores

    @property
    def main(self) -> bool:
        return self.rank == 0


def torchrun_group() -> Group | None:
    """The group torchrun (or another launcher setting its variables) started this process in, if any."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1 or "RANK" not in os.environ:
        return None
    return Group(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_WORLD_SIZE", world)))


def check(cfg: ExperimentConfig, world: int) -> None:
    """What can run across `world` processes (a ConfigError, exit 2, for the rest)."""
    if world == 1:
        return
    if not algorithm(cfg.algo.name).distributed:
        across = [name for name, cls in algorithms().items() if cls.distributed]
        raise ConfigError(f"--nproc {world}: runs across processes are for {', '.join(across)}; algo {cfg.algo.name} "
                          "learns from a replay buffer in one process (use more env.num_envs, or SAC's "
                          "algo.async_actors)")
    if cfg.network.core != "identity":
        raise ConfigError(f"--nproc {world}: memory cores (network.core={cfg.network.core}) train in one process; "
                          "leave out --nproc")


def peer_gone(exc: BaseException) -> bool:
    """Whether `exc` says another rank of the run is gone (it stopped, failed or was killed)."""
    return isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and "gloo" in str(exc).lower())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join(group: Group, init_method: str = "env://") -> None:
    """Enter the process group: gloo for CPU tensors, NCCL for CUDA ones where a GPU is present."""
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", group.rank % group.local_world)) % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=init_method, rank=group.rank, world_size=group.world, timeout=TIMEOUT)


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank `rank`'s torch, NumPy and Python RNGs: the run's seed on rank 0 (as in one process)."""
    return seed if rank == 0 else int(np.random.SeedSequence((seed, rank)).generate_state(1)[0])


# ---------------------------------------------------------------- what differs between ranks


def detached(value: Any) -> Any:
    """A state dict's tensors copied out of the buffers they may view (a FlatOptimizer's flat parameters): pickled
    as they are, each view would carry the whole buffer."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: detached(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(detached(item) for item in value)
    return value


def process_state(agent, envs) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """What one rank holds besides the shared parameters: (JSON values, arrays) of its RNGs, its envs and its
    collector's position."""
    values, arrays, torch_rng = rng_state()
    arrays["torch_rng"] = torch_rng.numpy()
    env_state, env_arrays, why = envs_state.capture(envs)
    arrays.update(env_arrays)
    collector = agent.state_dict().get(PER_PROCESS, {})
    arrays.update({f"{PER_PROCESS}.{key}": value.numpy() for key, value in collector.items()})
    return {**values, "envs": env_state, "envs_not_captured": why}, arrays


def restore_process(agent, envs, shared: dict[str, Any], values: dict[str, Any], arrays: dict[str, np.ndarray],
                    obs_stats) -> str | None:
    """Load the run's agent state (`shared`) with this rank's own part; returns why the envs were reset, or None."""
    set_rng_state(values, arrays, torch.from_numpy(arrays["torch_rng"].copy()))
    prefix = f"{PER_PROCESS}."
    own = {key.removeprefix(prefix): torch.from_numpy(value) for key, value in arrays.items() if key.startswith(prefix)}
    agent.load_state_dict({**shared, **({PER_PROCESS: own} if own else {})})
    if values["envs"] is not None:
        envs_state.restore(envs, values["envs"], arrays)
        return None
    agent.forget_env_position()
    if obs_stats is not None:
        envs_lib.set_obs_stats(envs, *obs_stats)
    return values["envs_not_captured"]


def checkpoint_ranks(states: list[tuple[dict[str, Any], dict[str, np.ndarray]]]) -> tuple[list, dict[str, np.ndarray]]:
    """Ranks 1 … N-1's states as a checkpoint holds them: JSON values in order, arrays named `rank<r>.<name>`."""
    values = [state for state, _ in states]
    arrays = {f"rank{rank}.{key}": array for rank, (_, own) in enumerate(states, start=1) for key, array in own.items()}
    return values, arrays


def saved_ranks(state: dict[str, Any], arrays: dict[str, np.ndarray], world: int) -> list:
    """The inverse of `checkpoint_ranks` for a run of `world` processes (a ConfigError when it had another count)."""
    values = state.get("ranks") or []
    if len(values) + 1 != world:
        raise ConfigError(f"this run was trained with {len(values) + 1} process(es); resume it with as many "
                          f"(it was given {world})")
    return [(own, {key.partition(".")[2]: array for key, array in arrays.items() if key.startswith(f"rank{rank}.")})
            for rank, own in enumerate(values, start=1)]


# ---------------------------------------------------------------- the exchange of every iteration


def share_setup(group: Group, setup: dict[str, Any] | None = None,
                states: list | None = None) -> tuple[dict[str, Any], Any]:
    """Rank 0 sends every rank the run's setup (resolved config, vectorization, agent state, step, observation
    statistics) and each its own saved state (None for a new run); the others receive theirs."""
    box = [setup]
    dist.broadcast_object_list(box, src=0)
    mine: list = [None]
    dist.scatter_object_list(mine, [None, *(states or [None] * (group.world - 1))] if group.main else None, src=0)
    received = box[0]
    assert received is not None, "rank 0 sends a setup"
    return received, mine[0]


def running_statistics(envs) -> list:
    """The running mean and variance objects of the envs' observation and return normalisation (those present)."""
    observations = envs_lib.find_wrapper(envs, vw.NormalizeObservation)
    returns = envs_lib.find_wrapper(envs, vw.NormalizeReward)
    return [*([observations.obs_rms] if isinstance(observations, vw.NormalizeObservation) else []),
            *([returns.return_rms] if isinstance(returns, vw.NormalizeReward) else [])]


class Decision(NamedTuple):
    step: int  # env steps so far, all ranks together
    save: bool  # checkpoint now: every rank sends its state
    last: bool  # the run ends after this iteration


class Lockstep:
    """A rank's side of what the ranks exchange outside the gradient (see the module's docstring)."""

    def __init__(self, group: Group, stats: list):
        """`stats`: the envs' running statistics (`running_statistics`), identical on every rank at this point."""
        self.group = group
        self.stats = stats
        self.synced = [(float(s.count), np.array(s.mean, dtype=np.float64), np.array(s.var, dtype=np.float64))
                       for s in self.stats]

    def report(self, result: Iteration, stop_signal: str | None) -> tuple[Iteration, str | None]:
        """Merge the normalisation statistics; at rank 0, the iteration of all ranks (their steps and episodes) and
        the first stop signal any rank got."""
        self._merge_statistics()
        mine = (result.steps, result.episode_returns, result.episode_lengths, stop_signal)
        gathered: list[Any] | None = [None] * self.group.world if self.group.main else None
        dist.gather_object(mine, gathered, dst=0)
        if gathered is None:  # (a rank other than 0)
            return result, stop_signal
        returns = [r for _, rank_returns, _, _ in gathered for r in rank_returns]
        lengths = [n for _, _, rank_lengths, _ in gathered for n in rank_lengths]
        signals = [s for *_, s in gathered if s is not None]
        merged = Iteration(sum(steps for steps, *_ in gathered), result.metrics, returns, lengths)
        return merged, stop_signal or (signals[0] if signals else None)

    def decide(self, decision: Decision | None = None) -> Decision:
        """Rank 0's decision, on every rank."""
        box = [decision]
        dist.broadcast_object_list(box, src=0)
        decided = box[0]
        assert decided is not None, "rank 0 sends its decision"
        return decided

    def gather(self, state, parameters: torch.Tensor) -> list:
        """At a checkpoint: every rank's state at rank 0 (ranks 1 … N-1, in order; [] elsewhere), after checking
        that the ranks' parameters are still identical."""
        gap = ranks.differing(parameters)
        if gap != 0.0:
            raise RuntimeError(f"the ranks' parameters differ by up to {gap:.3g}: they no longer learn in lockstep")
        gathered: list[Any] | None = [None] * self.group.world if self.group.main else None
        dist.gather_object(state, gathered, dst=0)
        return gathered[1:] if gathered is not None else []

    def _merge_statistics(self) -> None:
        """Every rank's running mean and variance (observation and return normalisation) become those of all the
        ranks' samples: each rank's new samples since the last merge, centred on the merged mean, are summed."""
        for i, stats in enumerate(self.stats):
            count0, mean0, var0 = self.synced[i]
            centred = np.asarray(stats.mean, dtype=np.float64) - mean0
            count = float(stats.count)
            new = np.concatenate([[count - count0], (count * centred).ravel(),
                                  (count * (np.asarray(stats.var, dtype=np.float64) + centred**2) - count0 * var0).ravel()])
            total = torch.from_numpy(new)
            dist.all_reduce(total)
            size = mean0.size
            merged_count = count0 + float(total[0])
            shift = total[1:1 + size].numpy().reshape(mean0.shape) / merged_count
            mean = mean0 + shift
            var = (count0 * var0 + total[1 + size:].numpy().reshape(mean0.shape)) / merged_count - shift**2
            stats.mean = np.asarray(mean, dtype=np.asarray(stats.mean).dtype).reshape(np.shape(stats.mean))
            stats.var = np.asarray(var, dtype=np.asarray(stats.var).dtype).reshape(np.shape(stats.var))
            stats.count = merged_count
            self.synced[i] = (merged_count, np.array(stats.mean, dtype=np.float64), np.array(stats.var, dtype=np.float64))


# ---------------------------------------------------------------- ranks 1 … N-1


def follow(group: Group) -> None:
    """A rank other than 0: receive the run from rank 0, then iterate in lockstep with it until it says stop."""
    setup, saved = share_setup(group)
    cfg: ExperimentConfig = setup["cfg"]
    threads = cfg.train.torch_threads
    assert isinstance(threads, int), "rank 0 shares its resolved config"
    seed_everything(rank_seed(cfg.train.seed, group.rank), threads, cfg.train.deterministic)
    device = resolve_device(cfg.train.device)  # on CUDA: this rank's GPU, the current device since `join`
    env_cfg = cfg.env.model_copy(update={"vectorization": setup["vectorization"]})
    envs, spec = envs_lib.build(env_cfg, gamma=getattr(cfg.algo, "gamma", 0.99), check_finite=cfg.train.debug,
                               first_env=group.rank * env_cfg.num_envs)
    agent = algorithm(cfg.algo.name)(cfg, spec, Runtime.of(cfg.train, device))
    try:
        if saved is None:
            agent.load_state_dict(setup["agent"])  # rank 0's initial parameters
            if cfg.train.init is not None and setup["obs_stats"] is not None:  # and the statistics it started from
                envs_lib.set_obs_stats(envs, *setup["obs_stats"])
        else:
            values, arrays = saved  # this rank's checkpointed state
            restore_process(agent, envs, setup["agent"], values, arrays, setup["obs_stats"])
        lockstep = Lockstep(group, running_statistics(envs))
        step, total = setup["step"], cfg.train.total_timesteps
        with contextlib.ExitStack() as checking:
            if cfg.train.debug:  # the checks of debug mode, as on rank 0
                checking.enter_context(debug_checks())
                checking.enter_context(torch.autograd.set_detect_anomaly(True, check_nan=True))
            while True:
                result = agent.iterate(envs, step / total)
                lockstep.report(result, None)
                decision = lockstep.decide()
                if decision.save:
                    lockstep.gather(process_state(agent, envs), agent.synced_parameters())
                if decision.last:
                    break
                step = decision.step
    finally:
        agent.close()
        envs.close()


def _follower_main(rank: int, world: int, port: int) -> None:
    """The entry of a rank that `--nproc` starts: Ctrl-C reaches rank 0, which stops every rank after the
    iteration (a checkpoint first), so this one ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    group = Group(rank, world, world)
    try:
        join(group, f"tcp://127.0.0.1:{port}")
        follow(group)
    except BaseException as exc:  # rank 0 reports the run's failure; this says what happened here
        if peer_gone(exc):
            print(f"rank {rank}: another rank stopped, so this one stops too", file=sys.stderr)
        else:
            print(f"rank {rank} failed:\n{traceback.format_exc()}", file=sys.stderr)
        sys.exit(1)
    finally:
        leave()


def start_local_ranks(world: int) -> tuple[list, int]:
    """Start ranks 1 … world-1 as processes of this machine; returns them and the port rank 0 listens on."""
    port = free_port()
    context = get_context("spawn")
    processes = [context.Process(target=_follower_main, args=(rank, world, port), name=f"rlfoundry-rank{rank}")
                 for rank in range(1, world)]
    for process in processes:
        process.start()
    return processes, port


def stop_local_ranks(processes: list, timeout: float = 30.0) -> None:
    """Wait for the ranks to end (they do, once rank 0 said stop or left); those that do not are terminated."""
    for process in processes:
        process.join(timeout)
        if process.is_alive():
            process.terminate()
            process.join(5)
