"""The cores a process may use, and its share of them when several runs share the machine: what `auto` settings
read at every layer (threads in `run.hardware`, worker processes for envs in `envs`)."""

from __future__ import annotations

import math
import os
from pathlib import Path

SHARE_VARIABLE = "RLFOUNDRY_CONCURRENT_RUNS"  # set by `trials`, `sweep` and the test workers for the runs they start


def _cgroup_cores() -> float | None:
    """The CPU quota of this process's cgroup (v2 `cpu.max`, v1 `cfs_quota_us`), in cores; None when unlimited."""
    for quota_file, period_file in (("/sys/fs/cgroup/cpu.max", None),
                                    ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")):
        try:
            text = Path(quota_file).read_text().split()
            quota, period = (text[0], text[1]) if period_file is None else (text[0], Path(period_file).read_text())
            if quota in ("max", "-1"):
                return None
            return int(quota) / int(period)
        except (OSError, ValueError, IndexError):
            continue
    return None


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup CPU quota (containers)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_cores()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def concurrent_runs(environ=os.environ) -> int:
    """How many runs share this machine (`RLFOUNDRY_CONCURRENT_RUNS`, 1 when unset or not a number)."""
    try:
        return max(1, int(environ.get(SHARE_VARIABLE, "1")))
    except ValueError:
        return 1


def cores_of_run(cores: int | None = None, environ=os.environ, processes: int = 1) -> int:
    """This process's cores: all usable ones (or `cores`), or an equal share when `RLFOUNDRY_CONCURRENT_RUNS` runs
    share them, and again of that when the run has `processes` processes on this machine (`--nproc`)."""
    cores = usable_cores() if cores is None else cores
    return max(1, cores // (concurrent_runs(environ) * max(1, processes)))
