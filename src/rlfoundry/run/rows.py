"""The rows a run writes to its sinks: iterations shorter than `logging.every_steps` env steps are merged into one.

An off-policy agent with `train_freq: 1` iterates once per env step; a row per iteration would cost more in
TensorBoard writes than the gradient step itself, and make a million-row metrics.csv. So the trainer hands every
iteration's row to the callbacks (monitors, the user's) but writes one row per `every_steps` env steps, at each
evaluation and at the end. How a merged row reads:

- losses and diagnostics: the mean over the iterations that reported them;
- `time/*` and `train/episodes`: the sums (the env / act / learn split over the row's steps);
- `train/episode_return` and `train/episode_length`: the mean over every episode that ended in the row's steps;
- `sps`: the row's steps over its iterations' time; `wall_time`, `sps_run`, `train/return_mean`, counters such as
  `diag/replay_size` and the evaluation's columns: the latest;
- `monitor/alerts`: every metric alerted in the row's iterations.

A row of one iteration is written as it came. The window's sums are part of the run's progress, so a checkpoint
carries them and a resumed run writes the rows the uninterrupted one would have.
"""

from __future__ import annotations

import math
from typing import Any

from rlfoundry.config.monitors import ALERTS

EPISODES = "train/episodes"
POOLED = ("train/episode_return", "train/episode_length")  # means over episodes: weighted by the episodes
LATEST = ("wall_time", "sps_run", "train/return_mean", "diag/replay_size")
EVALUATED = "eval/return_mean"


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


class RowWindow:
    """The iterations since the last row written, from `step` (the run's start, or the resume's: then `state` is the
    window a checkpoint saved). `add` each iteration's row: it returns the row to write once `every` env steps have
    passed since the last one (0: every iteration), when the row holds an evaluation, or when `final`; else None."""

    def __init__(self, every: int, step: int, state: dict[str, Any] | None = None):
        self.every = every
        self.state: dict[str, Any] = state if state is not None else {}  # changed in place: the progress holds it
        if not self.state:
            self._restart(step)

    def add(self, step: int, row: dict[str, Any], final: bool = False) -> dict[str, Any] | None:
        s = self.state
        self._merge(row, step - s["step"])
        s["step"] = step
        if final or row.get(EVALUATED) is not None or step - s["written"] >= self.every:
            out = self.pending()
            self._restart(step)
            return out
        return None

    def _restart(self, step: int) -> None:
        self.state.clear()
        self.state.update(written=step, step=step, rows=0)

    def pending(self) -> dict[str, Any] | None:
        """The row of the iterations not yet written, or None: one iteration's row as it came, else merged."""
        s = self.state
        return None if not s["rows"] else dict(s["only"]) if s["rows"] == 1 else self._row()

    def _merge(self, row: dict[str, Any], steps: int) -> None:
        s = self.state
        s["rows"] += 1
        if s["rows"] == 1:
            s.update(only=dict(row), sums={}, counts={}, latest={}, alerts=None, episodes=0, pooled={}, seconds=0.0)
        sps, episodes = row.get("sps") or 0.0, row.get(EPISODES) or 0
        if _numeric(sps) and sps > 0:
            s["seconds"] += steps / sps
        s["episodes"] += episodes
        for key, value in row.items():
            if key == ALERTS:
                known = s["alerts"] or []
                s["alerts"] = known + [name for name in str(value or "").split() if name not in known]
            elif key in POOLED:
                if _numeric(value) and episodes:
                    s["pooled"][key] = s["pooled"].get(key, 0.0) + value * episodes
            elif key in LATEST or key.startswith("eval/") or not _numeric(value):
                if value is not None:
                    s["latest"][key] = value
            elif key not in ("sps", EPISODES):
                s["sums"][key] = s["sums"].get(key, 0.0) + value
                s["counts"][key] = s["counts"].get(key, 0) + 1

    def _row(self) -> dict[str, Any]:
        s = self.state
        steps = s["step"] - s["written"]
        row: dict[str, Any] = {"sps": steps / s["seconds"] if s["seconds"] > 0 else None, EPISODES: s["episodes"]}
        row.update({key: s["pooled"][key] / s["episodes"] if key in s["pooled"] else None for key in POOLED})
        row.update({key: total if key.startswith("time/") else total / s["counts"][key]
                    for key, total in s["sums"].items()})
        row.update(s["latest"])
        if s["alerts"] is not None:
            row[ALERTS] = " ".join(s["alerts"])
        return row
