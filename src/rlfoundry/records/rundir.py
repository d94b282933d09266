"""The run directory: its name, provenance, and atomic JSON/YAML writes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from rlfoundry.config.errors import ConfigError
from rlfoundry.sinks.files import writing

PACKAGES = ("rlfoundry", "torch", "numpy", "gymnasium", "pydantic", "mujoco", "box2d")


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def git_commit() -> dict[str, Any]:
    """The commit of the rlfoundry source tree, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}


def run_name(env_id: str, variant: str, seed: int) -> str:
    env = re.sub(r"[^A-Za-z0-9_.-]+", "-", env_id)
    return f"{time.strftime('%Y%m%d-%H%M%S')}_{env}_{variant}_s{seed}"


LOCK = ".lock"  # the file a directory's writer holds an exclusive flock on


@contextlib.contextmanager
def held(folder: Path, refused: str) -> Iterator[None]:
    """An exclusive lock on `folder` while inside (the directory is created if missing): a second writer gets a
    ConfigError at once, `refused` its message. The operating system drops the lock with the process, so a
    run killed with SIGKILL leaves none behind. Directories made here that nothing else was written into (a run
    refused as bad input) are removed again: bad input leaves nothing behind."""
    made = [directory for directory in (folder, *folder.parents) if not directory.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / LOCK, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(refused) from None
        yield
    finally:
        handle.close()
        if made and [path.name for path in folder.iterdir()] == [LOCK]:
            (folder / LOCK).unlink(missing_ok=True)
            for directory in made:  # the folder, then the parents made for it
                with contextlib.suppress(OSError):
                    directory.rmdir()


def run_lock(run_dir: Path) -> contextlib.AbstractContextManager[None]:
    """The lock a training process holds on its run directory, from before its first write to its end, so that a
    second `train --resume` of a run still writing (say, checkpointing after SIGTERM) is refused, exit 2."""
    return held(Path(run_dir), f"{run_dir}: another process is training in this run directory (wait for it to end, "
                               "or stop it)")


def new_run_dir(runs_root: str, env_id: str, variant: str, seed: int, explicit: str | None) -> Path:
    """Pick the run directory without creating it; an explicit one must not hold a run already, and either must
    be one this process can create and write into (else a ConfigError naming the path and the reason)."""
    if explicit is not None:
        path = Path(explicit)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ConfigError(f"--run-dir {explicit}: already exists and is not empty; choose a new directory")
        _check_writable(path, f"--run-dir {explicit}")
        return path
    base = Path(runs_root) / run_name(env_id, variant, seed)
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    _check_writable(path, f"logging.runs_root = '{runs_root}'")
    return path


def _check_writable(path: Path, what: str) -> None:
    """Create `path` (and its missing parents), write a file into it, and remove all of it again: what cannot be
    done raises ConfigError before the run starts. Permissions alone would not tell (root passes them, yet cannot
    create under /proc or on a read-only filesystem)."""
    missing = [directory for directory in (path, *path.parents) if not directory.exists()]
    created: list[Path] = []
    try:
        for directory in reversed(missing):
            directory.mkdir()
            created.append(directory)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ConfigError(f"{what}: cannot create or write {path}: {exc.strerror or exc}") from None
    finally:
        for directory in reversed(created):
            with contextlib.suppress(OSError):
                directory.rmdir()


def run_status(run_dir: Path) -> str | None:
    """summary.json's status (running, finished, failed, stopped); None before the run wrote a readable one."""
    try:
        return json.loads((Path(run_dir) / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def file_mode() -> int:
    """The mode open() gives a new file, 0o666 less the process's umask: mkstemp's temporary files are 0600, which
    would leave every atomically written record unreadable to a group sharing the runs folder."""
    try:  # Linux: read it without changing it (os.umask can only set it, racing other threads)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, content: str | bytes) -> None:
    """Write to a temporary file in the same directory, flush it to disk, then rename over the target:
    readers never see half a file, and a crash (or a full disk) leaves the old one and no temporary file."""
    path = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    with writing(path):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, file_mode())
            with open(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
