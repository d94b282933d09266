"""`rlfoundry bench arch` end to end: every core trains in its own process and lands in one table, CSV and plot."""

import csv

from typer.testing import CliRunner

from rlfoundry.cli import app


def test_bench_arch_writes_a_row_per_core(tmp_path):
    out = tmp_path / "arch"
    result = CliRunner().invoke(app, [
        "bench", "arch", "CartPole-v1", "eval.episodes=2", "eval.every_steps=256", "logging.tensorboard=false",
        "--cores", "mlp,lstm", "--seeds", "1", "--steps", "512", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    with (out / "arch.csv").open(newline="") as f:
        rows = {row["core"]: row for row in csv.DictReader(f)}
    assert list(rows) == ["mlp", "lstm"]
    for row in rows.values():
        assert float(row["sps"]) > 0 and float(row["latency_ms"]) > 0 and float(row["peak_memory_mb"]) > 0
        assert 0 < float(row["return_mean"]) <= 500
    assert int(rows["lstm"]["params"]) > int(rows["mlp"]["params"])  # the LSTM's own weights
    table = (out / "arch.md").read_text()
    assert "CartPole-v1:ppo-masked" in table and "| lstm |" in table
    assert (out / "arch.png").stat().st_size > 10_000
    assert (out / "runs" / "lstm_s1" / "summary.json").exists()


def test_unknown_core_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["bench", "arch", "CartPole-v1", "--cores", "mlp,rnn", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "rnn" in result.output and "allowed: mlp, lstm" in result.output
