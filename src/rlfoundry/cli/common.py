"""What every command shares: its consoles, and how it ends on bad input (one `error:` line, exit 2)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from rlfoundry.config.errors import ConfigError

# `--address` of the commands that run many runs (`trials`, `sweep`)
Address = Annotated[str | None, typer.Option(help="The Ray cluster to join (HOST:PORT); without it --backend ray "
                                                     "starts a local instance.")]


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


@contextlib.contextmanager
def running_many(bar, out_dir: Path) -> Iterator[None]:
    """How a command that runs many runs (`trials`, `sweep`) ends: bad input exits 2; Ctrl-C or SIGTERM, after the
    runs saved their checkpoints, says how to continue and exits 130; the progress bar stops either way."""
    from rlfoundry.studies.processes import sigterm_interrupts

    try:
        with sigterm_interrupts():
            yield
    except ConfigError as exc:
        bar.stop()
        fail(str(exc))
    except KeyboardInterrupt:
        bar.stop()
        err().print(f"[yellow]stopped[/]; the runs saved checkpoints: run the same command with --out {out_dir} "
                    "to continue", highlight=False)
        raise typer.Exit(130) from None
    finally:
        bar.stop()
