"""The sweep file of `rlfoundry sweep`: what to tune, how and for how long, checked against the config schema before
anything starts. Its keys, with an example: docs/guide/experiments.md, "Hyperparameter sweeps".

Nothing here knows about Optuna: both backends (`studies.sweep`, `studies.sweep_tune`) read this file, start each
trial's runs with `run_args` in `run_dir`s, and write the same report (`studies.sweep_report`). A parameter's value
reaches a run as one more `key=value` override in YAML flow style (`overrides`), so any value the config accepts (a
schedule, a list) can be a choice.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import yaml
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, ValidationError, model_validator

from rlfoundry.config.base import StrictModel
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.schedule import Schedule
from rlfoundry.experiment.load import SECTIONS, apply_overrides, load_config, read_yaml

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from rlfoundry.experiment.schema import ExperimentConfig

# The trainer's numbers a sweep can maximise: the summary.json key of a run's final value, and the metrics.csv
# column of its intermediate ones (the pruner's input).
METRICS = {"eval_return": ("eval_return_mean", "eval/return_mean")}


def _iqm(values) -> float:
    from rlfoundry.studies import stats  # (scipy.stats takes a second to import: every Ray trial would pay it)

    return float(stats.iqm(np.asarray(values, dtype=float)[:, None]))


OBJECTIVES: dict[str, Callable[[list[float]], float]] = {
    "mean": lambda values: float(np.mean(values)),
    "iqm": _iqm,
    "min": lambda values: float(np.min(values)),
}
RESERVED = ("train.seed", "logging.group")  # set by the sweep for every run


class Parameter(StrictModel):
    """One dimension of the search space: exactly one of `float`, `int` (ranges, both ends included) or
    `choice`."""

    float_: tuple[float, float] | None = Field(None, alias="float", description="[low, high], uniform or log.")
    int_: tuple[int, int] | None = Field(None, alias="int", description="[low, high], with `step` or log.")
    choice: list[Any] | None = Field(None, description="Values the key may take: numbers, strings, lists, mappings.")
    log: bool = Field(False, description="Sample a range uniformly in log space (both ends above 0).")
    step: PositiveInt | None = Field(None, description="An int range's spacing (default 1).")

    @model_validator(mode="after")
    def _one_kind(self) -> Parameter:
        given = [name for name, value in (("float", self.float_), ("int", self.int_), ("choice", self.choice))
                 if value is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of float: [low, high], int: [low, high] or choice: [...], "
                             f"got {', '.join(given) or 'none'}")
        if self.choice is not None:
            if self.log or self.step is not None:
                raise ValueError("log and step belong to ranges, not to a choice")
            if not self.choice:
                raise ValueError("an empty choice: list at least one value")
            if len({override_text(value) for value in self.choice}) != len(self.choice):
                raise ValueError(f"a value is listed twice in {self.choice}")
            return self
        low, high = self.bounds
        if not low < high:
            raise ValueError(f"empty range [{low}, {high}]: the low end must be below the high end")
        if self.log and low <= 0:
            raise ValueError(f"log range [{low}, {high}] includes values <= 0: both ends must be above 0")
        if self.step is not None and (self.float_ is not None or self.log):
            raise ValueError("step belongs to int ranges without log (a stepped float grid is a choice: list the "
                             "values)")
        return self

    @property
    def kind(self) -> Literal["float", "int", "choice"]:
        return "float" if self.float_ is not None else "int" if self.int_ is not None else "choice"

    @property
    def values(self) -> list[Any]:
        """The values to check against the config schema: a range's ends, every choice."""
        return list(self.choice if self.choice is not None else self.bounds)

    @property
    def bounds(self) -> tuple[float, float]:
        """A range's [low, high], float or int."""
        bounds = self.float_ or self.int_
        assert bounds is not None, "a choice has no range"
        return bounds

    @property
    def labels(self) -> list[Any]:
        """The choices as a search library stores them: scalars as they are, lists and mappings as their YAML."""
        return [value if _scalar(value) else override_text(value) for value in self.choice or []]

    def value_of(self, label: Any) -> Any:
        """The config value of a sampled label (the inverse of `labels`)."""
        return self.choice[self.labels.index(label)] if self.choice is not None else label


class PrunerConfig(StrictModel):
    """When to stop a trial early, from the objective at its evaluation steps. median: below the median of earlier
    trials at the same step; asha: asynchronous successive halving (Li et al. 2020), only the top 1/reduction_factor
    go on at each rung; hyperband (Li et al. 2018): successive halving in several brackets of first rungs."""

    kind: Literal["none", "median", "asha", "hyperband"] = "none"
    startup_trials: NonNegativeInt = Field(5, description="median: trials that finish before any is pruned.")
    warmup_steps: NonNegativeInt = Field(0, description="median: env steps of a trial before it may be pruned.")
    min_steps: PositiveInt | None = Field(None, description="asha, hyperband: env steps of the first rung (default "
                                                            "eval.every_steps).")
    reduction_factor: int | None = Field(None, ge=2, description="asha (default 4), hyperband (default 3).")

    @model_validator(mode="after")
    def _own_keys(self) -> PrunerConfig:
        own = {"none": (), "median": ("startup_trials", "warmup_steps"),
               "asha": ("min_steps", "reduction_factor"), "hyperband": ("min_steps", "reduction_factor")}[self.kind]
        foreign = sorted(self.model_fields_set - {"kind", *own})
        if foreign:
            raise ValueError(f"{', '.join(foreign)}: not a setting of the {self.kind} pruner; its settings: "
                             f"{', '.join(own) or 'none'}")
        return self


class Budget(StrictModel):
    trials: PositiveInt | None = Field(None, description="Completed and pruned trials (a grid: its size by default).")
    minutes: PositiveFloat | None = Field(None, description="No trial starts after this many minutes of the sweep, "
                                                            "over all its continuations; those under way finish.")
    failures: PositiveInt | None = Field(None, description="Give up after this many failed trials (default: the "
                                                           "trials budget).")


class SweepFile(StrictModel):
    base: str = Field(description="ENV_ID:VARIANT or an experiment file, relative to the sweep file.")
    overrides: list[str] = Field(default_factory=list, description="key=value for every run.")
    method: Literal["grid", "random", "tpe", "cmaes"] = "tpe"
    seed: NonNegativeInt = Field(0, description="The sampler's seed.")
    metric: Literal["eval_return"] = "eval_return"  # a key of METRICS
    objective: Literal["mean", "iqm", "min"] = "mean"  # a key of OBJECTIVES
    seeds_per_trial: PositiveInt = Field(1, description="Runs per trial, seeds 1..N, all scored by `objective`.")
    budget: Budget = Field(default_factory=Budget)
    pruner: PrunerConfig = Field(default_factory=PrunerConfig)
    parameters: dict[str, Parameter] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _pruner_shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("pruner"), str):
            return {**data, "pruner": {"kind": data["pruner"]}}
        return data

    @property
    def seeds(self) -> list[int]:
        return list(range(1, self.seeds_per_trial + 1))


# ---------------------------------------------------------------- reading and checking


def read_sweep(path: Path) -> SweepFile:
    """The sweep file, or ConfigError naming every bad key."""
    data = read_yaml(Path(path))
    try:
        return SweepFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_messages(exc)) from None


def _messages(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        key = ".".join(loc)
        if error["type"] == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = [field.alias or name for name, field in model.model_fields.items()]
            close = difflib.get_close_matches(loc[-1], allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            lines.append(f"{key}: unknown key{hint}; allowed: {', '.join(allowed)}")
        else:
            lines.append(f"{key or 'the file'}: {error['msg'].removeprefix('Value error, ')}")
    return lines[0] if len(lines) == 1 else "\n  " + "\n  ".join(lines)


def _model_at(loc: list[str]) -> type[StrictModel]:
    """The model whose keys sit at `loc` in the sweep file."""
    if not loc:
        return SweepFile
    models: dict[str, type[StrictModel]] = {"parameters": Parameter, "budget": Budget, "pruner": PrunerConfig}
    return models[loc[0]]


def base_spec(sweep: SweepFile, sweep_path: Path) -> str:
    """The base as a SPEC: an experiment file's path resolved against the sweep file's folder."""
    if not sweep.base.endswith((".yaml", ".yml")):
        return sweep.base
    path = Path(sweep.base)
    return str(path if path.is_absolute() else Path(sweep_path).parent / path)


def check_space(sweep: SweepFile, spec: str) -> ExperimentConfig:
    """Load the base with the overrides, then with every parameter's ends and choices: any value the config would
    refuse is a ConfigError naming the parameter, before a trial starts. Returns the base config."""
    for key in [*RESERVED, *(text.partition("=")[0].strip() for text in sweep.overrides)]:
        if key in sweep.parameters:
            raise ConfigError(f"parameters.{key}: set by {'the sweep' if key in RESERVED else 'overrides'}; "
                              "it cannot be a parameter too")
    for key in RESERVED:
        if any(text.partition("=")[0].strip() == key for text in sweep.overrides):
            raise ConfigError(f"overrides: {key} is set by the sweep itself; leave it out")
    try:
        cfg = load_config(spec, sweep.overrides)
    except ConfigError as exc:
        raise ConfigError(f"base {sweep.base} with the overrides: {exc}") from None
    for key, parameter in sweep.parameters.items():
        section = key.split(".")[0]
        if section not in SECTIONS:
            close = difflib.get_close_matches(section, SECTIONS, n=1)
            hint = f" (did you mean '{close[0]}.…'?)" if close else ""
            raise ConfigError(f"parameters.{key}: unknown section '{section}'{hint}; allowed: {', '.join(SECTIONS)}")
        for value in parameter.values:
            try:
                load_config(spec, [*sweep.overrides, f"{key}={override_text(value)}"])
            except ConfigError as exc:
                raise ConfigError(f"parameters.{key} = {override_text(value)}: {exc}") from None
    if sweep.method == "grid":
        grid_size(sweep)
    if sweep.pruner.kind != "none" and cfg.eval.every_steps == 0:
        raise ConfigError(f"pruner {sweep.pruner.kind}: needs intermediate evaluations, but eval.every_steps is 0")
    if sweep.budget.trials is None and sweep.budget.minutes is None and sweep.method != "grid":
        raise ConfigError(f"budget: a {sweep.method} search has no end of its own; give trials, minutes or both")
    return cfg


def replaced_schedules(sweep: SweepFile, cfg: ExperimentConfig) -> list[str]:
    """What a number range does to a key the base sets to a schedule (a preset's `lr: lin_1e-3`): every trial trains
    a constant from the range instead, which the sweep says before it starts rather than silently."""
    notes = []
    for key, parameter in sweep.parameters.items():
        if parameter.float_ is None and parameter.int_ is None:
            continue
        node = cfg.setting(key)
        if isinstance(node, Schedule) and node.kind != "constant":
            notes.append(f"parameters.{key}: the base's linear schedule (from {node.start:g} to {node.end:g}) is "
                         "replaced by a constant from the range in every trial; to search schedules, give a choice "
                         "of them ({choice: [lin_3e-4, lin_1e-3]})")
    return notes


def grid_points(parameter: Parameter) -> list[Any]:
    """A parameter's values in a grid: its choices, or every step of an int range."""
    if parameter.kind == "choice":
        return parameter.labels
    assert parameter.int_ is not None, "a grid enumerates choices and int ranges (see grid_size)"
    low, high = parameter.int_
    return list(range(low, high + 1, parameter.step or 1))


def grid_size(sweep: SweepFile) -> int:
    """The number of points in the grid; ConfigError for a parameter a grid cannot enumerate."""
    for key, parameter in sweep.parameters.items():
        if parameter.kind == "float" or parameter.log:
            raise ConfigError(f"parameters.{key}: a grid needs a choice or an int range, not a continuous "
                              f"{'log ' if parameter.log else ''}{parameter.kind} range; list the values as "
                              "choice: [...] or use method random, tpe or cmaes")
    return math.prod(len(grid_points(parameter)) for parameter in sweep.parameters.values())


# ---------------------------------------------------------------- from sampled labels to runs


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def override_text(value: Any) -> str:
    """A value as the right-hand side of an override: YAML flow style, read back by the loader as the same value."""
    return yaml.safe_dump([value], default_flow_style=True, width=math.inf).strip()[1:-1]


def overrides(sweep: SweepFile, labels: dict[str, Any]) -> list[str]:
    """The `key=value` overrides that give a run the sampled parameters."""
    return [f"{key}={override_text(sweep.parameters[key].value_of(label))}" for key, label in labels.items()]


def trial_value(trial: FrozenTrial) -> float:
    """A complete trial's objective value (a sweep has one objective)."""
    assert trial.value is not None, f"trial {trial.number} has no value: it did not complete"
    return trial.value


def run_dir(out: Path, trial: int | str, seed: int) -> Path:
    """Where a trial's run of one seed lives in the sweep directory (`trial`: its number, or its Ray Tune id)."""
    return Path(out) / "trials" / str(trial) / f"s{seed}"


def run_log(out: Path, trial: int | str, seed: int) -> Path:
    """A trial's run's console output."""
    return Path(out) / "logs" / f"{trial}_s{seed}.log"


def run_args(sweep: SweepFile, spec: str, labels: dict[str, Any], seed: int, group: str) -> list[str]:
    """`rlfoundry train` arguments of one of a trial's runs."""
    return [spec, *sweep.overrides, *overrides(sweep, labels), f"train.seed={seed}", f"logging.group={group}"]


def experiment(sweep: SweepFile, spec: str, labels: dict[str, Any], seed: int) -> dict[str, Any]:
    """An experiment file (docs/guide/getting-started.md, "Config") for one run of a trial: `preset: SPEC` or the base file's contents,
    then the overrides, the parameters and the seed as nested keys."""
    data = read_yaml(Path(spec)) if spec.endswith((".yaml", ".yml")) else {"preset": spec}
    return apply_overrides(data, [*sweep.overrides, *overrides(sweep, labels), f"train.seed={seed}"])
