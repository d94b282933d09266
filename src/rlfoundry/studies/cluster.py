"""Runs on a Ray cluster (`--backend ray`): the connection, and a `rlfoundry train` process on some node that the run
loops of `trials` handle like a local one.

Where things live. Each run is the ordinary `rlfoundry train` process, started by a Ray task (or, for sweeps, a Ray
Tune trial) on whichever node has a free CPU, writing its run directory straight into `--out`. So every node must
see `--out` at the same path (a shared file system such as NFS): Ray Tune itself asks the same of multi-node
experiments since Ray 2.7 (its `storage_path` on NFS or cloud storage). On connecting, one task per node checks that
it sees a file the head just wrote there, and a node that does not is named before anything starts. The head reads
the runs' metrics, checkpoints and summaries from the shared directory to show progress, prune, continue and write
the report; only small things travel through Ray itself: a task's exit code, a Tune trial's intermediate results.

Stopping. `ray.cancel` interrupts a run's task, which asks the run to checkpoint and stop (SIGTERM), as the local
backend does. When the command dies, even by `kill -9`, Ray ends its tasks' workers and each run gets SIGTERM from
its parent's death (Linux's parent-death signal); the runs start in their own session and Ray is told not to kill
the children of its workers (`RAY_kill_child_processes_on_worker_exit=false`, in the job's runtime environment), so
they checkpoint on their way out.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from rlfoundry.config.cores import usable_cores
from rlfoundry.config.errors import ConfigError
from rlfoundry.studies import processes

POLL_S = 0.5
LOCAL_OBJECT_STORE = 128 * 1024**2  # bytes: only exit codes and small results travel through Ray
RUNTIME_ENV = {"env_vars": {"RAY_kill_child_processes_on_worker_exit": "false"}}


def require_ray(module: str = "ray"):
    """Import `module` of Ray (`ray`, or `ray.tune` with its own dependencies); ConfigError saying how to install it
    when it is missing."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("ray", "pyarrow", "pandas"):
            raise
        raise ConfigError("--backend ray needs Ray (Tune): pip install 'rlfoundry[ray]'") from None


def _reachable(address: str) -> None:
    """Fail fast on an address nothing listens at (Ray itself retries for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and the like: Ray finds the cluster
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"--address {address}: no Ray cluster answers there ({exc.strerror or exc}); start one "
                          "with `ray start --head`, or leave out --address for a local instance") from None


@contextlib.contextmanager
def connected(address: str | None, workers: int | None, out: Path) -> Iterator[int]:
    """Connect to the Ray cluster at `address`, or start a local instance with `workers` CPUs (default: the usable
    cores); yields the CPUs runs may use at once (`workers`, at most the cluster's). On a cluster, checks first
    that every node sees `out`. Disconnects (and stops a local instance) at the end."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no reports to Ray's servers unless the user asks
    ray = require_ray()
    options = dict(runtime_env=RUNTIME_ENV, log_to_driver=False, logging_level=logging.WARNING,
                   configure_logging=False)
    if address:
        _reachable(address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"--address {address}: cannot join the Ray cluster: {exc}") from None
    else:
        ray.init(num_cpus=workers or usable_cores(), include_dashboard=False,
                 object_store_memory=LOCAL_OBJECT_STORE, **options)
    try:
        if address:
            _check_shared(ray, out)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < 1:
            raise ConfigError(f"--address {address}: the cluster has no CPUs for runs")
        yield min(cpus, workers or cpus)
    finally:
        ray.shutdown()


def _sees(token: str, cwd: str) -> tuple[bool, bool, str]:
    return Path(token).exists(), Path(cwd).is_dir(), socket.gethostname()


def _check_shared(ray, out: Path) -> None:
    """Every alive node must see `out` at the same path (a file written here is looked for there), and have this
    command's directory, where the runs start (relative paths in their configs, such as the registry's runs root,
    resolve there)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = out.resolve() / f".ray-check-{uuid.uuid4().hex}"
    token.touch()
    try:
        probe = ray.remote(num_cpus=0)(_sees)
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        answers = ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                           .remote(str(token), os.getcwd()) for node in nodes])
    finally:
        token.unlink(missing_ok=True)
    for index, what in ((0, f"--out {out}"), (1, f"this directory ({os.getcwd()})")):
        blind = sorted({answer[2] for answer in answers if not answer[index]})
        if blind:
            raise ConfigError(f"{what}: not visible from the Ray node(s) {', '.join(blind)}. With --backend ray the "
                              "runs start in it and write into --out from every node, so both must be on a shared file "
                              "system mounted at the same path everywhere (docs/guide/experiments.md, \"Ray clusters\")")


# ---------------------------------------------------------------- a run on some node


def train_on_node(command: list[str], log: str, cwd: str) -> int:
    """A Ray task: run `command` on this node in the command's directory `cwd`, with one CPU's share of the node,
    until it ends or the task is cancelled (then the run checkpoints and stops, as the local backend stops it).
    Returns its exit code."""
    process = processes.start(command, Path(log), share=usable_cores(), cwd=cwd, own_session=True)
    try:
        while process.poll() is None:
            time.sleep(POLL_S)  # (ray.cancel interrupts Python code, not a blocking wait)
    except KeyboardInterrupt:
        processes.stop([process])
    return process.wait()  # it has ended either way (`stop` waits): its exit code


class RayRun:
    """A run started by `start`, with the part of subprocess.Popen's interface the run loops use."""

    def __init__(self, ref) -> None:
        self.ref = ref
        self.returncode: int | None = None

    def poll(self) -> int | None:
        import ray

        if self.returncode is None and ray.wait([self.ref], timeout=0)[0]:
            try:
                self.returncode = int(ray.get(self.ref))
            except ray.exceptions.TaskCancelledError:
                self.returncode = -15
            except ray.exceptions.RayError:  # its worker or node died
                self.returncode = -9
        return self.returncode

    def send_signal(self, signal: int) -> None:
        import ray

        if self.returncode is None:
            ray.cancel(self.ref)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        import ray

        if self.returncode is None:
            ray.cancel(self.ref, force=True)

    def wait(self, timeout: float | None = None) -> int:
        import ray

        if not ray.wait([self.ref], timeout=timeout)[0]:
            raise subprocess.TimeoutExpired(str(self.ref), timeout or 0.0)
        code = self.poll()
        assert code is not None, "a finished task has an exit code"
        return code


@functools.cache
def _task():
    import ray

    return ray.remote(num_cpus=1, max_retries=0)(train_on_node)


def start(command: list[str], log: Path, share: int) -> RayRun:
    """`processes.start` on the cluster: the run takes one CPU of whichever node has one free (`share` is the
    node's to work out)."""
    return RayRun(_task().remote(command, str(log), os.getcwd()))
