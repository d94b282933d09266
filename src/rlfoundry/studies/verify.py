"""`rlfoundry runs verify RUN`: is this run reproducible? Train it again and compare its metrics rows.

The "Reproducibility" section of docs/guide/runs.md promises that two CPU runs with the same seed and the same resolved thread count
write the same `metrics.csv` rows apart from the timing columns. This checks a given run against that promise on
this machine: its recorded config is trained again in a temporary run directory with what the run's start
resolved pinned, as a resume keeps it (threads, precision, compilation, vectorization, device), for all of the run
or its first N steps (`stop_at_step`: the schedules still run over the recorded `train.total_timesteps`). The
re-run has a runs root of its own there, so the user's registry never sees it, and the original directory is
only read. A run across processes is re-run with as many processes on this machine.

Evaluation needs nothing special: its envs are seeded apart (train.seed + eval.seed_offset) and greedy actions
draw from no training RNG stream; sampled ones (eval.deterministic=false) do, but the re-run evaluates at the same
steps as the original, so it draws alike.

Where the rows differ, the report names the first step, the columns and both values, and, as the likely causes,
the provenance fields that differ between the original and the re-run: library versions, the git commit, the CPU
and its extensions, threads.
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

import torch

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.sections import Provenance
from rlfoundry.experiment.schema import ExperimentConfig
from rlfoundry.records.rundir import run_status
from rlfoundry.run.launch import train
from rlfoundry.run.restore import run_config, run_named

TIMING = ("wall_time", "sps", "sps_run")  # measured times, plus every `time/*` column: they differ between runs
IGNORED_PROVENANCE = ("created",)


def is_timing(column: str) -> bool:
    return column in TIMING or column.startswith("time/")


@dataclass
class Divergence:
    """The first metrics row where the original and the re-run differ."""

    step: int
    values: list[tuple[str, str, str]]  # (column, the original's value, the re-run's), as written in metrics.csv
    missing: str | None = None  # "original" or "re-run": the side that has no row at `step`


@dataclass
class Verification:
    run_dir: Path
    rows: int  # metrics rows compared (through the divergence, if any)
    first_step: int
    last_step: int  # the step the re-run stopped at
    columns: list[str]  # compared: every non-timing column of either file
    ignored: list[str]  # timing columns
    divergence: Divergence | None
    provenance: list[tuple[str, Any, Any]]  # fields that differ: (name, the original's, the re-run's)
    notes: list[str] = field(default_factory=list)
    rerun_dir: Path | None = None  # the re-run's directory, when kept

    @property
    def reproduced(self) -> bool:
        return self.divergence is None


def verifiable_run(run: str | Path, runs_root: str | Path = "runs") -> Path:
    """The run directory RUN names (`@last`: the most recently active run under `runs_root`), checked to hold a
    config and metrics and to have ended (finished, stopped or failed)."""
    run_dir = run_named(run, runs_root, "metrics.csv", "a metrics.csv")
    if not run_dir.is_dir():
        raise ConfigError(f"{run}: no such run directory")
    for name in ("config.yaml", "metrics.csv"):
        if not (run_dir / name).is_file():
            raise ConfigError(f"{run_dir}: not a run directory with metrics (no {name})")
    if run_status(run_dir) == "running":
        raise ConfigError(f"{run_dir}: the run is still running (summary.json); verify it once it has ended "
                          "(a run killed outright stays marked running: `rlfoundry train --resume` it first)")
    return run_dir


def _finished_at(run_dir: Path) -> int | None:
    """The step a finished run's summary.json says it ended at (None for a run that did not finish)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        return int(summary["total_steps"]) if summary.get("status") == "finished" else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def read_metrics(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """metrics.csv's header and rows, every value as the text written."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = [{key: value or "" for key, value in row.items()} for row in reader]
        header = list(reader.fieldnames or [])
    for number, row in enumerate(rows, start=2):
        if not row.get("global_step", "").isdigit():
            raise ConfigError(f"{path}, line {number}: global_step {row.get('global_step')!r} is not a step count")
    return header, rows


def rerun_config(cfg: ExperimentConfig, runs_root: Path, threads: int | None) -> ExperimentConfig:
    """The run's config with what its start resolved pinned, as a resume keeps it (an explicit value already equals
    it), `threads` instead of its thread count if given, and its files kept in `runs_root`; no W&B run (a re-run is
    a check, not an experiment to log)."""
    started = cfg.provenance
    assert started is not None, "a run to verify has its provenance (see verify)"
    pinned = {"torch_threads": threads or started.torch_threads, "precision": started.precision,
              "compile": started.compile, "cuda_graphs": started.cuda_graphs}
    if cfg.train.device == "auto" and started.device:
        pinned["device"] = torch.device(started.device).type
    train_cfg = cfg.train.model_copy(update={key: value for key, value in pinned.items() if value is not None})
    env = cfg.env
    if env.vectorization == "auto" and started.vectorization:
        env = env.model_copy(update={"vectorization": started.vectorization})
    every = (started.log_every or 0) if cfg.logging.every_steps == "auto" else cfg.logging.every_steps
    logging = cfg.logging.model_copy(update={"runs_root": str(runs_root), "tensorboard": False, "wandb": False,
                                             "every_steps": every})
    return cfg.model_copy(update={"train": train_cfg, "env": env, "logging": logging, "provenance": None})


def compare(original: tuple[list[str], list[dict[str, str]]], rerun: tuple[list[str], list[dict[str, str]]]
            ) -> tuple[list[str], int, Divergence | None]:
    """(the columns compared, the rows compared, the first divergence or None): row by row, every non-timing column
    of either file, exact text equality (an empty cell: no value)."""
    columns = [c for c in dict.fromkeys([*original[0], *rerun[0]]) if not is_timing(c)]
    for count, (before, after) in enumerate(zip_longest(original[1], rerun[1]), start=1):
        if before is None or after is None:
            step = int((before or after)["global_step"])
            return columns, count, Divergence(step, [], missing="original" if before is None else "re-run")
        differ = [(c, before.get(c, ""), after.get(c, "")) for c in columns if before.get(c, "") != after.get(c, "")]
        if differ:
            return columns, count, Divergence(int(before["global_step"]), differ)
    return columns, len(original[1]), None


def provenance_changes(original: Provenance, rerun: Provenance) -> list[tuple[str, Any, Any]]:
    """The provenance fields whose values differ, package versions one by one (`versions.torch`)."""
    before, after = original.model_dump(), rerun.model_dump()
    changes = []
    for name in before:
        if name in IGNORED_PROVENANCE:
            continue
        if name == "versions":
            for package in dict.fromkeys([*before[name], *after[name]]):
                old, new = before[name].get(package), after[name].get(package)
                if old != new:
                    changes.append((f"versions.{package}", old, new))
        elif before[name] != after[name]:
            changes.append((name, before[name], after[name]))
    return changes


def verify(run: str | Path, steps: int | None = None, threads: int | None = None, keep: bool = False,
           runs_root: str | Path = "runs", console=None) -> Verification:
    """Train RUN again (its first `steps` env steps, or all it recorded) and compare the metrics rows.

    `threads`: the re-run's thread count instead of the recorded one (does the run depend on it?). `keep`: keep the
    re-run's directory (`Verification.rerun_dir`). Raises ConfigError for bad input, RunFailed if the re-run fails,
    and KeyboardInterrupt when it is stopped.
    """
    for option, value in (("--steps", steps), ("--threads", threads)):
        if value is not None and value < 1:
            raise ConfigError(f"{option} {value}: must be at least 1")
    run_dir = verifiable_run(run, runs_root)
    cfg = run_config(run_dir)
    if cfg.provenance is None:
        raise ConfigError(f"{run_dir}/config.yaml has no provenance section: it was not written by a run, so what "
                          "the run resolved (threads, precision) is unknown")
    processes = cfg.provenance.processes or 1
    if (cfg.provenance.device or "").startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"{run_dir}: trained on {cfg.provenance.device}, and this machine has no CUDA device")
    header, rows = read_metrics(run_dir / "metrics.csv")
    if not rows:
        raise ConfigError(f"{run_dir}/metrics.csv has no rows: there is nothing to compare")
    recorded = [int(row["global_step"]) for row in rows]
    notes = []
    stop = recorded[-1]
    finished_at = _finished_at(run_dir)
    if steps is None and finished_at is not None and finished_at > stop:  # rows cut off: the re-run shows which
        stop = finished_at
        notes.append(f"metrics.csv ends at step {recorded[-1]:,}, but summary.json says the run finished at "
                     f"{finished_at:,}: its last rows are missing")
    if steps is not None and steps > recorded[-1]:
        notes.append(f"--steps {steps:,}: the run recorded {recorded[-1]:,} steps; all of them are verified")
    elif steps is not None:
        stop = next(step for step in recorded if step >= steps)  # the iteration that reaches N steps
    original = (header, [row for row, step in zip(rows, recorded) if step <= stop])

    scratch = Path(tempfile.mkdtemp(prefix="rlfoundry-verify-"))
    rerun_dir = scratch / run_dir.name
    try:
        _, summary = train(rerun_config(cfg, scratch, threads), run_dir=rerun_dir, console=console,
                           nproc=processes, stop_at_step=stop)
        if summary["status"] == "stopped" and summary["total_steps"] < stop:
            raise KeyboardInterrupt  # stopped by a signal before its last step: nothing to conclude
        rerun = read_metrics(rerun_dir / "metrics.csv")
        rerun_provenance = run_config(rerun_dir).provenance
        assert rerun_provenance is not None, "the re-run wrote its provenance"
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    columns, compared, divergence = compare(original, rerun)
    ignored = [c for c in dict.fromkeys([*original[0], *rerun[0]]) if is_timing(c)]
    if divergence is not None and (cfg.provenance.git_dirty or rerun_provenance.git_dirty):
        notes.append("uncommitted changes in the source tree (git_dirty) at the original or here: the code may "
                     "differ even where the commit is the same")
    return Verification(run_dir=run_dir, rows=compared, first_step=recorded[0], last_step=stop, columns=columns,
                        ignored=ignored, divergence=divergence,
                        provenance=provenance_changes(cfg.provenance, rerun_provenance), notes=notes,
                        rerun_dir=rerun_dir if keep else None)
