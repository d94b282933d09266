"""Tables a paper can print, and plots as PDF and SVG: `rlfoundry trials --format/--plots` (studies/results.py,
studies/aggregate.py), `rlfoundry runs export --aggregate` and the per-run LaTeX export (records/tables.py), on
fabricated run directories shaped like the trainer's (no training)."""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from rlfoundry.cli import app
from rlfoundry.records.tables import Column, Table, render
from rlfoundry.studies import stats
from rlfoundry.studies.results import read_run, write_report

REPS = 300
THRESHOLDS = {"CartPole-v1": 475.0, "Acrobot-v1": 100.0, "Pendulum-v1": -250.0}


def fake_run(run_dir: Path, env_id: str, seed: int, final: float | None, status: str = "finished",
             algo: str = "ppo", steps: int = 1000) -> Path:
    """summary.json, config.yaml (with the env's solved threshold) and a metrics.csv with two evaluations."""
    run_dir.mkdir(parents=True)
    summary = {"status": status, "env_id": env_id, "algo": algo, "variant": algo, "seed": seed, "total_steps": steps,
               "wall_time_s": 10.0, "sps": steps / 10.0, "eval_return_mean": final, "best_eval_return": final}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    config = {"variant": algo, "env": {"id": env_id}, "algo": {"name": algo, "lr": 0.001},
              "train": {"total_timesteps": steps, "seed": seed}, "solved": {"return": THRESHOLDS[env_id]}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    rows = ["global_step,eval/return_mean"] + ([] if final is None else [f"{steps // 2},{final / 2}", f"{steps},{final}"])
    (run_dir / "metrics.csv").write_text("\n".join(rows) + "\n")
    return run_dir


def spec_runs(root: Path, spec: str, env_id: str, finals: list[float | None], **kwargs):
    return [read_run(fake_run(root / spec.replace(":", "_") / f"s{seed}", env_id, seed, final,
                              status="finished" if final is not None else "failed", **kwargs), spec, seed)
            for seed, final in enumerate(finals, start=1)]


# Two specs on one env (one with a failed run and returns above 1,000, whose thousands a table must not group),
# and a spec whose name needs escaping in LaTeX, on an env with a negative threshold (no optimality gap).
PPO = [480.0, 1234.5, 350.0, 495.0, None]
A2C = [300.0, 200.0, 410.0, 250.0]
PENDULUM = [-200.0, -150.0, -180.0]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("paper")
    runs = spec_runs(root / "runs", "CartPole-v1:ppo", "CartPole-v1", PPO)
    runs += spec_runs(root / "runs", "CartPole-v1:a2c", "CartPole-v1", A2C)
    runs += spec_runs(root / "runs", "exp/my_sac%.yaml", "Pendulum-v1", PENDULUM)
    return write_report(root / "out", runs, reps=REPS, tables=("latex", "csv", "markdown"),
                        figures=("png", "pdf", "svg"))


def latex_lines(text: str) -> list[str]:
    return text.strip().splitlines()


def assert_booktabs(text: str, rows: int) -> list[list[str]]:
    """The tabular's structure, returning its body's cells: the rules in their places, no \\hline, a cell per
    column on every row."""
    lines = latex_lines(text)
    align = re.fullmatch(r"\\begin\{tabular\}\{([lr]+)\}", lines[0])
    assert align, lines[0]
    assert [lines[1], lines[3], lines[-2], lines[-1]] == [r"\toprule", r"\midrule", r"\bottomrule", r"\end{tabular}"]
    assert r"\hline" not in text and len(lines) == 6 + rows
    cells = []
    for line in [lines[2], *lines[4:-2]]:
        assert line.endswith(r" \\")
        cells.append(line[:-3].split(" & "))
        assert len(cells[-1]) == len(align.group(1)), line
    return cells[1:]


def csv_rows(path: Path) -> dict[str, dict[str, str]]:
    return {row["spec"]: row for row in csv.DictReader(io.StringIO(path.read_text()))}


# ---------------------------------------------------------------- trials: the tables


def test_latex_is_booktabs_with_plain_digits_and_escaped_text(report):
    text = report["aggregate.tex"].read_text()
    body = assert_booktabs(text, rows=3)
    assert re.search(r"\d,\d", text) is None  # no thousands separators, no decimal commas
    cells = [cell for row in body for cell in row] + latex_lines(text)[2][:-3].split(" & ")
    assert not [cell for cell in cells if re.search(r"(?<!\\)[_%&#]", cell)]  # special characters escaped
    assert [row[0] for row in body] == ["CartPole-v1:ppo", "CartPole-v1:a2c", r"exp/my\_sac\%.yaml"]
    assert [row[2] for row in body] == ["4/5", "4/4", "3/3"]
    assert body[0][5] == "488 [350, 1234]"  # the median of 350, 480, 495, 1234.5 at its scale's precision
    assert body[2][3].startswith("$-$176.7 [$-$") and body[2][-1] == "--"  # a true minus; no optimality gap
    header = latex_lines(text)[2]
    assert header.startswith(r"spec & env & runs & IQM [95\% CI] & mean [95\% CI] & median [95\% CI]")
    assert header.endswith(r"optimality gap [95\% CI] \\")


def test_csv_holds_the_stats_functions_numbers(report):
    rows = csv_rows(report["aggregate.csv"])
    assert list(rows) == ["CartPole-v1:ppo", "CartPole-v1:a2c", "exp/my_sac%.yaml"]
    ppo = rows["CartPole-v1:ppo"]
    assert (ppo["env_id"], ppo["runs"], ppo["total"]) == ("CartPole-v1", "4", "5")  # the failed run is not counted
    scores = np.array([final for final in PPO if final is not None]).reshape(-1, 1)
    estimates = stats.interval_estimates(scores, reps=REPS)
    for name in ("iqm", "mean", "median"):
        got = (float(ppo[name]), float(ppo[f"{name}_low"]), float(ppo[f"{name}_high"]))
        assert got == (estimates[name].value, estimates[name].low, estimates[name].high)  # full precision
    gap = stats.interval_estimate(scores / 475.0, stats.optimality_gap, reps=REPS)
    assert float(ppo["optimality_gap"]) == gap.value == pytest.approx(np.mean(np.maximum(1 - scores / 475, 0)))
    assert (float(ppo["optimality_gap_low"]), float(ppo["optimality_gap_high"])) == (gap.low, gap.high)
    pendulum = rows["exp/my_sac%.yaml"]
    assert pendulum["optimality_gap"] == pendulum["optimality_gap_low"] == ""  # a negative threshold: none
    assert float(pendulum["mean"]) == pytest.approx(np.mean(PENDULUM))


def test_improvement_tables(report):
    ppo = np.array([final for final in PPO if final is not None]).reshape(-1, 1)
    a2c = np.array(A2C).reshape(-1, 1)
    p = stats.probability_of_improvement(ppo, a2c, reps=REPS)
    row = next(csv.DictReader(io.StringIO(report["improvement.csv"].read_text())))
    assert (row["x"], row["y"]) == ("CartPole-v1:ppo", "CartPole-v1:a2c")
    assert (float(row["probability"]), float(row["probability_low"]), float(row["probability_high"])) == (
        p.value, p.low, p.high)
    # Pendulum's spec is left out of the comparison (two envs: normalised; its threshold is negative): one pair
    body = assert_booktabs(report["improvement.tex"].read_text(), rows=1)
    assert body[0] == ["CartPole-v1:ppo", "CartPole-v1:a2c", f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}]"]
    assert r"P(X $>$ Y) [95\% CI]" in report["improvement.tex"].read_text()  # OT1 prints a bare > as ¿


def test_markdown_is_a_pipe_table(report):
    lines = report["aggregate.md"].read_text().strip().splitlines()
    assert lines[0].startswith("| spec | env | runs | IQM [95% CI] |") and len(lines) == 2 + 3
    assert set(lines[1]) <= set("|-: ") and lines[1].count("---:") == lines[0].count("|") - 3
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    assert lines[2].startswith("| CartPole-v1:ppo | CartPole-v1 | 4/5 | 488 [350, 1234] | ")
    assert re.search(r"\d,\d", "".join(lines)) is None


def test_trials_md_lists_the_tables_and_says_why_a_gap_is_missing(report):
    md = report["md"].read_text()
    assert "[aggregate.csv](aggregate.csv), [aggregate.md](aggregate.md), [aggregate.tex](aggregate.tex)" in md
    assert "[improvement.tex](improvement.tex)" in md and "Agarwal et al. 2021" in md
    assert "exp/my_sac%.yaml / Pendulum-v1: no optimality gap: its env has no positive solved threshold" in md
    assert "![curves](curves.png) (also [curves.pdf](curves.pdf), [curves.svg](curves.svg))" in md


# ---------------------------------------------------------------- trials: the plots


def test_plots_as_pdf_and_svg(report):
    for name in ("curves", "profile", "improvement"):
        assert report[f"{name}.pdf"].read_bytes().startswith(b"%PDF")
        root = ET.fromstring(report[f"{name}.svg"].read_bytes())
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert report[name].read_bytes().startswith(b"\x89PNG")


def test_a_report_again_removes_what_it_no_longer_writes(tmp_path):
    runs = spec_runs(tmp_path, "CartPole-v1:ppo", "CartPole-v1", [480.0, 400.0])
    runs += spec_runs(tmp_path, "CartPole-v1:a2c", "CartPole-v1", [300.0, 420.0])
    out = tmp_path / "out"
    first = write_report(out, runs, reps=REPS, tables=("latex",), figures=("svg", "pdf"))
    assert {"aggregate.tex", "improvement.tex", "curves.svg", "curves.pdf"} <= set(first)
    assert "curves" not in first and not (out / "curves.png").exists()
    assert "![curves](curves.svg) (also [curves.pdf](curves.pdf))" in first["md"].read_text()
    second = write_report(out, runs, reps=REPS)  # the defaults: trials.md, trials.csv and PNG plots
    assert set(second) == {"csv", "md", "curves", "profile", "improvement"}
    assert sorted(path.name for path in out.iterdir() if path.is_file()) == [
        "curves.png", "improvement.png", "profile.png", "trials.csv", "trials.md"]
    assert "Tables for papers" not in second["md"].read_text()


# ---------------------------------------------------------------- the renderer


def test_one_run_shows_its_point_and_csv_leaves_the_interval_empty():
    columns = (Column("spec", "spec"), Column("iqm", "IQM", "interval"))
    table = Table(columns, (("a", 0.5), ("b", stats.Estimate(-1234.5, -2000.0, 12.0)), ("[c]", None)))
    assert table.render("csv").splitlines() == ["spec,iqm,iqm_low,iqm_high", "a,0.5,,", "b,-1234.5,-2000.0,12.0",
                                                "[c],,,"]
    assert table.render("markdown").splitlines()[2:] == ["| a | 0.500 |", "| b | -1234 [-2000, 12] |", "| [c] | - |"]
    latex = table.render("latex")
    assert "b & $-$1234 [$-$2000, 12] \\\\" in latex
    assert "{}[c] & -- \\\\" in latex  # a row starting with [ would be read as \\[length]


def test_every_latex_special_character_is_escaped():
    text = "a&b%c$d#e_f{g}h~i^j\\k<l>m|n"
    cell = Table((Column("x", "x"),), ((text,),)).render("latex").splitlines()[4]
    assert cell == (r"a\&b\%c\$d\#e\_f\{g\}h\textasciitilde{}i\textasciicircum{}j$\backslash$k$<$l$>$m$|$n \\")


def test_an_unknown_format_is_refused():
    from rlfoundry.config.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown format 'xml'"):
        Table((Column("x", "x"),), ()).render("xml")


# ---------------------------------------------------------------- the commands


def invoke(*args: str | Path):
    result = CliRunner().invoke(app, [str(arg) for arg in args], env={"COLUMNS": "200", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--format", "latex,xml", "--format xml: unknown format; available: csv, markdown, latex"),
    ("--plots", "png,gif", "--plots gif: unknown format; available: png, pdf, svg"),
    ("--plots", "", "--plots: give at least one of png, pdf, svg"),
])
def test_trials_refuses_unknown_formats_before_anything_starts(tmp_path, option, value, message):
    result = invoke("trials", "CartPole-v1:ppo", "--seeds", "2", "--out", tmp_path / "set", option, value)
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert not (tmp_path / "set").exists()


def test_trials_on_a_finished_set_writes_the_tables_and_plots_asked_for(tmp_path):
    out = tmp_path / "set"
    for seed, final in enumerate([480.0, 450.0], start=1):
        fake_run(out / "CartPole-v1_ppo" / f"s{seed}", "CartPole-v1", seed, final)
    result = invoke("trials", "CartPole-v1:ppo", "--seeds", "2", "--out", out, "--format", "csv", "--format",
                    "latex", "--plots", "svg")
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in out.glob("[!.]*") if path.is_file()) == [
        "aggregate.csv", "aggregate.tex", "curves.svg", "trials.csv", "trials.md", "trials.yaml"]
    row = next(csv.DictReader(io.StringIO((out / "aggregate.csv").read_text())))
    assert (row["spec"], row["runs"], row["total"], float(row["mean"])) == ("CartPole-v1:ppo", "2", "2", 465.0)


@pytest.fixture
def runs_root(tmp_path) -> Path:
    """Registry runs: ppo and a2c on CartPole and Acrobot, 3 seeds each (a2c's third Acrobot run failed)."""
    root = tmp_path / "runs"
    finals = {("CartPole-v1", "ppo"): [500.0, 1475.0, 400.0], ("Acrobot-v1", "ppo"): [90.0, 110.0, 80.0],
              ("CartPole-v1", "a2c"): [300.0, 250.0, 475.0], ("Acrobot-v1", "a2c"): [60.0, 70.0, None]}
    for (env_id, algo), returns in finals.items():
        for seed, final in enumerate(returns, start=1):
            fake_run(root / f"{env_id}_{algo}_s{seed}", env_id, seed, final,
                     status="finished" if final is not None else "failed", algo=algo, steps=100_000)
    return root


def test_runs_export_aggregate_per_env_algo_variant(runs_root):
    result = invoke("runs", "export", "--aggregate", "--runs-root", runs_root, "--sort", "seed")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(row["env_id"], row["algo"], row["runs"], row["total"]) for row in rows] == [
        ("Acrobot-v1", "a2c", "2", "3"), ("Acrobot-v1", "ppo", "3", "3"), ("CartPole-v1", "a2c", "3", "3"),
        ("CartPole-v1", "ppo", "3", "3")]
    ppo = np.array([[500.0], [1475.0], [400.0]])
    iqm = stats.interval_estimate(ppo, stats.iqm)
    assert (float(rows[3]["iqm"]), float(rows[3]["iqm_low"]), float(rows[3]["iqm_high"])) == (
        iqm.value, iqm.low, iqm.high)
    assert float(rows[3]["optimality_gap"]) == stats.optimality_gap(ppo / 475.0)

    latex = invoke("runs", "export", "--aggregate", "--format", "latex", "--runs-root", runs_root).stdout
    body = assert_booktabs(latex, rows=4)
    assert ["CartPole-v1", "ppo", "ppo", "3/3"] in [row[:4] for row in body]
    assert "1475" in latex and re.search(r"\d,\d", latex) is None


def test_runs_export_aggregate_across_envs_is_normalised(runs_root):
    result = invoke("runs", "export", "--aggregate", "--by", "algo", "--runs-root", runs_root, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = {row["algo"]: row for row in csv.DictReader(io.StringIO(result.stdout))}
    # ppo: [runs, envs] of returns over each env's solved threshold, envs in name order (Acrobot, CartPole)
    ppo = np.array([[90.0 / 100, 500.0 / 475], [110.0 / 100, 1475.0 / 475], [80.0 / 100, 400.0 / 475]])
    estimates = stats.interval_estimates(ppo, normalised=True)
    for name in ("iqm", "mean", "median", "median_of_means", "optimality_gap"):
        assert float(rows["ppo"][name]) == estimates[name].value, name
        assert float(rows["ppo"][f"{name}_low"]) == estimates[name].low, name
    assert float(rows["ppo"]["median_of_means"]) == np.median(ppo.mean(axis=0))
    # a2c: 2 runs count on Acrobot and 3 on CartPole: no rectangle to bootstrap, so no estimates, and a note says so
    assert (rows["a2c"]["runs"], rows["a2c"]["iqm"]) == ("5", "")
    assert "scores: final evaluation return / the env's solved threshold" in result.stderr
    assert "a2c: its envs have different numbers of runs that count (Acrobot-v1 2, CartPole-v1 3)" in result.stderr


def test_runs_export_groups_by_a_config_key(runs_root):
    result = invoke("runs", "export", "--aggregate", "--by", "env,algo.lr", "--runs-root", runs_root,
                    "--format", "markdown")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("| env | algo.lr | runs |")
    assert "| Acrobot-v1 | 0.001 | 5/6 |" in lines[2] and "| CartPole-v1 | 0.001 | 6/6 |" in lines[3]


def test_runs_export_improvement_compares_groups_on_the_same_envs(runs_root):
    result = invoke("runs", "export", "--aggregate", "--improvement", "--by", "env,algo", "--runs-root", runs_root)
    assert result.exit_code == 0, result.output
    rows = {(row["x"], row["y"]): row for row in csv.DictReader(io.StringIO(result.stdout))}
    # per env, the two algorithms; never CartPole against Acrobot (the groups in the records' order)
    assert sorted(rows) == [("Acrobot-v1 / a2c", "Acrobot-v1 / ppo"), ("CartPole-v1 / a2c", "CartPole-v1 / ppo")]
    expected = stats.probability_of_improvement(np.array([[300.0], [250.0], [475.0]]),
                                                np.array([[500.0], [1475.0], [400.0]]))
    row = rows["CartPole-v1 / a2c", "CartPole-v1 / ppo"]
    assert (float(row["probability"]), float(row["probability_low"])) == (expected.value, expected.low)
    # by algo alone, each group spans both envs; a2c has 2 runs on Acrobot and 3 on CartPole: left out, said why
    spanning = invoke("runs", "export", "--aggregate", "--improvement", "--by", "algo", "--runs-root", runs_root)
    assert spanning.exit_code == 0 and spanning.stdout.strip().splitlines()[1:] == []
    assert "a2c: its envs have different numbers of runs that count" in spanning.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--aggregate", "--by", "colour"], "--by colour: unknown key; use env, algo, variant, group or a dotted"),
    (["--aggregate", "--by", ","], "--by ',': give keys"),
    (["--by", "algo"], "--by is for the groups of --aggregate; add --aggregate"),
    (["--improvement"], "--improvement is for the groups of --aggregate; add --aggregate"),
    (["--aggregate", "--format", "tex"], "--format tex: unknown format; available: csv, markdown, latex"),
])
def test_runs_export_bad_input_exits_2(runs_root, args, message):
    result = invoke("runs", "export", *args, "--runs-root", runs_root)
    assert result.exit_code == 2 and message in " ".join(result.output.split())


def test_per_run_latex_export_is_booktabs_without_thousands_separators(runs_root):
    from rlfoundry.records.registry import Registry

    Registry(runs_root).scan()
    records = Registry(runs_root).query(sort="seed")
    latex = render(records, "latex")
    body = assert_booktabs(latex, rows=len(records))
    assert re.search(r"\d,\d", latex) is None and "100000" in latex
    assert body[0][7] == "100000" and body[0][10] in {"500.00", "90.00", "300.00", "60.00"}
    assert "1,475.00" in render(records, "markdown")  # the markdown table for people keeps its separators
