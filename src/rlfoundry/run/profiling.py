"""`train.profile` (`rlfoundry train SPEC --profile`): a few iterations recorded with torch.profiler.

    warm-up: WARMUP iterations, and learning under way (the iteration reported a loss)
    record:  at least MIN_ITERATIONS iterations and MIN_SECONDS, at most MAX_ITERATIONS
    write:   <run>/profile.json   a Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev)
             <run>/profile.md     where the time went: env / act / learn / the trainer, and the top ops by self time

The env / act / learn split comes from the iterations' own timers (`time/env`, `time/act`, `time/learn`, which
every agent reports); the rest of the iterations' wall time is the trainer's (evaluation, logging, checkpoints).
The profiler slows the recorded iterations somewhat, the op-heavy learning more than env stepping.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from rlfoundry.records.rundir import write_atomic
from rlfoundry.sinks.files import writing

WARMUP = 2
MIN_ITERATIONS = 3
MIN_SECONDS = 0.25
MAX_ITERATIONS = 200
TOP_OPS = 25
RANGE = "iteration"  # the trace's named range around each iteration (its self time is Python, not ops)
PARTS = (("env", "stepping the envs"), ("act", "the policy choosing actions"),
         ("learn", "losses, backward passes, optimizer steps"))


@contextlib.contextmanager
def _quiet_native_stderr():
    """Kineto writes a `USDT: ... profiler_start` / `profiler_stop` line straight to file descriptor 2 whatever its
    log level: keep those two calls off the user's console."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class IterationProfiler:
    """Drives torch.profiler over a window of the trainer's iterations. The trainer calls `iteration()` around each
    iteration, `after(row)` with its metrics row, and `close()` at the end (a run that ends while recording still
    writes what it recorded)."""

    def __init__(self, run_dir: Path, device: torch.device, title: str, log):
        self.run_dir, self.device, self.title, self.log = Path(run_dir), device, title, log
        self.seen = 0  # iterations so far
        self.rows: list[dict[str, Any]] = []  # the recorded iterations' metrics
        self.profiler: profile | None = None
        self.started = 0.0
        self.first_step: int | None = None
        self.done = False

    def iteration(self):
        """The context around one iteration: a named range in the trace while recording."""
        return record_function(RANGE)

    def after(self, step: int, row: dict[str, Any]) -> None:
        self.seen += 1
        if self.done:
            return
        if self.profiler is None:
            if self.seen >= WARMUP and any(key.startswith("loss/") for key in row):
                self._start(step)
            return
        self.rows.append(row)
        seconds = time.perf_counter() - self.started
        if (len(self.rows) >= MIN_ITERATIONS and seconds >= MIN_SECONDS) or len(self.rows) >= MAX_ITERATIONS:
            self._finish(step)

    def close(self, step: int) -> None:
        """At the run's end: write what was recorded, if the window was still open. A profile that cannot be
        written is logged, never raised: it must not change the run's outcome."""
        if self.done:
            return
        if self.profiler is None:
            self.log.warning("profile: the run ended during the warm-up (%d iterations, learning not yet under way); "
                             "nothing recorded", self.seen)
            return
        try:
            self._finish(step)
        except Exception as exc:
            self.log.warning("profile not written: %s: %s", type(exc).__name__, exc)

    def _start(self, step: int) -> None:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.profiler = profile(activities=activities)
        with _quiet_native_stderr():
            self.profiler.__enter__()
        self.started, self.first_step = time.perf_counter(), step

    def _finish(self, step: int) -> None:
        seconds = time.perf_counter() - self.started
        assert self.profiler is not None, "profile window finished before it started"
        with _quiet_native_stderr():
            self.profiler.__exit__(None, None, None)
        self.done = True
        if not self.rows:
            return
        trace = self.run_dir / "profile.json"
        tmp = self.run_dir / f".profile.json.{os.getpid()}.tmp"
        try:
            with writing(trace):
                self.profiler.export_chrome_trace(str(tmp))
                os.replace(tmp, trace)
        finally:
            tmp.unlink(missing_ok=True)
        write_atomic(self.run_dir / "profile.md", self.markdown(step, seconds))
        self.log.info("profile of %d iterations (steps %d-%d): profile.md, profile.json", len(self.rows),
                      self.first_step, step)

    def split(self, seconds: float) -> list[tuple[str, str, float]]:
        """(part, what it is, seconds) over the recorded iterations; `trainer` is the wall time left over."""
        parts = [(name, what, sum(float(row.get(f"time/{name}") or 0.0) for row in self.rows)) for name, what in PARTS]
        rest = max(seconds - sum(part[2] for part in parts), 0.0)
        return [*parts, ("trainer", "evaluation, logging, checkpoints, the profiler itself", rest)]

    def markdown(self, step: int, seconds: float) -> str:
        device_time = self.device.type == "cuda"
        lines = [
            f"# Profile: {self.title}",
            "",
            f"{len(self.rows)} iterations, steps {self.first_step:,} to {step:,}, {seconds:.2f} s under torch.profiler "
            "(which slows op-heavy parts more than env stepping). Trace: `profile.json` (chrome://tracing or "
            "ui.perfetto.dev).",
            "",
            "## Where the time went",
            "",
            "| part | what | seconds | share |",
            "|---|---|---:|---:|",
        ]
        for name, what, part_seconds in self.split(seconds):
            lines.append(f"| {name} | {what} | {part_seconds:.3f} | {part_seconds / seconds:.0%} |")
        assert self.profiler is not None, "profile written before it was recorded"
        events = sorted((e for e in self.profiler.key_averages() if e.key != RANGE),
                        key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events) or 1.0
        lines += [
            "",
            f"## Top {TOP_OPS} ops by self CPU time",
            "",
            "| op | calls | self CPU ms | self share | CPU total ms |" + (" self device ms |" if device_time else ""),
            "|---|---:|---:|---:|---:|" + ("---:|" if device_time else ""),
        ]
        for event in events[:TOP_OPS]:
            row = (f"| `{event.key}` | {event.count} | {event.self_cpu_time_total / 1e3:.2f} | "
                   f"{event.self_cpu_time_total / total:.1%} | {event.cpu_time_total / 1e3:.2f} |")
            if device_time:
                row += f" {event.self_device_time_total / 1e3:.2f} |"
            lines.append(row)
        return "\n".join(lines) + "\n"
