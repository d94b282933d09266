"""Metric monitors: one warning when a metric stays out of its bounds, and a mark on the rows where it is.

    per iteration, for each monitor whose metric the row reports (a finite value):
        bounds  = (min, max), or factors of a reference: |mean of the first `warmup` values| (initial) or
                  |median of the last `window` values| (median); none until the reference is known
        out of bounds `patience` reports in a row → the alert starts: one warning line, console and run.log
        in bounds `patience` reports in a row   → it ends: one line in run.log; a new excursion warns again
    row["monitor/alerts"] = the alerted metrics out of bounds on this row, space-separated ("" when none)

The default bounds and their sources are each algorithm's `monitors` (its class); the settings `logging.monitors`.
A report missing from a row (DQN before learning starts, eval/ between evaluations) or NaN (explained variance of
constant returns) leaves a monitor as it was. The state is part of the checkpoint, so a resumed run alerts on
the same rows as the run never stopped.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

from rlfoundry.algos.registry import algorithm, known_monitor_keys
from rlfoundry.config.monitors import ALERTS, MonitorRule, MonitorsConfig

__all__ = ["ALERTS", "Monitor", "Monitors"]


def _iterations(count: int) -> str:
    return f"{count} iteration" + ("s" if count != 1 else "")


class Monitor:
    """One metric against its bounds, with the counts that turn a run of out-of-bounds reports into one alert."""

    def __init__(self, key: str, rule: MonitorRule, patience: int, warmup: int, window: int):
        self.key, self.rule = key, rule
        self.patience = rule.patience or patience
        self.warmup = warmup
        self.early: list[float] = []  # relative_to initial: the first `warmup` values
        self.recent: deque[float] = deque(maxlen=window)  # relative_to median
        self.streak = 0  # reports in a row on the other side of the alert: out of bounds while off, in while on
        self.alerted = False
        self.reports = 0
        self.judged: tuple[float | None, float | None, float | None] = (None, None, None)  # low, high, reference

    def reference(self) -> float | None:
        """The magnitude the factors of a relative bound multiply; None while it is not known yet (and for absolute
        bounds)."""
        if self.rule.relative_to == "initial" and len(self.early) >= self.warmup:
            return abs(math.fsum(self.early) / len(self.early))
        if self.rule.relative_to == "median" and len(self.recent) >= self.warmup:
            return abs(statistics.median(self.recent))
        return None

    def bounds(self, ref: float | None) -> tuple[float | None, float | None]:
        """(lower, upper) for the next value, given its reference; (None, None) while a relative one is being learnt."""
        if self.rule.relative_to == "none":
            return self.rule.min, self.rule.max
        if ref is None:
            return None, None
        return (None if self.rule.min is None else self.rule.min * ref,
                None if self.rule.max is None else self.rule.max * ref)

    def observe(self, value: float) -> tuple[bool, str | None]:
        """Judge one reported value: (out of bounds, "started" / "ended" when the alert did, else None)."""
        ref = self.reference()
        low, high = self.bounds(ref)
        self.judged = (low, high, ref)
        outside = (low is not None and value < low) or (high is not None and value > high)
        self.reports += 1
        if math.isfinite(value):  # an infinite value is out of any finite bound, and no reference
            if self.rule.relative_to == "initial" and len(self.early) < self.warmup:
                self.early.append(value)
            if self.rule.relative_to == "median":  # it follows a lasting change of level: an excursion ends
                self.recent.append(value)
        self.streak = self.streak + 1 if outside != self.alerted else 0
        if self.streak < self.patience:
            return outside, None
        self.alerted, self.streak = not self.alerted, 0
        return outside, "started" if self.alerted else "ended"

    def describe(self, value: float) -> str:
        """The warning on the value just observed: the metric, its value, the bound it crossed (and where a relative
        bound comes from)."""
        low, high, ref = self.judged
        side, bound, factor = ("below", low, self.rule.min) if low is not None and value < low else \
            ("above", high, self.rule.max)
        source = {"initial": "its initial", "median": "its recent median"}.get(self.rule.relative_to)
        origin = f" ({factor:g} × {source} {ref:.3g})" if source else ""
        return f"{self.key} = {value:.4g} {side} {bound:.4g}{origin} for {_iterations(self.patience)}"

    def state_dict(self) -> dict[str, Any]:
        return {"early": list(self.early), "recent": list(self.recent), "streak": self.streak, "alerted": self.alerted,
                "reports": self.reports}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.early = list(state["early"])
        self.recent.clear()
        self.recent.extend(state["recent"])
        self.streak, self.alerted, self.reports = int(state["streak"]), bool(state["alerted"]), int(state["reports"])


class Monitors:
    """The monitors of one run. `observe(step, row)` judges a row and returns its `monitor/alerts` cell and the lines
    to report: (level, text), "warning" for an alert that starts, "info" for one that ends."""

    def __init__(self, config: MonitorsConfig, algo: str, discrete: bool):
        rules = config.resolve(algo, algorithm(algo).monitors, known_monitor_keys(), discrete)
        self.monitors = {key: Monitor(key, rule, config.patience, config.warmup, config.window)
                         for key, rule in rules.items()}

    def observe(self, step: int, row: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
        marked, lines = [], []
        for key, monitor in self.monitors.items():
            value = row.get(key)
            if not isinstance(value, (int, float)) or math.isnan(value):
                continue
            outside, change = monitor.observe(float(value))
            if change == "started":
                lines.append(("warning", f"monitor: {monitor.describe(value)} (step {step:,})"))
            elif change == "ended":
                lines.append(("info", f"monitor: {key} back within bounds for {_iterations(monitor.patience)} "
                                       f"(step {step:,})"))
            if outside and monitor.alerted:
                marked.append(key)
        return " ".join(marked), lines

    def never_seen(self) -> list[str]:
        """The monitored metrics no row has reported yet (a key this algorithm does not log watches nothing)."""
        return [key for key, monitor in self.monitors.items() if not monitor.reports]

    def state_dict(self) -> dict[str, Any]:
        return {key: monitor.state_dict() for key, monitor in self.monitors.items()}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """A checkpoint's monitors; one from before monitors existed (None), or a monitor it lacks, starts afresh."""
        for key, saved in (state or {}).items():
            if key in self.monitors:
                self.monitors[key].load_state_dict(saved)
