"""The contract every algorithm keeps: one `Agent` subclass in its own file, and nothing registered elsewhere.

What the rest of rlfoundry needs to know of an algorithm is said once, on its class: the config class of its `algo`
section, whether it takes memory cores, runs across processes or compiles, its default metric monitors, how a smoke
run shrinks it, the γ its returns are discounted with, the outputs the episode inspector shows and the network
`rlfoundry export` writes. The tables the config schema, the trainer, the smoke check, the inspector and the export
read are views of these facts (`rlfoundry.algos.registry`). The family bases in `rlfoundry.algos.families` write
each kind of loop once (on-policy, off-policy, latent world model); an algorithm fills in its loss and its update.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rlfoundry.algos.graphs import GraphedStep, Step
from rlfoundry.buffers.transfer import HostToDevice
from rlfoundry.config.base import StrictModel
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.monitors import MonitorRule


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
        self.state: Any = None
        self.starts: np.ndarray | None = None  # [B], true where the next observation begins an episode
        self._ended: np.ndarray | None = None

    def ended(self, done: np.ndarray) -> None:
        self.starts, self._ended = self._ended, np.asarray(done, dtype=bool)


class AlgorithmConfig(StrictModel):
    """The `algo` section of one algorithm: a `name` field, Literal[its name] and defaulting to it, then its settings,
    each with a description."""

    def check_with(self, num_envs: int) -> None:
        """Check the settings that depend on the env count (a ValueError naming the key)."""

    @staticmethod
    def defaults_for(observation_space, action_space, env_id: str = "") -> dict[str, Any]:
        """Config layers for an env without a preset, chosen from its spaces (env, algo, network, train sections)."""
        return {}


@dataclass(frozen=True)
class Runtime:
    """Where and how an agent computes: its device, `train.precision` and `train.compile` as the run resolved them.
    The trainer hands it to the agent; agents read these here, never from `cfg.train`."""

    device: torch.device
    precision: str = "fp32"  # fp32 or bf16 (autocast)
    compile: bool = False  # torch.compile the agent's hot paths
    cuda_graphs: bool = False  # capture the steady-state steps in CUDA graphs (on CUDA only)
    device_replay: bool | str = False  # train.device_replay: mirror replays on the device (`keep_replay`)

    @classmethod
    def of(cls, train_cfg, device: torch.device | str = "cpu") -> Runtime:
        """The runtime of a config's `train` section (an unresolved `auto` compiles nothing, graphs nothing, and
        means fp32)."""
        precision = train_cfg.precision if train_cfg.precision in ("fp32", "bf16") else "fp32"
        device = torch.device(device)
        graphs = train_cfg.cuda_graphs is True and device.type == "cuda"
        return cls(device, precision, train_cfg.compile is True, graphs, train_cfg.device_replay)

    def autocast(self) -> AbstractContextManager:
        """The mixed-precision context: bf16 autocast, or no context at all for fp32 (entering a disabled autocast
        costs 2 µs, several times per gradient step)."""
        if self.precision == "bf16":  # a graph cannot hold autocast's cache of cast weights
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=not self.cuda_graphs)
        return nullcontext()

    def graphed(self, step: Step, generators: Sequence[torch.Generator] = (), copies: bool = False) -> Step:
        """`step` (a steady-state step: see `rlfoundry.algos.graphs`) replayed from a CUDA graph when the run uses
        them; `step` itself otherwise. `generators`: those it draws from besides the default one; `copies`: its
        outputs are kept past the next call (a replay returns copies of the graph's own)."""
        return GraphedStep(step, generators=generators, copies=copies) if self.cuda_graphs else step

    def compiled(self, fn: Callable) -> Callable:
        """`fn` through torch.compile when the run compiles (the first calls then compile, for tens of seconds on a
        CPU); `fn` itself otherwise."""
        return torch.compile(fn) if self.compile else fn

    def to_device(self) -> HostToDevice:
        """A copier of replay samples to this device (pinned buffers and copies that do not wait, on CUDA)."""
        return HostToDevice(self.device)

    def keep_replay(self, replay) -> None:
        """Mirror `replay` on the device (its `keep_on`) where train.device_replay says so: true always; auto on CUDA
        when its mirrored arrays (`mirrored_nbytes`) take at most half the free GPU memory."""
        if self.device_replay == "auto":
            if self.device.type != "cuda" or replay.mirrored_nbytes > torch.cuda.mem_get_info(self.device)[0] // 2:
                return
        elif not self.device_replay:
            return
        try:
            replay.keep_on(self.device)
        except torch.OutOfMemoryError:
            raise ConfigError(f"train.device_replay = true: the replay's copy ({replay.mirrored_nbytes / 2**30:.1f} GiB) "
                              f"does not fit on {self.device}; lower the replay's size or set train.device_replay to "
                              "auto") from None

    def compile_modules(self, *modules: torch.nn.Module) -> None:
        """Each network's forward pass compiled in place (its state dict keeps its names) when the run compiles."""
        if self.compile:
            for module in modules:
                module.compile()


class Agent(ABC):
    """One iteration = collect some experience, then learn from it.

    A concrete algorithm sets `name` and `config`; the other class-level facts have defaults that fit most. Built as
    `Algo(cfg, spec, runtime)`: the run's resolved config, the env's `EnvInfo`, and the `Runtime`.
    """

    name: ClassVar[str]  # algo.name in configs and ENV_ID:ALGO specs
    config: ClassVar[type[AlgorithmConfig]]  # the `algo` section's schema (its `name` field is Literal[name])
    memory_cores: ClassVar[bool] = False  # network.core may be a memory core (it replays stored sequences)
    actions: ClassVar[tuple[str, ...]] = ("Discrete", "Box")  # the action spaces it acts in, by Gymnasium class
    distributed: ClassVar[bool] = False  # runs across processes (`--nproc`, torchrun): one all-reduced gradient
    compiles: ClassVar[bool] = True  # train.compile compiles something; where not, true runs eager with a warning
    compile_by_default: ClassVar[bool] = False  # train.compile=auto compiles (measured to pay off on long runs)
    graphs: ClassVar[bool] = False  # its steady-state steps go through Runtime.graphed (train.cuda_graphs)
    graphs_by_default: ClassVar[bool] = False  # train.cuda_graphs=auto graphs its steps on CUDA (measured to pay)
    # logging.every_steps=auto: env steps merged into a metrics row (0: a row per iteration, as for rollouts)
    row_steps: ClassVar[int] = 0
    monitors: ClassVar[Mapping[str, MonitorRule]] = {}  # default monitors by metric key, with their sources
    smoke: ClassVar[tuple[str, ...]] = ()  # overrides that shrink a run to one short iteration (presets --smoke)
    # the settings that size an iteration: what to lower when one iteration is more than the whole budget
    iteration_settings: ClassVar[tuple[str, ...]] = ()
    # Why the trainer's envs are not the ones the agent steps (e.g. they live in actor processes), or None:
    # their state then is not checkpointed, and a resume resets the agent's envs (logged as for other envs).
    envs_elsewhere: str | None = None

    def __init__(self, cfg, spec, runtime: Runtime):
        if type(spec.action_space).__name__ not in self.actions:
            raise ConfigError(f"algo.name = '{self.name}' acts in {' or '.join(self.actions)} action spaces; "
                              f"{spec.id} has {spec.action_space}")
        self.cfg, self.spec, self.runtime = cfg, spec, runtime
        self.algo = cfg.algo
        self.device = runtime.device
        self.autocast = runtime.autocast

    @classmethod
    def smoke_overrides(cls, env_id: str) -> tuple[list[str], int]:
        """The overrides that shrink a run of this algorithm on `env_id` for the smoke check, and its env steps:
        2 envs × 64 steps unless the algorithm says otherwise."""
        return ["env.num_envs=2", *cls.smoke], 2 * 64

    def iteration_steps(self, first: bool = False) -> int | None:
        """The env steps one iteration of this process takes (`first`: the run's first, which may take more); None
        where that is not known before it runs."""
        return None

    @abstractmethod
    def iterate(self, envs: VectorEnv, progress: float) -> Iteration:
        """`progress` is the fraction of training done (0 → 1), for schedules."""

    @abstractmethod
    def predict(self, obs: np.ndarray, deterministic: bool = True, memory: Memory | None = None) -> np.ndarray:
        """Actions for a batch of observations, as the env takes them. A recurrent policy keeps its state
        across calls in `memory` (one per vector env); feed-forward ones ignore it."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs, by part: tensors (weights, optimizers), numpy arrays (replay), JSON."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    @property
    def gamma(self) -> float:
        """The γ the algorithm discounts returns with (the episode inspector's returns-to-go)."""
        return float(self.algo.gamma)

    def step_outputs(self, obs: torch.Tensor, action: np.ndarray, before: Any, after: Any) -> dict[str, Any]:
        """The episode inspector's view of one step: the agent's network outputs on `obs` [1, ...] (as the networks
        take it), given the `action` it chose and its memory before and after. Keys, each optional: probs [A],
        mean [A], std [A], q [A], value (float), memory_norm (float)."""
        return {}

    def acting_network(self) -> torch.nn.Module | None:
        """The network `rlfoundry export` writes: forward(obs, *memory) -> actions (deterministic, as the env takes
        them) or (actions, *new memory), with `initial_state(batch_size)` -> the memory tensors at an episode's
        start (empty for feed-forward). None for agents whose actions come from planning with a world model."""
        return None

    def synced_parameters(self) -> torch.Tensor:
        """For `distributed` agents: the flat parameters every process must hold identically."""
        raise NotImplementedError(f"{self.name} does not run across processes")

    def forget_env_position(self) -> None:  # noqa: B027 (optional: most agents keep nothing of the envs' position)
        """After a resume whose envs could not be restored (they are reset): drop what the agent remembers of the
        envs' current step, so its first iteration starts from a reset."""

    def close(self) -> None:  # noqa: B027 (optional: most agents run nothing besides their networks)
        """Release what the agent runs besides its networks (actor processes); the trainer calls it at the end."""


def finish_iteration(collected, steps: int, metrics: dict[str, float], learn_start: float) -> Iteration:
    """The iteration's report: the algorithm's metrics plus the time breakdown every run records."""
    metrics = {**metrics, "time/env": collected.time_env, "time/act": collected.time_act,
               "time/learn": time.perf_counter() - learn_start}
    return Iteration(steps, metrics, collected.episode_returns, collected.episode_lengths)


def averaged(steps: int, step: Callable[[], Mapping[str, torch.Tensor | float]]) -> dict[str, float]:
    """`steps` calls of `step` (one update each); the mean of each of their metrics. Tensors are summed on their
    device and read once at the end, not once per update."""
    totals: dict[str, Any] = {}
    for _ in range(steps):
        for key, value in step().items():
            totals[key] = totals.get(key, 0.0) + value
    tensors = [key for key, value in totals.items() if isinstance(value, torch.Tensor)]
    if tensors:  # one copy to the host for all of them (float64 holds every value as float() reads it)
        device = totals[tensors[0]].device
        stacked = torch.stack([totals[key].detach().reshape(()).to(device, torch.float64) for key in tensors])
        totals.update(zip(tensors, stacked.tolist()))
    return {key: float(value) / steps for key, value in totals.items()}
