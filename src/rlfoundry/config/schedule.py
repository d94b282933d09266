"""Hyperparameter schedules: structured objects, with the `lin_<start>` shorthand accepted at load time.

A schedule maps training progress (the fraction of `total_timesteps` done, 0 → 1) to a value.
No code is ever evaluated from a config string: `lin_3e-4` is parsed as a number after a fixed prefix.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_serializer, model_validator


class Schedule(BaseModel):
    """`constant` keeps `start`; `linear` goes from `start` at progress 0 to `end` at progress 1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["constant", "linear"] = "constant"
    start: float
    end: float = 0.0

    @model_validator(mode="before")
    @classmethod
    def _parse_shorthand(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected a number, 'lin_<start>' or {kind, start, end}")
        if isinstance(value, (int, float)):
            return {"kind": "constant", "start": float(value)}
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("lin_"):
                number = text[len("lin_"):]
                try:
                    return {"kind": "linear", "start": float(number), "end": 0.0}
                except ValueError:
                    raise ValueError(f"'lin_' must be followed by a number, got {value!r}") from None
            try:
                return {"kind": "constant", "start": float(text)}
            except ValueError:
                raise ValueError(
                    f"expected a number, 'lin_<start>' or {{kind, start, end}}, got {value!r}"
                ) from None
        return value

    @model_validator(mode="after")
    def _finite(self) -> Schedule:
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValueError("schedule values must be finite numbers")
        return self

    @property
    def values(self) -> tuple[float, ...]:
        """The values the schedule takes at its ends (its extremes: schedules are monotone)."""
        return (self.start,) if self.kind == "constant" else (self.start, self.end)

    def __call__(self, progress: float) -> float:
        if self.kind == "constant":
            return self.start
        progress = min(max(progress, 0.0), 1.0)
        return self.start + (self.end - self.start) * progress

    @model_serializer
    def _serialize(self) -> Any:
        # Written back in the shortest form that parses to the same schedule.
        if self.kind == "constant":
            return self.start
        if self.end == 0.0:
            return f"lin_{self.start!r}"
        return {"kind": self.kind, "start": self.start, "end": self.end}
