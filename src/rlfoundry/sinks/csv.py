"""metrics.csv: one row per iteration; a key seen for the first time widens the header."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from rlfoundry.sinks.files import writing

# Always present, so every run's file has the same leading columns.
LEADING = ("global_step", "wall_time", "sps", "train/episode_return", "train/episode_length", "train/episodes",
           "eval/return_mean", "eval/return_std", "eval/length_mean")


class CSVSink:
    def __init__(self, path: Path, resume_step: int | None = None):
        """`resume_step`: continue a resumed run, keeping the rows up to that step and dropping the rest
        (rows written after the checkpoint by the run that was stopped or killed)."""
        self.path = Path(path)
        self.columns: list[str] = list(LEADING)
        self.rows: list[dict[str, float | str | None]] = []
        self.handle: TextIO | None = None
        if resume_step is not None and self.path.exists():
            with self.path.open(newline="") as f:
                reader = csv.DictReader(f)
                self.columns = list(reader.fieldnames or LEADING)
                self.rows = [row for row in reader if int(row["global_step"]) <= resume_step]

    def _format(self, value: float | str | None) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def _rewrite(self) -> None:
        if self.handle is not None:
            self.handle.close()
        self.handle = open(self.path, "w", newline="")  # kept open for the whole run
        self.writer = csv.writer(self.handle)
        self.writer.writerow(self.columns)
        for row in self.rows:
            self.writer.writerow([self._format(row.get(c)) for c in self.columns])

    def write(self, step: int, metrics: Mapping[str, float | str | None]) -> None:
        row: dict[str, float | str | None] = {"global_step": step, **metrics}
        self.rows.append(row)
        new = [key for key in row if key not in self.columns]
        with writing(self.path):
            if new or self.handle is None:
                self.columns += sorted(new)
                self._rewrite()
            else:
                self.writer.writerow([self._format(row.get(c)) for c in self.columns])
            assert self.handle is not None  # opened by _rewrite on the first write
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
