"""The console: a rich progress bar with ETA and a compact metrics table, or plain lines off a terminal."""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

SHOWN = (
    ("train return", "train/return_mean"),
    ("eval return", "eval/return_mean"),
    ("best eval", "eval/best_return"),
    ("policy loss", "loss/policy"),
    ("value loss", "loss/value"),
    ("entropy", "loss/entropy"),
    ("approx kl", "diag/approx_kl"),
)


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
        self.latest: dict[str, float] = {}
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
            row.append(f"[dim]{label}[/] {_fmt(self.latest.get(key))}")
        table.add_row(*row[:4])
        table.add_row(*row[4:])
        return table

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self.latest.update({k: v for k, v in metrics.items() if v is not None})
        if self.live is not None:
            self.progress.update(self.task, completed=min(step, self.total), sps=f"{metrics.get('sps_run', 0):,.0f}")
            self.live.update(Group(self.progress, self._table()))
        elif "eval/return_mean" in metrics or time.monotonic() - self.last_line > 30:
            self.last_line = time.monotonic()
            shown = " · ".join(f"{label} {_fmt(self.latest.get(key))}" for label, key in SHOWN[:3])
            self.console.print(f"{self.title} {step:,}/{self.total:,} steps · {shown}", highlight=False)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
