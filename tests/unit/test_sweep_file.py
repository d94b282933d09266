"""The sweep file: its closed schema, the checks against the config schema (bad files exit 2 naming the key and
create nothing), values carried to runs as overrides, objectives, the experiment file of a trial, continuation checks
and the evaluation grid that pruning reports on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlfoundry.cli import app
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config, parse_override
from rlfoundry.studies.sweep import _grid_step, _pruner, _record, prepare
from rlfoundry.studies.sweep_file import OBJECTIVES, experiment, override_text, overrides, read_sweep

GOOD = """\
base: CartPole-v1:ppo
overrides: [train.total_timesteps=4096]
method: tpe
budget: {trials: 4}
parameters:
  algo.lr: {float: [1.0e-5, 1.0e-2], log: true}
  algo.num_steps: {choice: [32, 64]}
"""


def sweep_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "250", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.mark.parametrize("edit, named", [
    ({"algo.lr: {float: [1.0e-5, 1.0e-2], log: true}": "algo.lrr: {float: [1.0e-5, 1.0e-2]}"},
     ["algo.lrr", "did you mean 'lr'"]),
    ({"[1.0e-5, 1.0e-2]": "[1.0e-2, 1.0e-5]"}, ["parameters.algo.lr", "empty range"]),
    ({"[1.0e-5, 1.0e-2]": "[0.0, 1.0e-2]"}, ["parameters.algo.lr", "log range"]),
    ({"method: tpe": "method: tpee"}, ["method", "'tpe'"]),
    ({"method: tpe": "method: grid"}, ["parameters.algo.lr", "grid"]),
    ({"method: tpe": "methd: tpe"}, ["methd", "did you mean 'method'"]),
    ({"budget: {trials: 4}": "budget: {trials: 4}\npruner: {kind: median, startup: 1}"},
     ["pruner.startup", "did you mean 'startup_trials'"]),
    ({"algo.num_steps: {choice: [32, 64]}": "algo.num_steps: {choice: [32, -1]}"}, ["algo.num_steps = -1"]),
    ({"algo.num_steps": "train.seed"}, ["train.seed", "set by the sweep"]),
    ({"budget: {trials: 4}": "budget: {}"}, ["budget", "trials, minutes"]),
    ({"algo.num_steps": "algoo.num_steps"}, ["algoo", "did you mean 'algo"]),
    ({"method: tpe": "base: CartPole-v1:a2c\nmethod: tpe"}, ["line 3", "key 'base' given twice (first at line 1)"]),
])
def test_a_bad_sweep_file_exits_2_naming_the_key_and_creates_nothing(tmp_path, monkeypatch, edit, named):
    text = GOOD
    for old, new in edit.items():
        text = text.replace(old, new)
    monkeypatch.chdir(tmp_path)
    result = invoke("sweep", str(sweep_file(tmp_path, text)), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    for part in named:
        assert part in result.output, result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_cmaes_without_its_package_names_it(tmp_path, monkeypatch):
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "cmaes" else find(name, *args))
    with pytest.raises(ConfigError, match="pip install cmaes"):
        prepare(sweep_file(tmp_path, GOOD.replace("method: tpe", "method: cmaes")))


def test_cmaes_searches_the_sweeps_space_and_closes_in_on_the_best(tmp_path):
    """CMA-ES (Optuna's CmaEsSampler on the cmaes package) over the sweep's distributions, on a known objective:
    its proposals stay in the ranges and the later ones come closer to the optimum than the first ones."""
    import numpy as np
    import optuna

    from rlfoundry.studies.sweep import distributions, sampler

    text = GOOD.replace("method: tpe", "method: cmaes").replace("  algo.num_steps: {choice: [32, 64]}\n",
                                                                 "  algo.gamma: {float: [0.9, 0.999]}\n")
    sweep = read_sweep(sweep_file(tmp_path, text))
    study = optuna.create_study(direction="maximize", sampler=sampler(sweep, 0))
    errors = []
    for _ in range(60):
        trial = study.ask(distributions(sweep))
        lr, gamma = trial.params["algo.lr"], trial.params["algo.gamma"]
        assert 1e-5 <= lr <= 1e-2 and 0.9 <= gamma <= 0.999
        errors.append(abs(np.log10(lr) + 3.5) + abs(gamma - 0.95) * 20)
        study.tell(trial, -errors[-1])
    assert type(study.sampler).__name__ == "CmaEsSampler"
    assert np.median(errors[-15:]) < 0.5 * np.median(errors[:15])


@pytest.mark.parametrize("value", [1e-12, 3e-4, "lin_0.2", "1e-3", [64, 64], {"kind": "linear", "start": 1.0},
                                   True, None, 7])
def test_a_value_travels_to_a_run_as_an_override_unchanged(value):
    assert parse_override(f"algo.x={override_text(value)}")[1] == value


def test_choices_of_lists_and_schedules_reach_the_config(tmp_path):
    sweep = read_sweep(sweep_file(tmp_path, GOOD.replace(
        "algo.num_steps: {choice: [32, 64]}",
        "network.hidden_sizes: {choice: [[32], [64, 64]]}\n  algo.clip_coef: {choice: [lin_0.2, 0.1]}")))
    hidden, clip = sweep.parameters["network.hidden_sizes"], sweep.parameters["algo.clip_coef"]
    assert hidden.labels == ["[32]", "[64, 64]"] and clip.labels == ["lin_0.2", 0.1]
    labels = {"algo.lr": 1e-3, "network.hidden_sizes": "[64, 64]", "algo.clip_coef": "lin_0.2"}
    cfg = load_config(sweep.base, [*sweep.overrides, *overrides(sweep, labels)])
    assert cfg.network.hidden_sizes == [64, 64] and cfg.algo.clip_coef.kind == "linear" and cfg.algo.lr.start == 1e-3


def test_the_experiment_of_a_trial_nests_overrides_parameters_and_seed(tmp_path):
    sweep = read_sweep(sweep_file(tmp_path, GOOD))
    data = experiment(sweep, "CartPole-v1:ppo", {"algo.lr": 0.002, "algo.num_steps": 64}, seed=3)
    assert data == {"preset": "CartPole-v1:ppo", "train": {"total_timesteps": 4096, "seed": 3},
                    "algo": {"lr": 0.002, "num_steps": 64}}
    base = tmp_path / "base.yaml"
    base.write_text("preset: CartPole-v1:ppo\nenv:\n  num_envs: 2\n")
    data = experiment(sweep, str(base), {"algo.lr": 0.002, "algo.num_steps": 64}, seed=3)
    assert data["env"] == {"num_envs": 2} and data["preset"] == "CartPole-v1:ppo" and data["train"]["seed"] == 3


def test_objectives_over_seeds():
    assert OBJECTIVES["mean"]([1.0, 2.0, 3.0, 100.0]) == 26.5
    assert OBJECTIVES["iqm"]([1.0, 2.0, 3.0, 100.0]) == 2.5  # the middle half
    assert OBJECTIVES["min"]([1.0, 2.0, 3.0, 100.0]) == 1.0


def test_a_continuation_must_use_the_same_sweep_apart_from_its_budget(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    text = GOOD + "pruner: median\n"
    assert _record(out, prepare(sweep_file(tmp_path, text)), "optuna") == "CartPole-v1:ppo"
    _record(out, prepare(sweep_file(tmp_path, text.replace("trials: 4", "trials: 9"))), "optuna")
    with pytest.raises(ConfigError, match="parameters"):
        _record(out, prepare(sweep_file(tmp_path, text.replace("[32, 64]", "[32, 128]"))), "optuna")
    with pytest.raises(ConfigError, match="--backend optuna"):
        _record(out, prepare(sweep_file(tmp_path, text)), "ray")


def test_a_ray_sweep_continues_on_ray_with_the_same_budget(tmp_path):
    out = tmp_path / "out"
    (out / "tune").mkdir(parents=True)  # Ray Tune's experiment directory: the sweep began on Ray
    text = GOOD + "pruner: median\n"
    _record(out, prepare(sweep_file(tmp_path, text)), "ray")
    with pytest.raises(ConfigError, match="budget"):  # Tune restores the sweep as it began
        _record(out, prepare(sweep_file(tmp_path, text.replace("trials: 4", "trials: 9"))), "ray")
    with pytest.raises(ConfigError, match="--backend ray"):
        _record(out, prepare(sweep_file(tmp_path, text)), "optuna")


def test_a_base_file_is_copied_and_a_changed_one_refused(tmp_path):
    (tmp_path / "exp.yaml").write_text("preset: CartPole-v1:ppo\neval:\n  episodes: 3\n")
    out = tmp_path / "out"
    out.mkdir()
    plan = prepare(sweep_file(tmp_path, GOOD.replace("CartPole-v1:ppo", "exp.yaml")))
    assert _record(out, plan, "optuna") == str(out / "base.yaml")
    (tmp_path / "exp.yaml").write_text("preset: CartPole-v1:ppo\neval:\n  episodes: 5\n")
    with pytest.raises(ConfigError, match="base file"):
        _record(out, prepare(plan.path), "optuna")


def test_evaluations_are_reported_on_the_evaluation_grid():
    assert [_grid_step(step, 2048, 10_000) for step in (2048, 2176, 4100, 10_240)] == [2048, 2048, 4096, 10_000]
    assert _grid_step(640, 0, 640) == 640  # only the final evaluation


@pytest.mark.parametrize("pruner, name, first_rung", [
    ("median", "MedianPruner", None), ("asha", "SuccessiveHalvingPruner", 2048),
    ("{kind: hyperband, min_steps: 4096}", "HyperbandPruner", 4096), ("none", "NopPruner", None)])
def test_pruners_have_rungs_in_env_steps(tmp_path, pruner, name, first_rung):
    plan = prepare(sweep_file(tmp_path, GOOD + f"pruner: {pruner}\n"))
    made = _pruner(plan.sweep, plan.cfg.model_copy(update={"eval": plan.cfg.eval.model_copy(
        update={"every_steps": 2048})}))
    assert type(made).__name__ == name
    if first_rung is not None:
        assert made._min_resource == first_rung


def test_the_parallel_coordinates_plot_shows_pruned_trials_at_their_last_value(tmp_path):
    import optuna
    from optuna.trial import TrialState

    from rlfoundry.studies.sweep import distributions
    from rlfoundry.studies.sweep_report import with_pruned, write_report

    sweep = read_sweep(sweep_file(tmp_path, GOOD))
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"algo.lr": 1e-3, "algo.num_steps": 32},
                                              distributions=distributions(sweep), value=400.0))
    for number, lr in enumerate((1e-4, 3e-5)):  # cut short at 2,048 steps, having reported 50 and then 20 + number
        study.add_trial(optuna.trial.create_trial(
            params={"algo.lr": lr, "algo.num_steps": 64}, distributions=distributions(sweep), state=TrialState.PRUNED,
            intermediate_values={1024: 50.0, 2048: 20.0 + number}))
    shown = with_pruned(study)
    assert [trial.value for trial in shown.trials] == [400.0, 20.0, 21.0]
    out = tmp_path / "out"
    out.mkdir()
    write_report(out, study, sweep, "CartPole-v1:ppo")  # one completed trial: only the pruned make it a plot
    assert (out / "parallel.png").stat().st_size > 10_000


def test_the_report_of_a_study_names_the_best_trial_its_importances_and_every_trial(tmp_path):
    import optuna

    from rlfoundry.studies.sweep import distributions
    from rlfoundry.studies.sweep_report import write_report

    sweep = read_sweep(sweep_file(tmp_path, GOOD.replace("budget: {trials: 4}", "budget: {trials: 12}\n"
                                                         "seeds_per_trial: 2")))
    study = optuna.create_study(direction="maximize")
    for number in range(12):
        lr, steps = 10 ** (-5 + number / 4), (32, 64)[number % 2]
        returns = [100 * number + steps, 100 * number]  # seed 1 is the better one
        study.add_trial(optuna.trial.create_trial(
            params={"algo.lr": lr, "algo.num_steps": steps}, distributions=distributions(sweep),
            value=float(sum(returns)) / 2, user_attrs={"returns": returns}))
    out = tmp_path / "out"
    out.mkdir()
    write_report(out, study, sweep, "CartPole-v1:ppo")
    report = (out / "sweep.md").read_text()
    assert "## Best: trial 11, objective 1132" in report and "## Parameter importances" in report
    assert report.count("| complete |") == 12 and "![optimisation history](history.png)" in report
    assert (out / "history.png").stat().st_size > 10_000 and (out / "parallel.png").stat().st_size > 10_000
    best = load_config(str(out / "best.yaml"))
    assert best.train.seed == 1 and best.algo.num_steps == 64 and best.algo.lr.start == pytest.approx(10 ** -2.25)


def test_a_number_range_on_a_scheduled_key_is_said_before_the_sweep_starts(tmp_path):
    """CartPole-v1:ppo's lr is lin_1e-3: a float range trains constants instead, and the plan says so (the CLI prints
    it as a warning); a range on a key the base sets to a number says nothing."""
    from rlfoundry.studies.sweep import prepare

    (note,) = prepare(sweep_file(tmp_path, GOOD)).notes
    assert note.startswith("parameters.algo.lr: the base's linear schedule (from 0.001 to 0)") and "choice" in note
    constant = GOOD.replace("algo.lr: {float: [1.0e-5, 1.0e-2], log: true}", "algo.gamma: {float: [0.9, 0.999]}")
    assert prepare(sweep_file(tmp_path, constant)).notes == []  # gamma is a number in the base
