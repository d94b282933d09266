"""`rlfoundry bench arch` end to end: every (env, algorithm, core) trains in its own process and lands in one table,
CSV and plot."""

import csv
import math

import pytest
from typer.testing import CliRunner

from rlfoundry.cli import app

TINY = ["eval.episodes=2", "eval.every_steps=256", "logging.tensorboard=false"]
# DQN's CartPole-v1 preset learns from step 1000 on, 128 gradient steps at a time: shrunk (the smoke check's sizes)
# so that its runs learn within 512 steps and stay quick; PPO's settings have no such keys.
TINY_DQN = ["dqn:algo.learning_starts=0", "dqn:algo.train_freq=64", "dqn:algo.gradient_steps=2",
            "dqn:algo.batch_size=16", "dqn:algo.buffer_size=1000", "dqn:network.hidden_sizes=[64]"]


def _rows(out):
    with (out / "arch.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_bench_arch_writes_a_row_per_core(tmp_path):
    out = tmp_path / "arch"
    result = CliRunner().invoke(app, [
        "bench", "arch", "CartPole-v1", *TINY, "--cores", "mlp,lstm", "--seeds", "1", "--steps", "512",
        "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    rows = {row["core"]: row for row in _rows(out)}
    assert list(rows) == ["mlp", "lstm"]
    for row in rows.values():
        assert (row["env"], row["algo"], row["spec"]) == ("CartPole-v1", "ppo", "CartPole-v1:ppo-masked")
        assert float(row["sps"]) > 0 and float(row["latency_ms"]) > 0 and float(row["peak_memory_mb"]) > 0
        assert 0 < float(row["return_mean"]) <= 500
        # one seed: nothing to resample, the interval is the point (and the IQM of one value is that value)
        assert float(row["return_low"]) == float(row["return_iqm"]) == float(row["return_high"])
    assert float(rows["mlp"]["sps_vs_mlp"]) == 1.0
    assert int(rows["lstm"]["params"]) > int(rows["mlp"]["params"])  # the LSTM's own weights
    table = (out / "arch.md").read_text()
    assert "CartPole-v1:ppo-masked" in table and "| CartPole-v1 | ppo | lstm |" in table
    assert (out / "arch.png").stat().st_size > 10_000
    assert (out / "runs" / "CartPole-v1_ppo_lstm_s1" / "summary.json").exists()


def test_bench_arch_crosses_algorithms_and_cores(tmp_path):
    out = tmp_path / "arch"
    result = CliRunner().invoke(app, [
        "bench", "arch", "CartPole-v1", *TINY, *TINY_DQN, "--algos", "ppo,dqn", "--cores", "mlp,gru",
        "--seeds", "1", "--steps", "512", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    rows = {(row["algo"], row["core"]): row for row in _rows(out)}
    assert list(rows) == [("ppo", "mlp"), ("ppo", "gru"), ("dqn", "mlp"), ("dqn", "gru")]
    assert rows["dqn", "gru"]["spec"] == "CartPole-v1:dqn-masked"  # the POMDP, as ppo-masked for ppo
    for (algo, core), row in rows.items():
        assert row["env"] == "CartPole-v1"
        low, iqm, high = float(row["return_low"]), float(row["return_iqm"]), float(row["return_high"])
        assert all(map(math.isfinite, (low, iqm, high))) and low <= iqm <= high
        assert int(row["params"]) > 0 and float(row["sps"]) > 0
        assert f"| CartPole-v1 | {algo} | {core} |" in (out / "arch.md").read_text()
    for algo in ("ppo", "dqn"):
        assert float(rows[algo, "mlp"]["sps_vs_mlp"]) == 1.0  # each algorithm against its own mlp row
        assert int(rows[algo, "gru"]["params"]) > int(rows[algo, "mlp"]["params"])
    # DQN's target network is a copy, not parameters of its own: the count is the online network's
    assert int(rows["dqn", "mlp"]["params"]) == (2 * 64 + 64) + (64 * 2 + 2)  # 2 inputs: the velocities hidden
    assert (out / "arch.png").stat().st_size > 10_000


@pytest.mark.parametrize(("algo", "core", "named"), [
    ("dreamer", "lstm", "network.core"),  # DreamerV3 keeps its own recurrent state model: identity only
    ("dqn", "mlp", "acts in Discrete action spaces"),  # the config resolves; the action space is what DQN cannot take
])
def test_an_impossible_combination_fails_before_training(tmp_path, algo, core, named):
    out = tmp_path / "arch"
    result = CliRunner().invoke(app, ["bench", "arch", "Pendulum-v1", "--algos", algo, "--cores", core,
                                      "--seeds", "1", "--steps", "64", "--out", str(out)])  # tiny, were it to run
    assert result.exit_code == 2, result.output
    assert named in result.output and algo in result.output
    assert not out.exists()  # nothing trained, nothing written


def test_unknown_core_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["bench", "arch", "CartPole-v1", "--cores", "mlp,rnn", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "rnn" in result.output and "allowed: mlp, lstm" in result.output
