"""What every command shares: its consoles, and how it ends on bad input (one `error:` line, exit 2)."""

from __future__ import annotations

import os
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape


def out() -> Console:
    """Standard output. Made per call so that the terminal width (COLUMNS) and the streams are this invocation's.
    Piped output (a file, `less`, a log) gets room for whole tables instead of rich's 80 columns."""
    console = Console(soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(soft_wrap=True, width=240)
    return console


def err() -> Console:
    """Standard error: messages, warnings and the training progress bar."""
    return Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` and end the command: exit 2 for bad input, 1 for a failure at run time."""
    err().print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def warn(message: str) -> None:
    err().print(f"[yellow]warning:[/] {escape(message)}", highlight=False)
