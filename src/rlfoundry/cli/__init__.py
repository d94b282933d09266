"""The `rlfoundry` command: one module per verb, each parsing its options and printing its results.

What a verb computes lives below the CLI (`rlfoundry.run`, `rlfoundry.bench`, `rlfoundry.experiment`), so the same
work is reachable from Python; `rlfoundry.cli.common` holds the consoles and the one way a command fails.
"""

from __future__ import annotations

import gc
import sys
import warnings

import typer

from rlfoundry.cli.algos import algos
from rlfoundry.cli.bench import bench_app
from rlfoundry.cli.eval import evaluate_run
from rlfoundry.cli.export import export
from rlfoundry.cli.inspect import inspect
from rlfoundry.cli.play import play
from rlfoundry.cli.presets import presets
from rlfoundry.cli.publish import publish
from rlfoundry.cli.report import report
from rlfoundry.cli.runs import runs_app
from rlfoundry.cli.sweep import sweep
from rlfoundry.cli.train import train
from rlfoundry.cli.trials import trials
from rlfoundry.cli.wandb_dashboard import wandb_dashboard

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="rlfoundry: deep reinforcement learning from one config.",
)
app.command(context_settings={"allow_extra_args": False})(train)
app.command()(presets)
app.command("algos")(algos)
app.command("trials")(trials)
app.command("sweep")(sweep)
app.command("eval", help="Evaluate a run's checkpoint: mean ± std return, optionally mp4 videos.")(evaluate_run)
app.command("play", help="Play a trained policy: in a window, into mp4s, or as text.")(play)
app.command("inspect", help="Serve a web page that steps through episodes of a trained policy.")(inspect)
app.command("export", help="Write a trained policy's deterministic actor as ONNX or TorchScript.")(export)
app.command("publish", help="Publish a trained policy to the Hugging Face Hub (--dry-run: the folder only).")(publish)
app.command("report", help="Regenerate a run's report.md and curves.png.")(report)
app.command("wandb-dashboard")(wandb_dashboard)
app.add_typer(runs_app, name="runs")
app.add_typer(bench_app, name="bench")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """rlfoundry's own warnings (a plugin left out) as one `warning:` line; the others as Python prints them."""
    from rlfoundry.algos.registry import PluginWarning

    if issubclass(category, PluginWarning):
        from rlfoundry.cli.common import warn

        warn(str(message))
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


def main() -> None:
    warnings.showwarning = _show_warning
    try:
        app(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        # The command is done and has closed what it wrote. The interpreter's last garbage collection would walk
        # every object torch and its friends left (about a second after a training run, more on a busy machine):
        # freezing them skips that walk; reference counting still frees, and atexit handlers still run.
        gc.freeze()
