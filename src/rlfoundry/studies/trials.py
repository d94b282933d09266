"""`rlfoundry trials`: every (spec, seed) as an ordinary run, several at a time, continued after any stop.

Each trial is `rlfoundry train SPEC train.seed=S --run-dir OUT/<spec>/s<S>` in its own process (a crash, a leak or a
torch setting of one run never reaches another), `workers` of them at once, each told how many share the machine
(`RLFOUNDRY_CONCURRENT_RUNS`), so `train.torch_threads: auto` gives each its share of the cores. Every run carries
the set's name in `logging.group`, so the registry lists the group (`rlfoundry runs list --group NAME`).

Continuing: the same command with the same `--out` keeps finished runs, resumes stopped, failed or killed ones from
their last checkpoint and starts the rest (a run with no checkpoint yet has nothing to lose and starts again). Runs
are asked to stop with SIGTERM when this command ends or dies (Linux's parent-death signal, so even a `kill -9` of
this command makes them checkpoint and stop), and a lock file keeps two commands out of one `--out` (the process
machinery is `studies.processes`, shared with `rlfoundry sweep`).

With `backend="ray"` the same loop runs each trial as a Ray task on a cluster or a local Ray instance
(`studies.cluster`): the same command lines, run directories, continuation and report.

At the end `studies.results` reads every run directory and writes trials.md, trials.csv and the plots, and on
request the tables for papers (`studies.aggregate`) and the plots as PDF or SVG.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from rlfoundry.config.cores import concurrent_runs, usable_cores
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config
from rlfoundry.records.rundir import run_status, write_atomic
from rlfoundry.studies import processes
from rlfoundry.studies.results import RunResult, read_run, write_report

MANIFEST = "trials.yaml"  # the specs, seeds and overrides of the set: a continuation must match its overrides
POLL_S = 0.5


@dataclass(frozen=True)
class Trial:
    spec: str
    seed: int
    run_dir: Path
    budget: int  # train.total_timesteps


@dataclass
class Running:
    trial: Trial
    process: processes.Handle
    steps: int = 0


@dataclass
class Progress:
    """What the display shows; `steps` counts the env steps of every trial, done and under way."""
    total: int
    done: int = 0
    failed: int = 0
    running: int = 0
    steps: int = 0


def slug(spec: str) -> str:
    """A directory name for a spec: `ALE/Breakout-v5:ppo` -> `ALE-Breakout-v5_ppo`, `exp/my.yaml` -> `my`."""
    name = Path(spec).stem if spec.endswith((".yaml", ".yml")) else spec
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name.replace("/", "-").replace(":", "_")).strip("_") or "spec"


def default_out(specs: list[str], overrides: list[str]) -> Path:
    """runs/trials/<time>_<first spec>[+N more], under the runs root the overrides name."""
    cfg = load_config(specs[0], overrides)
    more = f"+{len(specs) - 1}" if len(specs) > 1 else ""
    return Path(cfg.logging.runs_root) / "trials" / f"{datetime.now():%Y%m%d-%H%M%S}_{slug(specs[0])}{more}"


def parse_seeds(text: str) -> list[int]:
    """`--seed 1,2,3` or `--seeds 5` (= 1..5): the seeds as a list, bad input a ConfigError."""
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"seeds {text!r}: expected a count (e.g. 5) or a comma-separated list (e.g. 1,2,3)") from None
    if len(seeds) == 1:
        if seeds[0] < 1:
            raise ConfigError(f"seeds {text!r}: the count must be at least 1")
        return list(range(1, seeds[0] + 1))
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds {text!r}: a seed is listed twice")
    return seeds


def plan(specs: list[str], seeds: list[int], overrides: list[str], out: Path) -> list[Trial]:
    """Every (spec, seed) with its run directory; every spec's config is loaded first, so a bad spec or override is
    reported before anything starts (ConfigError)."""
    if not specs:
        raise ConfigError("trials: give at least one SPEC")
    if len(set(specs)) != len(specs):
        raise ConfigError("trials: a SPEC is listed twice")
    names = [slug(spec) for spec in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"trials: two SPECs share the directory name {names!r}; rename one experiment file")
    for key in ("train.seed", "logging.group"):
        if any(item.partition("=")[0].strip() == key for item in overrides):
            raise ConfigError(f"trials: {key} is set by trials itself; leave it out of the overrides")
    trials = []
    from rlfoundry.algos.registry import check_actions

    for spec, name in zip(specs, names):
        cfg = load_config(spec, overrides)
        try:
            check_actions(cfg)  # a spec whose agent cannot be built stops the set before any run
        except ConfigError as exc:
            raise ConfigError(f"{spec}: {exc}") from None
        trials += [Trial(spec, seed, out / name / f"s{seed}", cfg.train.total_timesteps) for seed in seeds]
    return trials


def _merge_manifest(out: Path, specs: list[str], seeds: list[int], overrides: list[str]) -> None:
    """Record the set in out/trials.yaml. A continuation may add specs and seeds, but its overrides must be the
    ones the existing runs were made with."""
    path = out / MANIFEST
    if path.exists():
        try:
            known = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: unreadable ({exc}); is {out} a trials directory?") from None
        if list(known.get("overrides") or []) != list(overrides):
            raise ConfigError(f"--out {out}: its runs were made with the overrides {known.get('overrides') or []}, "
                              f"not {overrides}; continue with the same ones or choose another --out")
        specs = list(dict.fromkeys([*(known.get("specs") or []), *specs]))
        seeds = sorted({*(known.get("seeds") or []), *seeds})
    write_atomic(path, yaml.safe_dump({"specs": specs, "seeds": seeds, "overrides": list(overrides)}, sort_keys=False))


def _log(trial: Trial, logs: Path) -> Path:
    return logs / f"{trial.run_dir.parent.name}_s{trial.seed}.log"


def _result(trial: Trial, logs: Path) -> RunResult:
    """The trial's run; one that left no run directory but a console output was refused as bad input (the trainer
    writes nothing then: an agent that cannot take the env, a `train.init` that does not fit): `refused`, with the
    error from that output. The spec's directory, made for it and left empty, goes too."""
    result, log = read_run(trial.run_dir, trial.spec, trial.seed), _log(trial, logs)
    if result.status == "missing" and not trial.run_dir.exists() and log.is_file():
        result.status, result.error = "refused", processes.error_line(log)
        with contextlib.suppress(OSError):  # only while empty: another seed's run may be there
            trial.run_dir.parent.rmdir()
    return result


def _start(trial: Trial, overrides: list[str], group: str, logs: Path, share: int, launch) -> Running:
    log = _log(trial, logs)
    args = [trial.spec, *overrides, f"train.seed={trial.seed}", f"logging.group={group}"]
    return Running(trial, launch(processes.train_command(trial.run_dir, args), log, share))


def run_trials(specs: list[str], seeds: list[int], overrides: list[str], out: Path, workers: int | None = None,
               show=None, backend: str = "local", address: str | None = None, tables: Sequence[str] = (),
               figures: Sequence[str] = ("png",)) -> list[RunResult]:
    """Run (or continue) the set in `out` with `workers` processes at once (default: the usable cores; on Ray, the
    cluster's CPUs), here or on a Ray cluster (`backend` "ray", at `address` or a local instance), calling
    `show(progress)` as it goes; returns every run's result after writing the report, with the tables for papers
    in the `tables` formats (csv, markdown, latex) and the plots in the `figures` formats (png, pdf, svg). On a set
    that has finished, it only writes the report again. ConfigError for bad input, before anything is created."""
    processes.check_options("trials", backend, ("local", "ray"), address, workers)
    if backend == "ray":
        from rlfoundry.studies.cluster import require_ray

        require_ray()
    trials = plan(specs, seeds, overrides, out)
    processes.make_out(out)
    with processes.locked(out, "trials"):
        _merge_manifest(out, specs, seeds, overrides)
        if backend == "ray":
            from rlfoundry.studies import cluster

            with cluster.connected(address, workers, out) as cpus:
                _run_all(trials, overrides, out, cpus, show, cluster.start)
        else:
            _run_all(trials, overrides, out, workers or usable_cores(), show, processes.start)
        results = [_result(trial, out / "logs") for trial in trials]
        write_report(out, results, title=f"trials {out.name}", tables=tables, figures=figures)
    return results


def _run_all(trials: list[Trial], overrides: list[str], out: Path, workers: int, show, launch) -> None:
    """Run the trials not finished yet, `workers` at once, each started by `launch` (`processes.start` or
    `cluster.start`)."""
    logs = out / "logs"
    pending = [trial for trial in trials if run_status(trial.run_dir) != "finished"]
    progress = Progress(total=sum(trial.budget for trial in trials), done=len(trials) - len(pending))
    finished_steps = sum(trial.budget for trial in trials if trial not in pending)
    # Runs at once, times whatever share of the machine this command itself was given (it may be one of several).
    share = max(1, min(workers, len(pending))) * concurrent_runs()
    running: list[Running] = []
    try:
        while pending or running:
            while pending and len(running) < workers:
                running.append(_start(pending.pop(0), overrides, out.name, logs, share, launch))
            processes.pause([run.process for run in running], POLL_S)
            for run in list(running):
                code = run.process.poll()
                run.steps = processes.last_step(run.trial.run_dir)
                if code is None:
                    continue
                running.remove(run)
                if code == 0 and run_status(run.trial.run_dir) == "finished":
                    progress.done += 1
                    finished_steps += run.trial.budget
                else:
                    progress.failed += 1
                    progress.total -= run.trial.budget - run.steps  # steps it will not take in this command
                    finished_steps += run.steps
            progress.running = len(running)
            progress.steps = finished_steps + sum(run.steps for run in running)
            if show is not None:
                show(progress)
    finally:
        processes.stop([run.process for run in running])

