"""Metric monitors (`rlfoundry.run.monitors`): each default fires once on a crafted stream, after `patience`
iterations, and ends after recovery; config overrides; the sparkline; and short healthy runs that stay silent."""

from __future__ import annotations

import csv
import json
import math
from io import StringIO

import pytest
from rich.console import Console

import rlfoundry
from rlfoundry.algos import algorithms
from rlfoundry.algos.registry import known_monitor_keys
from rlfoundry.config.errors import ConfigError
from rlfoundry.config.monitors import MonitorsConfig
from rlfoundry.experiment.load import load_config, validate
from rlfoundry.run.monitors import ALERTS, Monitors
from rlfoundry.sinks.console import sparkline

# (algorithm, metric): a healthy level and a level out of the default bounds
STREAMS = {
    ("ppo", "diag/approx_kl"): (0.01, 0.2),
    ("ppo", "diag/clipfrac"): (0.1, 0.6),
    ("ppo", "loss/entropy"): (0.69, 0.01),  # entropy collapse
    ("ppo", "loss/value"): (2.0, 2000.0),  # value-loss blow-up
    ("ppo", "diag/grad_norm"): (0.5, 500.0),
    ("a2c", "loss/entropy"): (1.38, 0.05),
    ("a2c", "loss/value"): (5.0, 5e4),
    ("a2c", "diag/grad_norm"): (3.0, 3e3),
    ("reinforce", "loss/entropy"): (0.69, 0.02),
    ("reinforce", "loss/value"): (0.5, 500.0),
    ("dqn", "diag/q_mean"): (20.0, 5000.0),  # Q-value divergence
    ("dqn", "loss/q"): (0.1, 50.0),
    ("sac", "diag/alpha"): (1.0, 1e-6),  # α collapse
    ("sac", "diag/q_mean"): (-50.0, -1e4),
    ("sac", "loss/critic"): (0.05, 100.0),
    ("td3", "diag/q_mean"): (-50.0, -1e4),
    ("td3", "loss/critic"): (0.05, 100.0),
    ("ddpg", "diag/q_mean"): (-50.0, -1e4),
    ("ddpg", "loss/critic"): (0.05, 100.0),
}
PATIENCE = MonitorsConfig().patience


def feed(monitors: Monitors, key: str, values: list[float], start: int = 0) -> list[tuple[str, list]]:
    """(alerts cell, lines) of each row {key: value}, at steps 100, 200, ..."""
    return [monitors.observe(100 * (start + i + 1), {key: value}) for i, value in enumerate(values)]


def test_every_default_monitor_has_a_crafted_stream():
    assert set(STREAMS) == {(name, key) for name, cls in algorithms().items() for key in cls.monitors}


@pytest.mark.parametrize(("algo", "key"), list(STREAMS), ids=[f"{a}:{k}" for a, k in STREAMS])
def test_a_default_monitor_warns_once_after_patience_and_ends_after_recovery(algo, key):
    healthy, bad = STREAMS[(algo, key)]
    monitors = Monitors(MonitorsConfig(), algo, discrete=True)
    warm = feed(monitors, key, [healthy] * 6)
    assert all(cell == "" and not lines for cell, lines in warm)

    excursion = feed(monitors, key, [bad] * (PATIENCE + 2), start=6)
    for cell, lines in excursion[:PATIENCE - 1]:  # out of bounds, not yet for long enough
        assert cell == "" and not lines
    cell, lines = excursion[PATIENCE - 1]
    assert cell == key
    assert [level for level, _ in lines] == ["warning"]
    text = lines[0][1]
    side = "above" if bad > healthy else "below"
    assert text.startswith(f"monitor: {key} = {bad:.4g} {side} ") and f"for {PATIENCE} iterations" in text
    assert text.endswith(f"(step {100 * (6 + PATIENCE):,})")
    assert all(cell == key and not lines for cell, lines in excursion[PATIENCE:])  # marked, never repeated

    recovery = feed(monitors, key, [healthy] * PATIENCE, start=6 + PATIENCE + 2)
    assert all(cell == "" for cell, _ in recovery)
    assert [lines for _, lines in recovery[:-1]] == [[]] * (PATIENCE - 1)
    assert [level for level, _ in recovery[-1][1]] == ["info"] and "back within bounds" in recovery[-1][1][0][1]

    again = feed(monitors, key, [bad] * PATIENCE, start=6 + 2 * PATIENCE + 2)  # a new excursion warns again
    assert [level for _, lines in again for level, _ in lines] == ["warning"]


def test_a_flapping_metric_neither_fires_nor_ends_before_patience():
    monitors = Monitors(MonitorsConfig(), "ppo", discrete=True)
    flapping = [0.2, 0.2, 0.01] * 4  # never `patience` in a row out of bounds
    assert not any(lines for _, lines in feed(monitors, "diag/approx_kl", flapping))
    fired = feed(monitors, "diag/approx_kl", [0.2] * 3 + [0.01, 0.01, 0.2] * 4)
    assert [level for _, lines in fired for level, _ in lines] == ["warning"]  # short returns do not end the alert


def test_missing_and_nan_values_leave_a_monitor_as_it_was():
    monitors = Monitors(MonitorsConfig(), "ppo", discrete=True)
    rows = [{"diag/approx_kl": 0.2}, {}, {"diag/approx_kl": math.nan}, {"diag/approx_kl": 0.2},
            {"diag/approx_kl": None}, {"diag/approx_kl": 0.2}]
    results = [monitors.observe(step, row) for step, row in enumerate(rows)]
    assert [cell for cell, _ in results] == ["", "", "", "", "", "diag/approx_kl"]


def test_relative_bounds_wait_for_their_reference_and_name_it():
    monitors = Monitors(MonitorsConfig(warmup=3), "ppo", discrete=True)
    # the first `warmup` values are the reference, never judged: a low start is not a collapse
    assert not any(lines for _, lines in feed(monitors, "loss/entropy", [0.5, 0.6, 0.7]))
    results = feed(monitors, "loss/entropy", [0.01] * 3, start=3)
    (level, text), = results[-1][1]
    assert level == "warning"
    assert "loss/entropy = 0.01 below 0.06 (0.1 × its initial 0.6)" in text

    monitors = Monitors(MonitorsConfig(warmup=1, patience=1), "ppo", discrete=True)
    (_, lines), = feed(monitors, "loss/value", [2.0, 900.0])[1:]  # the bound it was judged by, not the next one
    assert lines == [("warning", "monitor: loss/value = 900 above 200 (100 × its recent median 2) for 1 iteration "
                                 "(step 200)")]


def test_patience_is_global_or_per_metric():
    cfg = MonitorsConfig.model_validate({"patience": 5, "metrics": {"diag/clipfrac": {"patience": 1}}})
    monitors = Monitors(cfg, "ppo", discrete=True)
    assert monitors.monitors["diag/approx_kl"].patience == 5
    assert monitors.observe(1, {"diag/clipfrac": 0.9})[0] == "diag/clipfrac"  # at once


def test_state_round_trips_through_a_checkpoint():
    stream = [1.0] * 6 + [500.0] * 2 + [1.0] + [500.0] * 5
    whole = Monitors(MonitorsConfig(), "ppo", discrete=True)
    expected = feed(whole, "loss/value", stream)
    first = Monitors(MonitorsConfig(), "ppo", discrete=True)
    got = feed(first, "loss/value", stream[:7])
    resumed = Monitors(MonitorsConfig(), "ppo", discrete=True)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got += feed(resumed, "loss/value", stream[7:], start=7)
    assert got == expected
    fresh = Monitors(MonitorsConfig(), "ppo", discrete=True)
    fresh.load_state_dict(None)  # a checkpoint from before monitors: they start afresh
    assert fresh.state_dict() == Monitors(MonitorsConfig(), "ppo", discrete=True).state_dict()


# ---------------------------------------------------------------- config


def monitors_of(overrides: list[str], spec: str = "CartPole-v1:ppo", discrete: bool = True) -> Monitors:
    cfg = load_config(spec, [f"logging.monitors.{item}" for item in overrides])
    return Monitors(cfg.logging.monitors, cfg.algo.name, discrete)


def test_an_override_changes_one_bound_and_keeps_the_rest_of_the_default():
    monitors = monitors_of(["metrics.diag/approx_kl.max=0.5", "metrics.loss/value.max=10"])
    assert not any(lines for _, lines in feed(monitors, "diag/approx_kl", [0.2] * 6))  # 0.2 is now in bounds
    value = monitors.monitors["loss/value"].rule
    assert value.max == 10 and value.relative_to == "median"  # the default's kind stays


def test_an_override_turns_one_monitor_off_or_adds_one():
    monitors = monitors_of(["metrics.loss/entropy.enabled=false", "metrics.train/episode_length.min=20"])
    assert "loss/entropy" not in monitors.monitors and "diag/approx_kl" in monitors.monitors
    assert [lines[0][0] for _, lines in feed(monitors, "train/episode_length", [9.0] * 3) if lines] == ["warning"]


def test_entropy_collapse_is_off_for_continuous_actions_unless_asked_for():
    assert "loss/entropy" not in monitors_of([], discrete=False).monitors
    rule = monitors_of(["metrics.loss/entropy.enabled=true"], discrete=False).monitors["loss/entropy"].rule
    assert rule.relative_to == "initial" and rule.min == 0.1


def test_a_resolved_config_keeps_only_the_overrides_given():
    cfg = load_config("CartPole-v1:ppo", ["logging.monitors.metrics.loss/value.max=10"])
    dumped = cfg.model_dump(mode="json", by_alias=True)
    assert dumped["logging"]["monitors"]["metrics"] == {"loss/value": {"max": 10.0}}
    again = validate(json.loads(json.dumps(dumped)))
    ppo = algorithms()["ppo"].monitors, known_monitor_keys()
    assert again.logging.monitors.resolve("ppo", *ppo) == cfg.logging.monitors.resolve("ppo", *ppo)


@pytest.mark.parametrize(("overrides", "expected"), [
    (["metrics.diag/approx_kl.min=0.1", "metrics.diag/approx_kl.max=0.01"],
     ["logging.monitors.metrics.diag/approx_kl", "min 0.1 is above max 0.01"]),
    (["metrics.diag/approx_kl.min=0.1"], ["logging.monitors.metrics.diag/approx_kl", "max is ppo's default"]),
    (["metrics.diag/aprox_kl.max=0.1"], ["diag/aprox_kl", "did you mean 'diag/approx_kl'"]),
    (["metrics.time/learn.max=1"], ["logging.monitors.metrics.time/learn", "not a metric key", "diag/..."]),
    (["metrics.diag/something.relative_to=median"], ["diag/something", "sets no bound"]),
    (["metrics.diag/approx_kl.maxx=1"], ["diag/approx_kl.maxx", "unknown key", "did you mean 'max'"]),
    (["metrics.loss/value.relative_to=mean"], ["loss/value.relative_to", "'none'", "'initial'", "'median'"]),
    (["patience=0"], ["logging.monitors.patience", "greater than 0"]),
], ids=["min above max", "min above the default max", "misspelt key", "timing key", "no bound", "unknown field",
        "unknown kind", "patience"])
def test_bad_monitor_configs_are_config_errors_naming_the_key(overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_config("CartPole-v1:ppo", [f"logging.monitors.{item}" for item in overrides])
    for text in expected:
        assert text in str(info.value), str(info.value)


# ---------------------------------------------------------------- sparkline


def test_sparkline_scales_the_last_values_to_their_own_range():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([10, 20]) == sparkline([-1, 1]) == "▁█"
    assert sparkline(range(100), width=4) == "▁▃▆█"  # only the last `width`
    assert sparkline([3.0, 3.0, 3.0]) == "▄▄▄"  # flat
    assert sparkline([1.0, None, math.nan, math.inf, 2.0]) == "▁   █"
    assert sparkline([]) == sparkline([None, math.nan]) == sparkline([1, 2], width=0) == ""


# ---------------------------------------------------------------- healthy runs


def alert_cells(run_dir) -> list[str]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [row[ALERTS] for row in csv.DictReader(f)]


@pytest.mark.parametrize(("spec", "overrides"), [
    ("CartPole-v1:ppo", ["train.total_timesteps=2560"]),
    # learning from step 500, a gradient step every 2 env steps as the preset, a smaller net: q_mean on 23 rows
    # (a row per iteration)
    ("CartPole-v1:dqn", ["train.total_timesteps=2000", "algo.learning_starts=500", "algo.train_freq=64",
                         "algo.gradient_steps=32", "network.hidden_sizes=[64,64]", "logging.every_steps=0"]),
], ids=["ppo", "dqn"])
def test_a_healthy_cartpole_run_raises_no_alert(tmp_path, quiet, spec, overrides, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the runs registry (logging.runs_root) too
    console = Console(file=StringIO(), width=200)
    short = ["eval.every_steps=0", "eval.episodes=1", "checkpoint.every_steps=0", "train.torch_threads=1"]
    run_dir, summary = rlfoundry.train(spec, [*quiet, *overrides, *short], tmp_path / "run", console=console)
    assert summary["status"] == "finished"
    cells = alert_cells(run_dir)
    assert len(cells) > 8 and set(cells) == {""}
    assert "monitor:" not in (run_dir / "run.log").read_text()
    assert "monitor:" not in console.file.getvalue()


def test_an_alert_is_one_line_on_the_console_and_in_run_log_and_marks_its_rows(tmp_path, quiet, monkeypatch):
    monkeypatch.chdir(tmp_path)
    console = Console(file=StringIO(), width=200)
    overrides = [*quiet, "train.total_timesteps=1280", "eval.every_steps=0", "eval.episodes=1", "train.torch_threads=1",
                 "logging.monitors.metrics.diag/approx_kl.max=0"]
    run_dir, _ = rlfoundry.train("CartPole-v1:ppo", overrides, tmp_path / "run", console=console)
    assert alert_cells(run_dir) == ["", ""] + ["diag/approx_kl"] * 3  # from the third iteration out of bounds
    logged = [line for line in (run_dir / "run.log").read_text().splitlines() if "monitor:" in line]
    assert len(logged) == 1, logged
    assert " WARNING monitor: diag/approx_kl = " in logged[0]
    assert logged[0].endswith(" above 0 for 3 iterations (step 768)")
    printed = [line for line in console.file.getvalue().splitlines() if "monitor:" in line]
    assert printed == [f"warning: {logged[0].split(' WARNING ')[1]}"]
