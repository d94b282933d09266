"""The experiment config: env, algo, network, train, eval and logging sections.

Layers, lowest first: package defaults (the field defaults of `rlfoundry.config.sections`) → algorithm
defaults (the algo config's defaults) → env preset → variant → experiment file → CLI `a.b=value`
overrides. `rlfoundry.experiment.load` merges the layers as plain dicts and validates the result once.

It sits above the algorithms because the `algo` section is the config class each algorithm states on its class
(`PPO.config`, `PPOConfig` in `algos/ppo.py`), plugins' included; the sections below the algorithms stay in
`rlfoundry.config`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Field, Tag, model_validator

from rlfoundry.algos.base import AlgorithmConfig
from rlfoundry.algos.registry import algorithms, known_monitor_keys
from rlfoundry.config.base import StrictModel
from rlfoundry.config.sections import (
    CheckpointConfig,
    EnvConfig,
    EvalConfig,
    LoggingConfig,
    NetworkConfig,
    Provenance,
    SolvedConfig,
    TrainConfig,
)

# One entry per registered algorithm; the `name` key of the `algo` section picks the class.
ALGO_CONFIGS: dict[str, type[AlgorithmConfig]] = {name: cls.config for name, cls in algorithms().items()}


def _algo_name(value: Any) -> str | None:
    return value.get("name", "ppo") if isinstance(value, dict) else getattr(value, "name", None)


if TYPE_CHECKING:
    # The checker cannot see the union built at import time below: to it, the section is some algorithm's config,
    # with the `name` field each one declares (as Literal[its name]).
    class AlgoConfig(AlgorithmConfig):
        name: str
else:
    # The `algo` section is the config of the algorithm its `name` picks (a callable discriminator, because
    # StrictModel's field checks run before validation, which pydantic's inferred discriminators do not allow).
    AlgoConfig = Annotated[
        Union[tuple(Annotated[cls, Tag(name)] for name, cls in ALGO_CONFIGS.items())],  # noqa: UP007
        Discriminator(_algo_name),
    ]


class ExperimentConfig(StrictModel):
    variant: str = Field("custom", description="Preset variant name (recorded, used in run names).")
    env: EnvConfig
    algo: AlgoConfig
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    solved: SolvedConfig | None = None
    provenance: Provenance | None = None

    @model_validator(mode="after")
    def _check_sizes(self) -> ExperimentConfig:
        self.algo.check_with(self.env.num_envs)
        agent = algorithms()[self.algo.name]
        if self.network.core != "identity" and not agent.memory_cores:
            recurrent = [name for name, cls in algorithms().items() if cls.memory_cores]
            raise ValueError(
                f"network.core = '{self.network.core}': memory cores train with algo.name "
                f"{' or '.join(recurrent)}; {self.algo.name} allows only: identity"
            )
        # the overrides merged with the algorithm's default monitors
        self.logging.monitors.resolve(self.algo.name, agent.monitors, known_monitor_keys())
        return self

    @property
    def threshold(self) -> float | None:
        return None if self.solved is None else self.solved.return_
