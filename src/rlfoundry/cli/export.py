"""`rlfoundry export RUN --format onnx|torchscript`: the deterministic actor as one file for deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlfoundry.cli.common import fail
from rlfoundry.cli.eval import RUN_HELP, check_checkpoint
from rlfoundry.config.errors import ConfigError

SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}


def export(
    run: Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)],
    format: Annotated[str, typer.Option("--format", help="onnx (onnxruntime and any ONNX runtime) or torchscript "
                                                         "(torch.jit.load, no rlfoundry needed).")] = "onnx",
    out: Annotated[Path | None, typer.Option(help="The file to write (default: policy.onnx / policy.pt in the "
                                                     "current directory).")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="best, last, a step (12288) or a step directory (default: best where "
                                                            "one was saved, else last).")] = None,
) -> None:
    """Write the deterministic actor with the run's observation normalisation folded in (memory cores: the state as
    explicit inputs and outputs)."""
    from rlfoundry.hub import load_policy
    from rlfoundry.trained.export import FORMATS
    from rlfoundry.trained.export import export as write

    try:
        if format not in FORMATS:
            raise ConfigError(f"--format {format}: allowed: {', '.join(FORMATS)}")
        check_checkpoint(checkpoint, run)
        policy = load_policy(run, checkpoint)
        path = out if out is not None else Path(f"policy{SUFFIX[format]}")
        if path.is_dir():
            raise ConfigError(f"--out {path}: a directory; give the file to write")
        signature = write(policy, path, format)
    except ConfigError as exc:
        fail(str(exc), 2)
    except OSError as exc:  # an unwritable place: a fault of the machine, not bad input
        fail(f"cannot write {out}: {exc}", 1)
    shown = ", ".join(f"{name} {signature['shapes'][name]}" for name in signature["inputs"])
    typer.echo(f"exported {policy.cfg.env.id}:{policy.cfg.variant} (step {policy.step:,}) as {format}: {path}")
    typer.echo(f"inputs: {shown}; outputs: {', '.join(signature['outputs'])}")
