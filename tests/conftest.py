import importlib
import importlib.util
import os
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# Columns that hold measured times; everything else in metrics.csv must repeat exactly under one seed.
TIMING = ("wall_time", "sps", "sps_run")


def _required(modname: str, minversion: str | None = None, reason: str | None = None, *, exc_type=None):
    """pytest.importorskip under CI: every optional package a test imports is installed there (`make install`: the
    dev extra and OCAtari), so one that does not import is a broken install, a failure rather than a silent skip."""
    try:
        return importlib.import_module(modname)
    except ImportError as exc:
        pytest.fail(f"{modname} does not import under CI, where `make install` installs it: {exc}", pytrace=False)


if os.environ.get("CI"):  # set by CI services, and by `CI=true bash .ci/run`
    pytest.importorskip = _required


def output_of(process) -> str:
    """What a child process printed, for a failed wait's message: stopped first if it is still going, so a test that
    gave up waiting on a long run fails at once instead of waiting for the run to end."""
    if process.poll() is None:
        process.kill()
    out, err = process.communicate(timeout=60)
    return (out or "") + (err or "")


def benchmark_script(name: str):
    """benchmarks/NAME.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def is_timing(column: str) -> bool:
    return column in TIMING or column.startswith("time/")


@pytest.fixture
def quiet():
    """Overrides that keep test runs small and silent."""
    return ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu"]


def pytest_configure(config):
    """A pytest-xdist worker shares the machine with the others, as concurrent runs do: its runs' `auto` threads
    resolve to its share (RLFOUNDRY_CONCURRENT_RUNS), and so do torch's threads for tests that build nets directly."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return
    import os

    import torch

    from rlfoundry.config.cores import SHARE_VARIABLE, usable_cores

    workers = int(worker["workercount"])
    os.environ.setdefault(SHARE_VARIABLE, str(workers))
    torch.set_num_threads(max(1, usable_cores() // workers))


@pytest.fixture
def one_thread():
    """torch on one thread for the test (and back afterwards): timings and results of small nets that do not
    depend on the worker's share of the cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(config, items):
    """The learning tests (marker `slow`, a minute or more each) first: the workers then fill the time around them with
    the many short tests, instead of one worker finishing a five-minute test alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the order within each part stays
