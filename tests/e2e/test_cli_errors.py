"""The `rlfoundry` command as a user meets it: bad input exits 2 with one clear message and creates nothing.

Every command runs as a subprocess in its own empty working directory. Each start imports torch
(~2 s), so this is a representative subset (tests/unit/test_config.py covers every message), and the
commands run concurrently, started once per module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

KEEP_TEXT = "a previous run lives here\n"


def _malformed_yaml(cwd: Path) -> None:
    (cwd / "exp.yaml").write_text("preset: CartPole-v1:ppo\nalgo:\n  lr: 1.0e-3\n    num_steps: 4\n")


def _non_empty_run_dir(cwd: Path) -> None:
    (cwd / "existing").mkdir()
    (cwd / "existing" / "keep.txt").write_text(KEEP_TEXT)


@dataclass
class Case:
    args: list[str]
    expected: list[str] = field(default_factory=list)  # substrings of stderr (whitespace-normalised)
    setup: Callable[[Path], None] | None = None
    code: int = 2  # expected exit status


# Errors that must exit 2 with a message and leave the working directory as it was.
ERRORS = {
    "unknown option": Case(["train", "CartPole-v1:ppo", "--bogus"], ["No such option", "--bogus"]),
    "missing spec": Case(["train"], ["nothing to train", "--resume"]),
    "unknown key": Case(["train", "CartPole-v1:ppo", "algo.lrr=1"], ["algo.lrr", "unknown key", "did you mean 'lr'"]),
    "out of range": Case(["train", "CartPole-v1:ppo", "algo.gamma=1.5"], ["algo.gamma", "1.5", "less than or equal to 1"]),
    "option out of range": Case(["train", "CartPole-v1:ppo", "--total-timesteps", "0"], ["train.total_timesteps", "greater than 0"]),
    "threads not a number": Case(["train", "CartPole-v1:ppo", "train.torch_threads=many"],
                                 ["train.torch_threads", "'many'", "a positive integer or 'auto'"]),
    "nproc zero": Case(["train", "CartPole-v1:ppo", "--nproc", "0"], ["--nproc 0", "at least 1"]),
    "nproc not a number": Case(["train", "CartPole-v1:ppo", "--nproc", "two"], ["--nproc", "valid integer"]),
    "nproc off-policy": Case(["train", "CartPole-v1:dqn", "--nproc", "2"], ["--nproc 2", "a2c, ppo, reinforce", "dqn"]),
    "nproc memory core": Case(["train", "CartPole-v1:ppo", "network.core=gru", "--nproc", "2"],
                              ["--nproc 2", "network.core=gru", "one process"]),
    "unknown env id": Case(["train", "CartPol-v1:ppo"], ["CartPol-v1", "did you mean 'CartPole-v1'"]),
    # the wrapper's own constructor refuses the entry: the error names the entry, not the env id
    "wrapper refuses its kwargs": Case(
        ["train", "CartPole-v1:ppo", "env.wrappers=[{id: TimeAwareObservation}, "
         "{id: ClipReward, kwargs: {min_reward: 1, max_reward: 0}}]"],
        ["env.wrappers[1] = ClipReward", "InvalidBound", "Min reward (1) must be smaller than max reward (0)"]),
    "unknown variant": Case(["train", "CartPole-v1:nope"], ["nope", "available: ppo"]),
    "bad literal": Case(["train", "CartPole-v1:ppo", "env.vectorization=turbo"],
                        ["env.vectorization", "turbo", "'sync'", "'async'", "'vector_entry_point'"]),
    "bad override syntax": Case(["train", "CartPole-v1:ppo", "algo.lr"], ["algo.lr", "section.key=value"]),
    "malformed yaml": Case(["train", "exp.yaml"], ["malformed YAML", "exp.yaml", "line 4"], _malformed_yaml),
    "missing experiment file": Case(["train", "nothere.yaml"], ["nothere.yaml", "does not exist"]),
    "bench unknown env id": Case(["bench", "env", "CartPol-v1"], ["CartPol-v1", "did you mean 'CartPole-v1'"]),
    "bench train bad key": Case(["bench", "train", "CartPole-v1:ppo", "algo.lrr=1"], ["algo.lrr", "unknown key"]),
    "unwritable run dir": Case(["train", "CartPole-v1:ppo", "--run-dir", "/proc/nope/run"],
                               ["--run-dir /proc/nope/run", "cannot create or write", "No such file or directory"]),
    "unwritable runs root": Case(["train", "CartPole-v1:ppo", "logging.runs_root=/proc/forbidden"],
                                 ["logging.runs_root = '/proc/forbidden'", "cannot create or write"]),
    # the agent meets the env's spaces only once the env is built: still bad input, and still nothing written
    "algorithm cannot take the actions": Case(["train", "Acrobot-v1:planet"],
                                              ["algo.name = 'planet'", "Discrete(3)", "acts in Box action spaces"]),
    "dqn on continuous actions": Case(["train", "MountainCarContinuous-v0:dqn"],
                                      ["algo.name = 'dqn'", "continuous actions", "DQN needs Discrete"]),
    # 10^14 transitions: petabytes, beyond any machine's address space, overcommitted or not
    "replay larger than memory": Case(["train", "Pendulum-v1:sac", "algo.buffer_size=100000000000000"],
                                      ["algo.buffer_size = 100,000,000,000,000", "does not fit in memory",
                                       "lower algo.buffer_size"]),
    "non-empty run dir": Case(["train", "CartPole-v1:ppo", "--total-timesteps", "256", "--run-dir", "existing"],
                              ["--run-dir", "existing", "not empty"], _non_empty_run_dir),
}

# Malformed input that once crashed after creating a run directory (the reason says how).
MALFORMED = {
    "env not a mapping": (
        Case(["train", "CartPole-v1:ppo", "env=3"], ["env"]),
        "config.load.validate() raises AttributeError on env=3: exit 1 with a traceback",
    ),
    "unknown env kwarg": (
        Case(["train", "CartPole-v1:ppo", "env.kwargs={bogus: 1}", "--total-timesteps", "256"], ["bogus"]),
        "env.kwargs are not checked at load time: exit 1 after runs/ is created",
    ),
}

# Commands that succeed.
OK = {
    "help": Case(["--help"], code=0),
    "presets": Case(["presets"], code=0),
    "presets filtered": Case(["presets", "Hopper"], code=0),
    "bench env": Case(["bench", "env", "CartPole-v1", "--num-envs", "4", "--steps", "200"], code=0),
    "bench train": Case(["bench", "train", "CartPole-v1:ppo", "--steps", "512"], code=0),
}

ALL = {**ERRORS, **{name: case for name, (case, _) in MALFORMED.items()}, **OK}


@dataclass
class Result:
    cwd: Path
    before: dict[str, bytes]
    returncode: int
    stdout: str
    stderr: str

    @property
    def err(self) -> str:
        return " ".join(self.stderr.split())

    @property
    def out(self) -> str:
        return " ".join(self.stdout.split())


def snapshot(root: Path) -> dict[str, bytes]:
    """Every path under root with its contents (b'' for directories)."""
    return {
        str(path.relative_to(root)): (path.read_bytes() if path.is_file() else b"")
        for path in sorted(root.rglob("*"))
    }


def run_case(cwd: Path, case: Case) -> Result:
    if case.setup is not None:
        case.setup(cwd)
    before = snapshot(cwd)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "COLUMNS", "TTY_COMPATIBLE")}
    env["NO_COLOR"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "rlfoundry.cli", *case.args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )
    return Result(cwd, before, proc.returncode, proc.stdout, proc.stderr)


class Results:
    """Each case's result; every command is started up front and each test waits only for its own."""

    def __init__(self, futures: dict[str, Future]):
        self.futures = futures

    def __getitem__(self, name: str) -> Result:
        return self.futures[name].result()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    dirs = {name: tmp_path_factory.mktemp(name.replace(" ", "_")) for name in ALL}
    pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
    # Submitted in the order the tests below use them.
    yield Results({name: pool.submit(run_case, dirs[name], case) for name, case in ALL.items()})
    pool.shutdown(wait=True, cancel_futures=True)


def check_bad_input(result: Result, case: Case) -> None:
    detail = f"rc={result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == case.code == 2, detail
    assert "Traceback" not in result.stderr + result.stdout, detail
    for text in case.expected:
        assert text in result.err, f"{text!r} not in stderr\n{detail}"
    assert not (result.cwd / "runs").exists(), detail
    assert snapshot(result.cwd) == result.before, "the working directory changed"


@pytest.mark.parametrize("name", list(ERRORS))
def test_bad_input_exits_2_and_creates_nothing(results, name):
    check_bad_input(results[name], ERRORS[name])


@pytest.mark.parametrize("name", list(MALFORMED))
def test_bad_input_formerly_crashing(results, name):
    check_bad_input(results[name], MALFORMED[name][0])


@pytest.mark.parametrize(("name", "start"), [("unknown env id", "error: env.id = 'CartPol-v1'"),
                                             ("wrapper refuses its kwargs", "error: env.wrappers[1] = ClipReward")])
def test_config_errors_are_one_error_line(results, name, start):
    result = results[name]
    assert result.stderr.strip().splitlines()[0].startswith(start) and len(result.stderr.strip().splitlines()) == 1
    assert "cannot be created" not in result.stderr
    assert result.stdout == ""


def test_non_empty_run_dir_is_untouched(results):
    result = results["non-empty run dir"]
    assert (result.cwd / "existing" / "keep.txt").read_text() == KEEP_TEXT
    assert sorted(p.name for p in (result.cwd / "existing").iterdir()) == ["keep.txt"]


def test_help_lists_commands(results):
    result = results["help"]
    assert result.returncode == 0, result.stderr
    assert "train" in result.out and "presets" in result.out


def test_presets_lists_cartpole_threshold(results):
    result = results["presets"]
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stdout.splitlines() if "CartPole-v1" in line]
    assert lines, result.stdout
    assert any("475" in line for line in lines), result.stdout
    for env_id in ("Pendulum-v1", "LunarLander-v3", "BipedalWalker-v3", "HalfCheetah-v5", "Hopper-v5"):
        assert env_id in result.stdout
    assert not (result.cwd / "runs").exists()


def test_presets_filter(results):
    result = results["presets filtered"]
    assert result.returncode == 0, result.stderr
    assert "Hopper-v5" in result.stdout
    assert "3800" in result.stdout
    for env_id in ("CartPole-v1", "HalfCheetah-v5", "Pendulum-v1"):
        assert env_id not in result.stdout


def test_bench_env_prints_steps_per_second(results):
    result = results["bench env"]
    assert result.returncode == 0, result.stderr
    assert "CartPole-v1:" in result.out and "env steps/s (4 envs" in result.out, result.stdout


def test_bench_train_prints_steps_per_second_and_leaves_no_run(results):
    result = results["bench train"]
    assert result.returncode == 0, result.stderr
    assert "training steps/s" in result.out and "learn" in result.out, result.stdout
    assert not (result.cwd / "runs").exists()
