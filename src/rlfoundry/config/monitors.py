"""The metric monitors' settings (`logging.monitors`) and the default bounds of each algorithm.

A monitor watches one metric of the trainer's rows (`diag/approx_kl`) against a lower and an upper bound; when the
metric stays out of bounds for `patience` iterations the run says so once (`rlfoundry.run.monitors` runs them).
Each algorithm states its default monitors on its class (`Agent.monitors`), from the shared rules here; they are
resolved with the overrides when a config is loaded, so a config whose override moves one bound of a default past
the other is refused then (exit 2), before any run directory exists.

Three kinds of bound, and no others, so that a monitor stays data a config can state:
    none     min / max are values of the metric
    initial  min / max are factors of |the mean of its first `warmup` values|   (entropy below a tenth of its start)
    median   min / max are factors of |the median of its last `window` values|   (a loss 100× its recent level)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field, PositiveInt, model_serializer, model_validator

from rlfoundry.config.base import StrictModel

ALERTS = "monitor/alerts"  # the metrics.csv column: the metrics alerted and out of bounds on the row

# Keys a monitor may watch: the metrics that repeat exactly under one seed. Timings (`time/`, `sps`) differ from run
# to run, so alerts on them would break "same seed, same metrics.csv" and the resume-equals-uninterrupted promise.
METRIC_KEY = re.compile(r"(train|eval|loss|diag|env)/\S+")


class MonitorRule(StrictModel):
    """One monitor's bounds. In `logging.monitors.metrics` only the fields given override the default monitor of that
    metric (the others keep the default's values); a metric without a default monitor needs min or max."""

    enabled: bool = Field(True, description="false: this monitor is off (the way to silence a default one).")
    min: float | None = Field(None, description="Lower bound (with relative_to initial or median: a factor); "
                                                "null: none.")
    max: float | None = Field(None, description="Upper bound (with relative_to initial or median: a factor); "
                                                "null: none.")
    relative_to: Literal["none", "initial", "median"] = Field(
        "none", description="none: min and max are values of the metric; initial: factors of the magnitude of the "
        "mean of its first logging.monitors.warmup values; median: factors of the magnitude of the median of its last "
        "logging.monitors.window values.")
    patience: PositiveInt | None = Field(
        None, description="Consecutive out-of-bounds iterations before the warning, and in-bounds ones before it "
        "ends; null: logging.monitors.patience.")

    @model_serializer(mode="wrap")
    def _given_fields_only(self, handler) -> dict[str, Any]:
        # An override holds what it changes and nothing else: written out in full, a re-read config.yaml would set
        # every field and replace the default's relative_to or bounds with the field defaults.
        return {key: value for key, value in handler(self).items() if key in self.model_fields_set}


# The rules algorithms' default monitors share (each algorithm states its own on its class: `Agent.monitors`).
# Bounds are deliberately loose: a default that fires on a healthy run
# teaches users to ignore the warning. Each was replayed over full runs of the CartPole and Pendulum presets.

# Entropy collapse. A categorical policy starts near its maximum entropy (ln 2 on CartPole); the CartPole PPO and A2C
# presets bottom out at 0.24-0.55 of it; below a tenth the policy has turned (near) deterministic. Discrete actions
# only (DISCRETE_ONLY).
ENTROPY_COLLAPSE = MonitorRule(min=0.1, relative_to="initial")
# Value-loss blow-up: two orders of magnitude above its recent level (unscaled returns, a diverging critic). Healthy
# runs move the value loss by more over a run (CartPole PPO: 13 → 3e-5), but slowly, which the median of the last
# `window` values follows; A2C's 5-step rollouts give spikes of 40× and 20× three iterations running.
VALUE_BLOWUP = MonitorRule(max=100.0, relative_to="median")

# The gradient norm before clipping (A2C: per update; PPO: the mean over an iteration's minibatches). Spikes of 20×
# its level are normal with A2C's 5-step rollouts; a sustained factor of 100 is an exploding gradient that
# max_grad_norm hides from the update but not from the critic's targets.
GRAD_EXPLOSION = MonitorRule(max=100.0, relative_to="median")

# The default monitors of DQN and SAC: Q-value divergence (the deadly triad: van Hasselt et al. 2018,
# arXiv:1812.02648, find estimates far above any possible return). Learning raises Q smoothly towards
# r_max / (1 - γ) (CartPole DQN preset: 1 → 80 over 50,000 steps, at most 2× its median three iterations running);
# ten times its level of the last `window` iterations is not learning. A slow divergence, which the median follows,
# is not caught: that needs the reward scale.
Q_DIVERGENCE = MonitorRule(min=-10.0, max=10.0, relative_to="median")

# The entropy of a Gaussian policy is a differential entropy: it falls below zero as σ shrinks, which converged
# continuous policies do by design, so a fraction of its start says nothing there.
DISCRETE_ONLY = frozenset({"loss/entropy"})


class MonitorsConfig(StrictModel):
    """Metric monitors: a warning (console and run.log) when a metric stays out of its bounds, and the monitors out
    of bounds on each row in metrics.csv's `monitor/alerts` column. Defaults per algorithm: the `monitors` of its
    class (`rlfoundry.algos`)."""

    enabled: bool = Field(True, description="false: no monitors and no monitor/alerts column.")
    patience: PositiveInt = Field(3, description="Consecutive iterations a metric must be out of bounds before the "
                                                 "warning (and back in bounds before the alert ends).")
    warmup: PositiveInt = Field(5, description="relative_to initial: the first values averaged into the reference; "
                                               "relative_to median: values seen before the bounds apply.")
    window: PositiveInt = Field(50, description="relative_to median: the last values whose median is the reference "
                                                "(a level lasting half as long becomes the new normal).")
    metrics: dict[str, MonitorRule] = Field(
        default_factory=dict,
        description="Per metric key: overrides of its default monitor (e.g. diag/approx_kl: {max: 0.1}, or "
        "loss/entropy: {enabled: false}), or a new monitor with min and/or max on any train/, eval/, loss/, diag/ or "
        "env/ metric.")

    @model_validator(mode="after")
    def _check_keys(self) -> MonitorsConfig:
        for key in self.metrics:
            if not METRIC_KEY.fullmatch(key):
                raise ValueError(f"logging.monitors.metrics.{key}: not a metric key a monitor can watch; allowed: "
                                 "train/..., eval/..., loss/..., diag/... or env/... (timings differ between runs)")
        return self

    def resolve(self, algo: str, defaults: Mapping[str, MonitorRule], known: Iterable[str] = (),
                discrete: bool = True) -> dict[str, MonitorRule]:
        """The monitors of a run of `algo`, by metric key: its `defaults` with the overrides field by field, and the new
        monitors, without those turned off. ValueError naming the key for a monitor without a bound, a lower bound
        above the upper one, or a near miss of a `known` key, any algorithm's default (a misspelt key would watch nothing).

        For continuous actions the DISCRETE_ONLY defaults start turned off (`enabled: true` turns them on); whether a
        config is valid does not depend on the action space, which validation does not know."""
        known = sorted({*known, *defaults})
        rules = {}
        for key in [*defaults, *(key for key in self.metrics if key not in defaults)]:
            where = f"logging.monitors.metrics.{key}"
            base = defaults.get(key)
            if base is None:
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.9)
                if close and close[0] != key:
                    raise ValueError(f"{where}: no such metric (did you mean '{close[0]}'?)")
                base = MonitorRule()
            elif key in DISCRETE_ONLY and not discrete:
                base = base.model_copy(update={"enabled": False})
            override = self.metrics.get(key)
            given = set() if override is None else override.model_fields_set
            if override is not None:
                base = base.model_copy(update={name: getattr(override, name) for name in given})
            if base.min is not None and base.max is not None and base.min > base.max:
                kept = [f"{side} is {algo}'s default" for side in ("min", "max") if side not in given]
                raise ValueError(f"{where}: min {base.min:g} is above max {base.max:g}"
                                 + (f" ({kept[0]})" if kept else ""))
            if base.enabled and base.min is None and base.max is None:
                raise ValueError(f"{where}: sets no bound; give min and/or max (or enabled: false)")
            if base.enabled:
                rules[key] = base
        return rules
