"""studies/results.py: reading run directories and writing the report of a set of runs, on synthetic run
directories shaped like the trainer's (summary.json, config.yaml, metrics.csv with evaluation cells only on the
rows where an evaluation happened, run.log)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlfoundry.studies import stats
from rlfoundry.studies.results import RunResult, read_run, write_report

PNG = b"\x89PNG\r\n\x1a\n"
THRESHOLDS = {"CartPole-v1": 475.0, "LunarLander-v3": 200.0, "Pendulum-v1": -250.0, "Custom-v0": None}
TRACEBACK = """Traceback (most recent call last):
  File "trainer.py", line 1, in run
    self._train(sinks)
ValueError: non-finite loss/value at step 512"""


def make_run(root: Path, env_id: str, seed: int, final: float | None, status: str = "finished",
             evals: list[tuple[int, float]] | None = None, total: int = 1000, steps: int | None = None) -> Path:
    """A run directory as the trainer leaves it: a metrics row per 100 steps, evaluations at `evals` (by default
    every 250 steps, rising to `final`)."""
    run_dir = root / f"{env_id}_s{seed}"
    run_dir.mkdir(parents=True)
    steps = total if steps is None else steps
    if evals is None:
        evals = [] if final is None else [(step, final * step / total) for step in range(250, steps + 1, 250)]
    summary = {"status": status, "env_id": env_id, "algo": "ppo", "variant": "ppo", "seed": seed,
               "total_steps": steps, "wall_time_s": 10.0, "sps": steps / 10.0, "train_return_mean": 1.0,
               "eval_return_mean": final, "eval_return_std": 1.0, "best_eval_return": final,
               "solved_at_step": None, "versions": {"python": "3.11"}}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    threshold = THRESHOLDS[env_id]
    solved = None if threshold is None else {"return": threshold, "source": "test"}
    config = {"variant": "ppo", "env": {"id": env_id, "num_envs": 8}, "train": {"total_timesteps": total,
              "seed": seed}, "eval": {"every_steps": 250}, "solved": solved}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    by_step = dict(evals)
    with (run_dir / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["global_step", "wall_time", "sps", "train/episode_return", "eval/return_mean",
                         "eval/return_std", "loss/value"])
        for step in sorted(set(range(100, steps + 1, 50)) | set(by_step)):
            value = by_step.get(step)
            writer.writerow([step, step / 100, 100.0, 1.0, "" if value is None else repr(value), "", 0.5])
    log = "2026-11-24 01:57:03,916 INFO env: 8 envs\n"
    if status == "failed":
        log += f"2026-11-24 01:57:04,000 ERROR run failed:\n{TRACEBACK}\n2026-11-24 01:57:04,100 INFO closing\n"
    (run_dir / "run.log").write_text(log)
    return run_dir


def results(root: Path, spec: str, env_id: str, finals: list[float | None], **kwargs) -> list[RunResult]:
    return [read_run(make_run(root / spec.replace(":", "_"), env_id, seed, final, **kwargs), spec, seed)
            for seed, final in enumerate(finals, start=1)]


# ---------------------------------------------------------------- read_run


def test_read_run_reads_what_the_trainer_writes(tmp_path):
    run_dir = make_run(tmp_path, "CartPole-v1", 3, 480.0)
    result = read_run(run_dir, "CartPole-v1:ppo", 3)
    assert (result.status, result.env_id, result.final_return, result.solved) == ("finished", "CartPole-v1", 480.0,
                                                                                   475.0)
    assert (result.steps, result.horizon, result.wall_time_s, result.sps) == (1000, 1000, 10.0, 100.0)
    assert result.left_out is None and result.error is None
    assert result.normalised == pytest.approx(480 / 475)
    np.testing.assert_array_equal(result.curve[0], [250, 500, 750, 1000])  # only the rows with an evaluation
    np.testing.assert_allclose(result.curve[1], [120, 240, 360, 480])


def test_read_run_never_raises(tmp_path):
    missing = read_run(tmp_path / "nowhere", "CartPole-v1:ppo", 1)
    assert missing.status == "missing" and "no such directory" in missing.error
    (tmp_path / "empty").mkdir()
    assert "did not start" in read_run(tmp_path / "empty", "s", 1).error
    broken = make_run(tmp_path, "CartPole-v1", 2, 100.0)
    (broken / "summary.json").write_text("{not json")
    result = read_run(broken, "s", 2)
    assert result.status == "missing" and "unreadable" in result.error
    other = make_run(tmp_path, "LunarLander-v3", 2, 100.0)
    (other / "config.yaml").write_text(": : :")
    (other / "metrics.csv").write_bytes(b"\xff\xfe\x00")
    result = read_run(other, "s", 2)  # the summary still counts; what the other files add is lost
    assert (result.status, result.final_return, result.solved, len(result.curve[0])) == ("finished", 100.0, None, 0)


def test_read_run_of_a_failed_run_names_its_error(tmp_path):
    result = read_run(make_run(tmp_path, "CartPole-v1", 1, None, status="failed", steps=500), "s", 1)
    assert result.status == "failed"
    assert result.error == "ValueError: non-finite loss/value at step 512"
    assert result.left_out == "failed"


def test_a_run_solved_early_speaks_for_its_whole_budget(tmp_path):
    """A run that stopped at the solved threshold is "finished" with fewer steps: its curve is carried to its
    budget, as its final score is; a stopped run only covers its own steps."""
    solved = read_run(make_run(tmp_path / "a", "CartPole-v1", 1, 480.0, total=2000, steps=1000), "s", 1)
    stopped = read_run(make_run(tmp_path / "b", "CartPole-v1", 1, 300.0, status="stopped", steps=750), "s", 1)
    assert (solved.horizon, stopped.horizon) == (2000, 750)
    assert stopped.left_out is None
    unevaluated = read_run(make_run(tmp_path / "c", "CartPole-v1", 1, None, status="stopped", steps=200), "s", 1)
    assert unevaluated.left_out == "stopped without an evaluation"


# ---------------------------------------------------------------- write_report


def test_report_of_one_spec(tmp_path):
    finals = [480.0, 500.0, 350.0, 495.0, None]
    runs = results(tmp_path / "runs", "CartPole-v1:ppo", "CartPole-v1", finals[:4])
    runs += [read_run(make_run(tmp_path / "runs" / "failed", "CartPole-v1", 5, None, status="failed", steps=500),
                      "CartPole-v1:ppo", 5)]
    out = tmp_path / "out"
    paths = write_report(out, runs, title="CartPole trials", reps=500)
    assert set(paths) == {"csv", "md", "curves"}  # one spec: nothing to compare
    assert all(path.parent == out and path.is_file() for path in paths.values())
    assert not list(out.glob(".*"))  # no temporary file left behind
    assert paths["curves"].read_bytes().startswith(PNG)

    rows = list(csv.DictReader(paths["csv"].read_text().splitlines()))
    assert [row["seed"] for row in rows] == ["1", "2", "3", "4", "5"]
    assert [row["status"] for row in rows] == ["finished"] * 4 + ["failed"]
    assert float(rows[0]["final_return"]) == 480.0 and float(rows[0]["normalised_return"]) == pytest.approx(480 / 475)
    assert rows[4]["final_return"] == "" and "non-finite loss" in rows[4]["error"]

    md = paths["md"].read_text()
    estimates = stats.interval_estimates(np.array(finals[:4]).reshape(-1, 1), reps=500)
    iqm = estimates["iqm"]
    assert f"{iqm.value:.1f} [{iqm.low:.1f}, {iqm.high:.1f}]" in md  # the failed run is not in the numbers
    assert f"{estimates['median'].value:.1f} [" in md and "| 5 | 4 | 1 |" in md
    assert "5 runs of 1 spec; 4 count in the statistics; left out: 1 failed" in md
    assert "seed 5: failed: ValueError: non-finite loss/value at step 512" in md
    assert "Agarwal et al. 2021" in md and "stratified bootstrap" in md
    assert "Probability of improvement" not in md and "![curves](curves.png)" in md


def test_report_of_two_specs_on_two_envs_is_normalised(tmp_path):
    runs = results(tmp_path, "CartPole-v1:ppo", "CartPole-v1", [475.0, 450.0, 500.0, 400.0])
    runs += results(tmp_path, "LunarLander-v3:ppo", "LunarLander-v3", [100.0, 150.0, 50.0, 120.0])
    paths = write_report(tmp_path / "out", runs, reps=500)
    assert set(paths) == {"csv", "md", "curves", "profile", "improvement"}
    for name in ("curves", "profile", "improvement"):
        assert paths[name].read_bytes().startswith(PNG)

    rows = list(csv.DictReader(paths["csv"].read_text().splitlines()))
    assert [float(row["normalised_return"]) for row in rows] == pytest.approx(
        [1.0, 450 / 475, 500 / 475, 400 / 475, 0.5, 0.75, 0.25, 0.6])

    md = paths["md"].read_text()
    assert "divided by its env's solved threshold" in md
    # Every CartPole run ends above every LunarLander run once normalised: P = 1 with a degenerate interval.
    assert "| `CartPole-v1:ppo` | - | 1.00 [1.00, 1.00] |" in md
    assert "| `LunarLander-v3:ppo` | 0.00 [0.00, 0.00] | - |" in md
    for name in ("curves", "profile", "improvement"):
        assert f"![{name}]({name}.png)" in md


def test_specs_without_a_positive_threshold_are_left_out_of_the_comparison(tmp_path):
    runs = results(tmp_path, "CartPole-v1:ppo", "CartPole-v1", [475.0, 450.0])
    runs += results(tmp_path, "CartPole-v1:dqn", "CartPole-v1", [300.0, 350.0])
    runs += results(tmp_path, "Pendulum-v1:sac", "Pendulum-v1", [-200.0, -150.0])
    runs += results(tmp_path, "Custom-v0:ppo", "Custom-v0", [3.0, 4.0])
    md = write_report(tmp_path / "out", runs, reps=200)["md"].read_text()
    assert "`Pendulum-v1:sac` is left out of the comparison: its env has no positive solved threshold" in md
    assert "`Custom-v0:ppo` is left out of the comparison" in md
    assert "| `CartPole-v1:ppo` | - | 1.00 [1.00, 1.00] |" in md  # the two CartPole specs are still compared


def test_a_comparison_with_one_spec_left_says_so(tmp_path):
    runs = results(tmp_path, "CartPole-v1:ppo", "CartPole-v1", [475.0, 450.0])
    runs += results(tmp_path, "Pendulum-v1:sac", "Pendulum-v1", [-200.0, -150.0])
    paths = write_report(tmp_path / "out", runs, reps=200)
    md = paths["md"].read_text()
    assert "Fewer than two specs have runs that can be compared." in md
    assert "`Pendulum-v1:sac` is left out of the comparison" in md
    assert "profile" not in paths and "improvement" not in paths
    assert not (tmp_path / "out" / "profile.png").exists()


def test_a_new_report_removes_plots_it_no_longer_has(tmp_path):
    runs = results(tmp_path, "CartPole-v1:ppo", "CartPole-v1", [475.0, 450.0])
    runs += results(tmp_path, "CartPole-v1:dqn", "CartPole-v1", [300.0, 350.0])
    assert "profile" in write_report(tmp_path / "out", runs, reps=200)
    write_report(tmp_path / "out", runs[:2], reps=200)
    assert not (tmp_path / "out" / "profile.png").exists() and not (tmp_path / "out" / "improvement.png").exists()


def test_one_env_compares_raw_returns(tmp_path):
    runs = results(tmp_path, "CartPole-v1:ppo", "CartPole-v1", [480.0, 400.0, 300.0])
    runs += results(tmp_path, "CartPole-v1:dqn", "CartPole-v1", [350.0, 200.0, 100.0])
    md = write_report(tmp_path / "out", runs, reps=200)["md"].read_text()
    assert "divided by" not in md
    # ppo's runs beat dqn's in 8 of the 9 pairs (only 300 < 350 loses): 8/9 = 0.89.
    assert "| `CartPole-v1:ppo` | - | 0.89 [" in md
    # 3 runs a spec: the IQM trims nothing and says so, and the intervals come with their caveat
    assert md.count("= mean (nothing trimmed below 4 runs)") == 2
    assert "With 3 runs in the smallest spec, these intervals are too narrow to lean on" in md


def test_enough_runs_need_no_caveat_and_their_iqm_trims(tmp_path):
    runs = results(tmp_path, "CartPole-v1:ppo", "CartPole-v1", [480.0, 400.0, 300.0, 450.0, 20.0])
    runs += results(tmp_path, "CartPole-v1:dqn", "CartPole-v1", [350.0, 200.0, 100.0, 90.0, 400.0])
    md = write_report(tmp_path / "out", runs, reps=200)["md"].read_text()
    assert "nothing trimmed" not in md and "too narrow to lean on" not in md


def test_a_set_where_nothing_finished(tmp_path):
    runs = [read_run(tmp_path / "gone", "CartPole-v1:ppo", 1),
            read_run(make_run(tmp_path, "CartPole-v1", 2, None, status="running", steps=300), "CartPole-v1:ppo", 2)]
    paths = write_report(tmp_path / "out", runs, reps=200)
    assert set(paths) == {"csv", "md"}
    md = paths["md"].read_text()
    assert "0 count in the statistics; left out: 1 missing, 1 running" in md
    assert "| `CartPole-v1:ppo` | 2 | 0 | 0 | - | - | - |" in md
