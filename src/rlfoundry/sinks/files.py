"""Failed writes: which file, and whether the disk is full."""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> bool:
    """No space (or quota) left on the device."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


@contextlib.contextmanager
def writing(path: Path):
    """Name `path` in an OSError raised while it is written (a failed write() does not): so a full disk is
    reported as "disk full while writing <path>"."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
