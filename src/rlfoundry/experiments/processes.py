"""Training runs as child processes, for the commands that run many (`trials`, `sweep`).

Each run is an ordinary `rlfoundry train` in its own process: a crash, a leak or a torch setting of one run never
reaches another, and each is told how many runs share the machine (`RLFOUNDRY_CONCURRENT_RUNS`) so `auto` threads
give it its share of the cores. A child gets SIGTERM when its parent dies, however it dies (Linux's parent-death
signal), so even a `kill -9` of the command makes its runs checkpoint and stop. A lock file keeps two commands out of
one output directory; the operating system drops it when the command dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from rlfoundry.config.errors import ConfigError
from rlfoundry.run.checkpoint import CheckpointError, resolve
from rlfoundry.run.hardware import SHARE_VARIABLE
from rlfoundry.run.rundir import run_status

LOCK = ".lock"
STOP_GRACE_S = 60.0  # how long stopping runs may take to write their checkpoint before they are killed


@contextlib.contextmanager
def locked(folder: Path, command: str) -> Iterator[None]:
    """One `command` per directory at a time; ConfigError when another holds it."""
    handle = open(folder / LOCK, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"--out {folder}: another {command} command is running in it") from None
        yield
    finally:
        handle.close()


def resumable(run_dir: Path) -> bool:
    try:
        resolve(run_dir, "last")
        return True
    except CheckpointError:
        return False


def last_step(run_dir: Path) -> int:
    """The global_step of the last metrics row (the first column), read from the file's tail; 0 before any."""
    try:
        with open(run_dir / "metrics.csv", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().split(b"\n")[:-1]  # the last piece is empty or a row still being written
        return int(float(lines[-1].split(b",", 1)[0])) if lines else 0
    except (OSError, ValueError, IndexError):
        return 0


def check_options(command: str, backend: str, backends: tuple[str, str], address: str | None,
                  workers: int | None) -> None:
    """The options every command that runs many runs takes; ConfigError naming the bad one."""
    if backend not in backends:
        raise ConfigError(f"--backend {backend}: {command} runs on {' or '.join(backends)}")
    if address and backend != "ray":
        raise ConfigError("--address names a Ray cluster: give it with --backend ray")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: must be at least 1")


def make_out(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create it: {exc.strerror or exc}") from None


def train_command(run_dir: Path, args: list[str]) -> list[str]:
    """`rlfoundry train` for `run_dir`: resume it when it has a checkpoint and did not finish, else start it afresh
    from `args` (SPEC and overrides), removing what a start without a checkpoint left (nothing worth keeping) and
    making the directory it goes in."""
    train = [sys.executable, "-m", "rlfoundry.cli", "train"]
    if resumable(run_dir) and run_status(run_dir) != "finished":
        return [*train, "--resume", str(run_dir)]
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    return [*train, *args, "logging.progress=false", "--run-dir", str(run_dir)]


# Looked up here, in the parent: the child between fork and exec should call a function, not load a library.
_PRCTL = getattr(ctypes.CDLL(None), "prctl", None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent command dies, however it dies (PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def start(command: list[str], log: Path, share: int, cwd: str | None = None,
          own_session: bool = False) -> subprocess.Popen:
    """Start `command` in `cwd` (default: this one; relative paths of the run, such as the runs root of the registry,
    resolve there) with its output appended to `log`, told that `share` runs share the machine; `own_session` keeps
    it out of its parent's process group (a Ray worker's, which Ray kills outright)."""
    env = {**os.environ, SHARE_VARIABLE: str(share), "PYTHONUNBUFFERED": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, preexec_fn=_die_with_parent, start_new_session=own_session)


def error_line(log: Path) -> str:
    """A failed run's own one-line message: the last non-empty line of its console output."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


def stop(processes: list[subprocess.Popen]) -> None:
    """Ask every process still going to checkpoint and stop (SIGTERM), then wait; kill what does not stop in time."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
