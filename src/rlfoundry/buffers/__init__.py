"""Experience storage and the functions that fill and read it."""

from __future__ import annotations

import contextlib
import os

from rlfoundry.config.errors import ConfigError


@contextlib.contextmanager
def sized_by(setting: str, value: int):
    """Around building a replay of `value` (the config's `setting`): a replay larger than this machine can allocate
    (numpy's MemoryError: SAC's default million transitions of CarRacing's 96 × 96 frames are 25.7 GiB) is bad
    input, a ConfigError naming the setting, not a failure from inside the agent."""
    try:
        yield
    except MemoryError as exc:
        raise ConfigError(f"{setting} = {value:,}: the replay does not fit in memory: {exc} ({_memory()}); "
                          f"lower {setting}") from None


def _memory() -> str:
    try:
        return f"this machine has {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.1f} GiB"
    except (ValueError, OSError, AttributeError):  # not on Linux
        return "more than this machine has"
