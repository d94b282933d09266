"""`rlfoundry report RUN_DIR`: regenerate a run's report.md and curves.png from its files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlfoundry.cli.common import fail
from rlfoundry.config.errors import ConfigError


def report(
    run_dir: Annotated[str, typer.Argument(help="A run directory (holding summary.json, metrics.csv, config.yaml).")],
) -> None:
    """Write report.md and curves.png for a run directory again (after an interrupted run, or a newer rlfoundry)."""
    from rlfoundry.records.report import write_report  # matplotlib is imported only when a report is drawn

    try:
        paths = write_report(Path(run_dir))
    except ConfigError as exc:
        fail(str(exc))
    except OSError as exc:  # e.g. a read-only run directory: not bad input, so the run-time exit code
        fail(f"cannot write the report in {run_dir}: {exc}", code=1)
    for path in paths:
        typer.echo(str(path))
