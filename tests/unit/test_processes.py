"""How `trials` and `sweep` start their runs: forked from a server that imported what runs import (exit codes and
console output as a fresh process gives them; the loops wake when a run ends), or a fresh interpreter where the
command's own script cannot be imported again."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlfoundry.studies import processes


@pytest.mark.skipif(processes._preloading_context() is None, reason="no forkserver on this platform")
def test_a_forked_run_gives_its_exit_code_and_output_and_wakes_the_loop(tmp_path):
    log = tmp_path / "logs" / "help.log"
    handle = processes.start(["--help"], log, share=1)
    assert isinstance(handle, processes.ForkedRun)
    started = time.monotonic()
    processes.pause([handle], 120.0)  # returns when the run ends, not after the two minutes
    assert time.monotonic() - started < 100 and handle.wait(timeout=10) == 0
    assert "Usage" in log.read_text() and "train" in log.read_text()

    failing = processes.start(["train", "Nope-v0:ppo"], tmp_path / "nope.log", share=1)
    assert failing.wait(timeout=120) == 2
    assert "Nope-v0" in processes.error_line(tmp_path / "nope.log")


def test_a_script_read_from_stdin_gets_a_fresh_interpreter(tmp_path, monkeypatch):
    # `python - <<EOF` names its script "<stdin>", which multiprocessing would try to import again in every run.
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(tmp_path / "<stdin>"), raising=False)
    handle = processes.start(["--help"], tmp_path / "help.log", share=1)
    assert isinstance(handle, subprocess.Popen)
    assert handle.wait(timeout=120) == 0 and "Usage" in (tmp_path / "help.log").read_text()
