"""Training runs as child processes, for the commands that run many (`trials`, `sweep`).

Each run is an ordinary `rlfoundry train` in its own process: a crash, a leak or a torch setting of one run never
reaches another, and each is told how many runs share the machine (`RLFOUNDRY_CONCURRENT_RUNS`) so `auto` threads
give it its share of the cores. A child gets SIGTERM when its parent dies, however it dies (Linux's parent-death
signal), so even a `kill -9` of the command makes its runs checkpoint and stop. A lock file keeps two commands out of
one output directory; the operating system drops it when the command dies.

Where the platform has it, the runs are forked from a server process that imported what every run imports once
(multiprocessing's forkserver: torch, torch._dynamo, gymnasium, matplotlib and rlfoundry, about 3 s per run on a
2-core EPYC) and has run no torch operation, so no thread pool is copied into the fork. A forked run is still a
fresh process: it gets this process's environment and directory at its start and its own console log; it is the
server's child, not this process's, so instead of the parent-death signal it watches the pipe multiprocessing keeps
open to this process and sends itself SIGTERM when that closes.

`run.checkpoint` is imported only for a run directory that has checkpoints: it brings torch, which a command (or a
Ray trial's actor) that starts new runs never needs itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import multiprocessing
import multiprocessing.connection
import os
import runpy
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, cast

from rlfoundry.config.cores import SHARE_VARIABLE
from rlfoundry.config.errors import ConfigError
from rlfoundry.records.rundir import held, run_status

STOP_GRACE_S = 60.0  # how long stopping runs may take to write their checkpoint before they are killed


def locked(folder: Path, command: str) -> contextlib.AbstractContextManager[None]:
    """One `command` per directory at a time; ConfigError when another holds it."""
    return held(folder, f"--out {folder}: another {command} command is running in it")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside, SIGTERM (a scheduler's, `timeout`'s, `kill`'s) interrupts the command as Ctrl-C does: its run loop's
    `finally` asks the runs to checkpoint and waits for them, so the command ends after its runs have stopped rather
    than leaving them to finish on their own. For a command's main thread; the handler before is restored after."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Handle(Protocol):
    """A started run as the run loops see it: the part of subprocess.Popen's interface they use (a Popen, a
    ForkedRun, or a run on a Ray cluster)."""

    def poll(self) -> int | None: ...

    def send_signal(self, signal: int) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...

    def terminate(self) -> None: ...


def resumable(run_dir: Path) -> bool:
    if not (run_dir / "checkpoints").is_dir():
        return False
    from rlfoundry.run.checkpoint import CheckpointError, resolve

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
    """The `rlfoundry` arguments that train `run_dir`: resume it when it has a checkpoint and did not finish, else
    start it afresh from `args` (SPEC and overrides), removing what a start without a checkpoint left (nothing worth
    keeping) and making the directory it goes in."""
    if resumable(run_dir) and run_status(run_dir) != "finished":
        return ["train", "--resume", str(run_dir)]
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    return ["train", *args, "logging.progress=false", "--run-dir", str(run_dir)]


# Looked up here, in the parent: the child between fork and exec should call a function, not load a library.
_PRCTL = getattr(ctypes.CDLL(None), "prctl", None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent command dies, however it dies (PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def start(command: list[str], log: Path, share: int, cwd: str | None = None,
          own_session: bool = False) -> Handle:
    """Start `rlfoundry <command>` in `cwd` (default: this one; relative paths of the run, such as the runs root of
    the registry, resolve there) with its output appended to `log`, told that `share` runs share the machine;
    `own_session` keeps it out of its parent's process group (a Ray worker's, which Ray kills outright). Returns a
    handle with Popen's poll, send_signal, wait and kill."""
    env = {**os.environ, SHARE_VARIABLE: str(share), "PYTHONUNBUFFERED": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    server = _forkserver()
    if server is not None:
        process = server.Process(target=_run_forked, args=(command, str(log), env, cwd, own_session),
                                 name=f"rlfoundry {command[0]}")
        process.start()
        return ForkedRun(process)
    with open(log, "ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "rlfoundry.cli", *command], stdout=sink,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                preexec_fn=_die_with_parent, start_new_session=own_session)


# What every training run imports (rlfoundry.run.launch brings torch, gymnasium and the agents; the first optimizer
# step imports torch._dynamo; the report draws with matplotlib's Agg canvas). "__main__" spares each fork re-running
# the command's own script.
PRELOAD = ["__main__", "rlfoundry.cli", "rlfoundry.run.launch", "torch._dynamo", "torch.utils.tensorboard",
           "matplotlib.figure", "matplotlib.backends.backend_agg"]


def _forkserver():
    """multiprocessing's forkserver context with PRELOAD, or None where the platform has none or the command's main
    script cannot be found again (`python -`). As with any multiprocessing start but fork, a script that starts runs
    is imported once more (as `__mp_main__`, by the server), so its own work belongs under `if __name__ ==
    "__main__"`."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main is not None and not os.path.isfile(main):
        return None
    return _preloading_context()


@functools.cache
def _preloading_context():
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _run_forked(command: list[str], log: str, env: dict[str, str], cwd: str | None, own_session: bool) -> None:
    """In the forked run: what `start` gives a new process (session, a stop when the command that started it dies,
    directory, environment, console to `log`), then the command line."""
    if own_session:
        os.setsid()
    parent = multiprocessing.parent_process()
    assert parent is not None, "a forked run has the process that started it"
    threading.Thread(target=_stop_when_closed, args=(parent.sentinel,), daemon=True,
                     name="watch-launcher").start()
    if cwd is not None:
        os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sink = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        os.dup2(sink, stream.fileno())
        # typeshed's sys.stdout is a TextIO, without the reconfigure of the TextIOWrapper the streams are
        cast(io.TextIOWrapper, stream).reconfigure(line_buffering=True)
    os.close(sink)
    sys.argv = ["rlfoundry", *command]
    # `python -m rlfoundry.cli`, as the plain start runs it; it exits with the command's code, the process's.
    runpy.run_module("rlfoundry.cli", run_name="__main__", alter_sys=True)


def _stop_when_closed(sentinel: int) -> None:
    """In the forked run: SIGTERM to itself once the process that started it is gone, however it went."""
    multiprocessing.connection.wait([sentinel])
    os.kill(os.getpid(), signal.SIGTERM)


class ForkedRun:
    """A run started by `start` in a forked process, with the part of subprocess.Popen's interface the run loops
    use."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self.process = process

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def send_signal(self, signal: int) -> None:
        if self.process.exitcode is None:
            assert self.process.pid is not None, "a ForkedRun's process is started"
            os.kill(self.process.pid, signal)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"rlfoundry (pid {self.process.pid})", timeout or 0.0)
        return self.process.exitcode


def pause(handles: list[Handle], seconds: float) -> None:
    """Sleep `seconds`, or less: until one of the runs behind `handles` (from `start`) ends, where they are forked
    runs whose ends can be waited on together."""
    sentinels = [handle.process.sentinel for handle in handles if isinstance(handle, ForkedRun)]
    if sentinels and len(sentinels) == len(handles):
        multiprocessing.connection.wait(sentinels, seconds)
    else:
        time.sleep(seconds)


def error_line(log: Path) -> str:
    """A failed run's own one-line message: the last non-empty line of its console output."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


def stop(processes: list[Handle]) -> None:
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
