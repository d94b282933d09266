"""The console: a rich progress bar with ETA and a compact metrics table with a trend beside each metric, or plain
lines off a terminal. A metric a monitor has alerted on (`rlfoundry.run.monitors`) shows in yellow."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Mapping

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rlfoundry.config.monitors import ALERTS

SHOWN = (
    ("train return", "train/return_mean"),
    ("eval return", "eval/return_mean"),
    ("best eval", "eval/best_return"),
    ("policy loss", "loss/policy"),
    ("value loss", "loss/value"),
    ("entropy", "loss/entropy"),
    ("approx kl", "diag/approx_kl"),
)


TREND = 10  # iterations a sparkline shows
BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Iterable[float | None], width: int = TREND) -> str:
    """The last `width` values as block characters, lowest ▁ to highest █, scaled to their own range: the trend, not
    the level, which the number beside it gives. A missing or non-finite value is a space; a flat series is ▄."""
    recent = list(values)[-width:] if width > 0 else []
    finite = [v for v in recent if v is not None and math.isfinite(v)]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    flat = high - low <= 1e-9 * max(abs(low), abs(high))
    top = len(BLOCKS) - 1
    return "".join(" " if v is None or not math.isfinite(v) else BLOCKS[top // 2] if flat
                   else BLOCKS[round((v - low) / (high - low) * top)] for v in recent)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class ConsoleSink:
    def __init__(self, console: Console, title: str, total_steps: int, live: bool):
        self.console = console
        self.total = total_steps
        self.latest: dict[str, float | str] = {}
        self.history: dict[str, deque[float]] = {key: deque(maxlen=TREND) for _, key in SHOWN}
        self.alerts: set[str] = set()
        self.live = None
        self.last_line = 0.0
        self.title = title
        if live and console.is_terminal:
            self.progress = Progress(
                TextColumn(f"[bold]{title}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps · {task.fields[sps]} steps/s"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.progress.add_task("train", total=total_steps, sps="-")
            self.live = Live(Group(self.progress, self._table()), console=console, refresh_per_second=4)
            self.live.start()

    def _table(self) -> Table:
        table = Table(show_header=False, box=None, padding=(0, 2))
        row = []
        for label, key in SHOWN:
            value = _fmt(self.latest.get(key))
            if key in self.alerts:
                value = f"[yellow]{value}[/]"
            row.append(f"[dim]{label}[/] {value} [cyan]{sparkline(self.history[key])}[/]")
        table.add_row(*row[:4])
        table.add_row(*row[4:])
        return table

    def write(self, step: int, metrics: Mapping[str, float | str | None]) -> None:
        self.latest.update({k: v for k, v in metrics.items() if v is not None})
        for key, history in self.history.items():
            value = metrics.get(key)
            if isinstance(value, (int, float)):
                history.append(value)
        alerts = metrics.get(ALERTS, "")
        assert isinstance(alerts, str)  # the monitors' column: the names of the metrics out of bounds
        self.alerts = set(alerts.split())
        if self.live is not None:
            self.progress.update(self.task, completed=min(step, self.total), sps=f"{metrics.get('sps_run', 0):,.0f}")
            self.live.update(Group(self.progress, self._table()))
        elif "eval/return_mean" in metrics or time.monotonic() - self.last_line > 30:
            self.last_line = time.monotonic()
            parts = [f"{label} {_fmt(self.latest.get(key))}" for label, key in SHOWN[:3]]
            # one trend only, the train return's: a line a log file keeps should stay short
            parts[0] = f"{parts[0]} {sparkline(self.history[SHOWN[0][1]])}".rstrip()
            self.console.print(f"{self.title} {step:,}/{self.total:,} steps · {' · '.join(parts)}", highlight=False)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
