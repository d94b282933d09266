"""`--backend ray` on a local Ray instance: trials write the same outputs and continue after `kill -9`; a sweep runs
through Ray Tune (Optuna's sampler, Tune's ASHA), prunes a bad trial, writes the same report, its best.yaml repeats
the best run, and a killed sweep continues without losing or redoing a trial; both backends give up after the
failures budget; a cluster nobody runs exits 2; a trial's actor imports no torch."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlfoundry.records.registry import Registry
from tests.conftest import output_of
from tests.e2e.test_sweep import SMALL, cli, digest, finish, rows, summary, trials, write_sweep

pytestmark = pytest.mark.xdist_group("processes")


def wait_for(condition, process, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None and time.monotonic() < deadline, output_of(process)
        time.sleep(0.2)


def kill_and_wait_for_checkpoint(process, run_dir: Path) -> None:
    """SIGKILL the command; its run under way gets SIGTERM from its dying Ray worker, checkpoints and stops."""
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    deadline = time.monotonic() + 60
    while summary(run_dir).get("status") == "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert summary(run_dir)["status"] == "stopped"


def test_trials_on_ray_write_the_report_and_continue_after_kill_9(tmp_path, slow_steps):
    # The run under way must still be going when Ray's workers notice, seconds later, that the command died: slow
    # steps make it last over ten seconds past its first checkpoint on any machine (30,720 plain CartPole steps once
    # ran out first on a Zen 5).
    out = tmp_path / "set"
    args = ("trials", "CartPole-v1:ppo", "--seeds", "2", "--backend", "ray", "--workers", "1", "--out", str(out),
            *SMALL, "train.total_timesteps=12288", "checkpoint.every_steps=2048", *slow_steps)
    first = cli(*args, cwd=tmp_path)
    runs = [out / "CartPole-v1_ppo" / f"s{seed}" for seed in (1, 2)]
    wait_for(lambda: summary(runs[0]).get("status") == "finished"
             and (runs[1] / "checkpoints" / "last.json").exists(), first)
    kill_and_wait_for_checkpoint(first, runs[1])
    kept = digest(runs[0])

    code, text = finish(cli(*args, cwd=tmp_path))
    assert code == 0, text
    assert digest(runs[0]) == kept  # not redone
    assert "resumed" in (runs[1] / "run.log").read_text().lower()
    assert [row["status"] for row in csv.DictReader((out / "trials.csv").open())] == ["finished"] * 2
    assert (out / "trials.md").is_file() and (out / "curves.png").is_file()
    assert sorted(r.seed for r in Registry(tmp_path / "runs").query({"group": "set"})) == [1, 2]


def test_a_sweep_through_ray_tune_prunes_a_bad_trial_and_best_yaml_repeats_its_run(tmp_path, slow_steps):
    # ASHA's stop reaches the pruned trial's run some time after its evaluation at step 2,048: a second or more on a
    # busy 2-core machine, in which a CartPole run on a Zen 5 would do its remaining 6,144 steps. Slow steps make
    # them last over six seconds on any machine.
    out = tmp_path / "grid"
    sweep = write_sweep(tmp_path, "[1.0e-12, 3.0e-3, 2.0e-3]", "seed: 3", "pruner: asha",
                        overrides=[*SMALL, "train.total_timesteps=8192", *slow_steps])
    code, text = finish(cli("sweep", str(sweep), "--backend", "ray", "--workers", "1", "--out", str(out),
                            cwd=tmp_path))
    assert code == 0, text
    good, bad, last = trials(out)  # the study the report is written from, in OUT/study.journal
    assert [good.params["algo.lr"], bad.params["algo.lr"]] == [3e-3, 1e-12], "the grid's seed 3 orders them so"
    assert good.state.name == "COMPLETE" and good.value > 100 and bad.state.name == "PRUNED"
    stopped = summary(out / "trials" / bad.user_attrs["folder"] / "s1")
    assert stopped["status"] == "pruned" and stopped["total_steps"] < 8192
    assert len(Registry(tmp_path / "runs").query({"status": "pruned"})) >= 1
    report = (out / "sweep.md").read_text()
    assert f"## Best: trial {good.number}" in report and "pruned at step 2,048" in report
    assert (out / "history.png").is_file()
    assert last.state.name in ("COMPLETE", "PRUNED")
    assert len(Registry(tmp_path / "runs").query({"group": "grid"})) == 3

    code, text = finish(cli("train", str(out / "best.yaml"), "--run-dir", str(tmp_path / "again"), cwd=tmp_path))
    assert code == 0, text
    assert rows(tmp_path / "again") == rows(out / "trials" / good.user_attrs["folder"] / "s1")


def test_a_killed_ray_sweep_continues_without_losing_or_redoing_a_trial(tmp_path, slow_steps):
    out = tmp_path / "grid"
    overrides = [*SMALL, "train.total_timesteps=12288", "checkpoint.every_steps=2048", *slow_steps]
    args = ("sweep", str(write_sweep(tmp_path, "[1.0e-3, 3.0e-3]", overrides=overrides)), "--backend", "ray",
            "--workers", "1", "--out", str(out))
    first = cli(*args, cwd=tmp_path)

    def runs() -> list[Path]:
        return sorted((out / "trials").glob("*/s1"), key=lambda path: path.stat().st_mtime)

    wait_for(lambda: len(runs()) == 2 and summary(runs()[0]).get("status") == "finished"
             and (runs()[1] / "checkpoints" / "last.json").exists(), first)
    done, under_way = runs()
    kill_and_wait_for_checkpoint(first, under_way)
    kept = digest(done)

    code, text = finish(cli(*args, cwd=tmp_path))
    assert code == 0, text
    found = trials(out)
    assert sorted(trial.state.name for trial in found) == ["COMPLETE", "COMPLETE"]
    assert sorted(trial.user_attrs["folder"] for trial in found) == sorted(path.parent.name for path in (done, under_way))
    assert digest(done) == kept  # the finished trial's run was not redone
    assert "resumed" in (under_way / "run.log").read_text().lower()
    assert summary(under_way)["total_steps"] == 12288


def test_hyperband_pauses_trials_whose_runs_resume_where_they_stopped(tmp_path, slow_steps):
    # Tune's HyperBand on 6 rungs (eta 3): a first bracket of 3 trials at the full budget, then one of 5 halved at
    # rung 2, where the first to arrive are paused until the rest catch up.
    # The trial relays its runs' evaluations every POLL_S (0.5 s): a run that passes a rung faster than that (the
    # default CartPole net does 1,024 steps in 0.15 s on an AMX Xeon) finishes before HyperBand's pause reaches it.
    # Slow steps make a rung last over a second on any machine while using little of its CPU. One thread, so that the
    # run repeated below (alone on the machine, where `auto` would give it two) computes the same numbers.
    out = tmp_path / "grid"
    overrides = [*SMALL, "train.total_timesteps=6144", "eval.every_steps=1024", "train.torch_threads=1", *slow_steps]
    sweep = write_sweep(tmp_path, "[3.0e-3, 2.5e-3, 2.0e-3, 1.5e-3, 1.0e-3, 5.0e-4, 1.0e-12, 2.0e-12]",
                        "pruner: hyperband", overrides=overrides)
    # the limit only catches a hang: 3.8 minutes on a 2-core Xeon, over 4 on a 2-core Zen 3 beside the other worker
    code, text = finish(cli("sweep", str(sweep), "--backend", "ray", "--workers", "2", "--out", str(out),
                            cwd=tmp_path), timeout=900)
    assert code == 0, text
    found = trials(out)
    states = sorted(trial.state.name for trial in found)
    assert len(found) == 8 and "PRUNED" in states and set(states) == {"COMPLETE", "PRUNED"}, text
    resumed = [trial for trial in found if trial.state.name == "COMPLETE" and "resumed" in
               (out / "trials" / trial.user_attrs["folder"] / "s1" / "run.log").read_text().lower()]
    assert resumed, "no completed trial was paused and resumed"
    run_dir = out / "trials" / resumed[0].user_attrs["folder"] / "s1"
    assert summary(run_dir)["total_steps"] == 6144
    code, text = finish(cli("train", "CartPole-v1:ppo", *overrides, f"algo.lr={resumed[0].params['algo.lr']}",
                            "train.seed=1", "--run-dir", str(tmp_path / "again"), cwd=tmp_path))
    assert code == 0, text
    assert rows(tmp_path / "again") == rows(run_dir)  # paused and resumed, as if never stopped


@pytest.mark.parametrize("backend", ["optuna", "ray"])
def test_both_backends_give_up_after_the_failures_budget(tmp_path, backend):
    # every setting diverges (NaN at the first update); failed trials do not count towards the 5 trials
    sweep = tmp_path / "diverge.yaml"
    sweep.write_text("\n".join(["base: CartPole-v1:ppo", f"overrides: {json.dumps(SMALL)}", "method: random",
                                 "budget: {trials: 5, failures: 2}", "parameters:",
                                 "  algo.lr: {choice: [1.0e+30, 2.0e+30, 3.0e+30]}", ""]))
    out = tmp_path / "sweep"
    code, text = finish(cli("sweep", str(sweep), "--backend", backend, "--workers", "1", "--out", str(out),
                            cwd=tmp_path))
    assert code == 1, text  # no trial completed
    assert "Traceback" not in text, text  # each failure is one line, naming the log with its traceback
    found = trials(out)
    assert [trial.state.name for trial in found] == ["FAIL", "FAIL"], text
    assert "nan" in found[0].user_attrs["error"].lower()
    assert (out / "sweep.md").is_file()


@pytest.mark.parametrize("command", ["trials", "sweep"])
def test_a_ray_address_nobody_answers_at_exits_2(tmp_path, command):
    target = ["CartPole-v1:ppo"] if command == "trials" else [str(write_sweep(tmp_path, "[1.0e-3]"))]
    code, text = finish(cli(command, *target, "--backend", "ray", "--address", "127.0.0.1:9", "--out",
                            str(tmp_path / "out"), cwd=tmp_path), timeout=60)
    assert code == 2, text
    assert "127.0.0.1:9" in text and "no Ray cluster answers" in text and "Traceback" not in text


def test_a_trial_actor_imports_no_torch():
    # A Tune trial's actor imports studies.sweep_tune, a `trials` task studies.cluster: they start the runs, which
    # import torch and the algorithms themselves. Without them the import took 0.8 s instead of 1.9 s on a 2-core Zen 5.
    code = ("import sys, rlfoundry.studies.sweep_tune, rlfoundry.studies.cluster; "
            "print([name for name in ('torch', 'rlfoundry.algos') if name in sys.modules])")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
