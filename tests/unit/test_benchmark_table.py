"""benchmarks/suite.py's table: rows measured in another session keep their line, date and machine; a table from
before the `measured` column reads as measured on its header's date and machine."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import benchmark_script


def suite_module():
    return benchmark_script("suite")


OLD = """# Benchmarks

Measured 2026-11-24 on machine: AMD EPYC (avx, avx2; no native bf16), 2 cores; torch 2.13.0+cpu.

| spec | budget | each run's steps | finished runs | IQM [95% CI] | mean [95% CI] | anchor | vs anchor | wall time (all seeds) | anchor's source |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| `CartPole-v1:ppo` | 100,000 | 15,104 | 3/3 | 500 [500, 500] | 500 [500, 500] | 500 | matches | 0.2 min | zoo |
"""


def test_a_table_before_the_measured_column_gives_its_rows_the_headers_date_and_machine(tmp_path):
    table = tmp_path / "old.md"
    table.write_text(OLD)
    rows, machines = suite_module().earlier_table(table)
    assert machines == ["AMD EPYC (avx, avx2; no native bf16), 2 cores; torch 2.13.0+cpu"]
    assert rows["CartPole-v1:ppo"][9:] == ["2026-11-24 [1]", "zoo"] and len(rows["CartPole-v1:ppo"]) == 11


def test_rows_without_runs_here_keep_their_lines_and_machines(tmp_path):
    module = suite_module()
    table = tmp_path / "table.md"
    table.write_text(OLD)
    suite = {"rows": [{"spec": "CartPole-v1:ppo"}, {"spec": "Pendulum-v1:ppo", "anchor": {"return": -172.2}}]}
    module.write_table(suite, tmp_path / "suite.yaml", tmp_path / "runs", table, [1, 2, 3])
    rows, machines = module.earlier_table(table)
    assert machines == ["AMD EPYC (avx, avx2; no native bf16), 2 cores; torch 2.13.0+cpu"]
    assert rows["CartPole-v1:ppo"][3:5] == ["3/3", "500 [500, 500]"] and rows["CartPole-v1:ppo"][9] == "2026-11-24 [1]"
    # never run: no date, no machine (a set in progress would show today and this machine)
    assert [rows["Pendulum-v1:ppo"][i] for i in (3, 7, 9)] == ["0/3", "not run yet", "—"]
    before = table.read_text()
    assert {line.count("|") for line in before.splitlines() if line.startswith("|")} == {12}  # 11 columns everywhere
    module.write_table(suite, tmp_path / "suite.yaml", tmp_path / "runs", table, [1, 2, 3])
    assert table.read_text() == before  # (same day): rewriting changes nothing


def finished_run(run_dir: Path, seed: int, score: float, created: str, hardware: str) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"status": "finished", "seed": seed, "total_steps": 100_000,
                                                      "eval_return_mean": score, "wall_time_s": 60.0}))
    (run_dir / "config.yaml").write_text(yaml.safe_dump({
        "train": {"total_timesteps": 100_000}, "solved": {"return": 475.0},
        "provenance": {"created": created, "hardware": hardware, "versions": {"torch": "2.13.0+cpu"}}}))
    (run_dir / "metrics.csv").write_text("global_step\n")  # not kept


def test_finished_runs_of_two_sessions_add_up_to_one_row(tmp_path):
    module = suite_module()
    first, second, kept = tmp_path / "first", tmp_path / "second", tmp_path / "results"
    finished_run(first / "CartPole-v1_ppo" / "s1", 1, 500.0, "2026-11-24T10:00:00+0000", "AMD EPYC (avx2), 2 cores")
    (first / "CartPole-v1_ppo" / "s2").mkdir()  # stopped before it finished: not kept
    module.keep(first, kept, [first / "CartPole-v1_ppo" / "s1", first / "CartPole-v1_ppo" / "s2"])
    assert sorted(p.name for p in (kept / "CartPole-v1_ppo" / "s1").iterdir()) == ["config.yaml", "summary.json"]
    assert not (kept / "CartPole-v1_ppo" / "s2").exists()

    module.restore(kept, second)  # a later session, on another machine, runs seed 2
    finished_run(second / "CartPole-v1_ppo" / "s2", 2, 480.0, "2026-11-26T10:00:00+0000", "Intel Xeon (avx2), 2 cores")
    table = tmp_path / "table.md"
    module.write_table({"rows": [{"spec": "CartPole-v1:ppo", "anchor": {"return": 500.0}}]}, tmp_path / "suite.yaml",
                       second, table, [1, 2])
    rows, machines = module.earlier_table(table)
    cells = rows["CartPole-v1:ppo"]
    assert cells[2:5] == ["100,000, 100,000", "2/2", "490 [480, 500]"] and cells[8] == "2.0 min"
    assert cells[9] == "2026-11-24 [1], 2026-11-26 [2]"
    assert machines == ["AMD EPYC (avx2), 2 cores; torch 2.13.0+cpu", "Intel Xeon (avx2), 2 cores; torch 2.13.0+cpu"]
