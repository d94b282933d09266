"""benchmarks/suite.py's table: rows measured in another session keep their line, date and machine; a table from
before the `measured` column reads as measured on its header's date and machine."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "suite.py"


def suite_module():
    spec = importlib.util.spec_from_file_location("benchmark_suite", SUITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_rows_without_runs_here_keep_their_lines_and_machines(tmp_path, monkeypatch):
    module = suite_module()
    monkeypatch.setattr(module, "machine", lambda: "machine: Intel Xeon (avx2), 2 cores; torch 2.13.0+cpu")
    table = tmp_path / "table.md"
    table.write_text(OLD)
    suite = {"rows": [{"spec": "CartPole-v1:ppo"}, {"spec": "Pendulum-v1:ppo", "anchor": {"return": -172.2}}]}
    module.write_table(suite, tmp_path / "suite.yaml", tmp_path / "runs", table, [1, 2, 3])
    rows, machines = module.earlier_table(table)
    assert machines == ["AMD EPYC (avx, avx2; no native bf16), 2 cores; torch 2.13.0+cpu",
                        "Intel Xeon (avx2), 2 cores; torch 2.13.0+cpu"]
    assert rows["CartPole-v1:ppo"][3:5] == ["3/3", "500 [500, 500]"] and rows["CartPole-v1:ppo"][9] == "2026-11-24 [1]"
    assert rows["Pendulum-v1:ppo"][3] == "0/3" and rows["Pendulum-v1:ppo"][9].endswith("[2]")  # none run here yet
    before = table.read_text()
    module.write_table(suite, tmp_path / "suite.yaml", tmp_path / "runs", table, [1, 2, 3])
    assert table.read_text() == before  # (same day): rewriting changes nothing
