"""The documentation's generated references: every config key, command and option has a description, and the pages
hold what the code defines (keys of every section and algorithm, every command, every preset)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlfoundry.algos.registry import algorithms
from rlfoundry.cli.reference import (
    BENCHMARK_PAGES,
    algorithm_benchmarks_markdown,
    algorithm_markdown,
    algorithm_page_markdown,
    algorithm_pages,
    algorithm_presets_markdown,
    benchmark_rows,
    cli_markdown,
    commands,
    config_markdown,
    config_sections,
    presets_markdown,
    spec_algorithm,
)
from rlfoundry.experiment.load import load_presets

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_config_key_has_a_description():
    keys = [key for section in config_sections().values() for key in section]
    assert len(keys) > 300
    assert [key.path for key in keys if not key.description] == []


def test_the_config_page_covers_every_section_and_algorithm():
    sections = config_sections()
    assert {"env", "network", "train", "eval", "logging", "checkpoint"} <= set(sections)
    assert {f"algo ({name})" for name in algorithms()} <= set(sections)
    page = config_markdown()
    for path in ("train.cuda_graphs", "logging.every_steps", "env.atari.frame_skip", "algo.clip_coef",
                 "algo.model.rssm.deter", "algo.ppo.num_steps"):
        assert f"| `{path}` |" in page, path
    schedules = {key.path: key for key in sections["algo (ppo)"]}
    assert schedules["algo.lr"].type.startswith("float | \"lin_<start>\"")  # a schedule is one key, not three


@pytest.mark.parametrize("command", commands(), ids=lambda c: c.path)
def test_every_command_and_option_has_help(command):
    assert command.help
    assert [name for name, _, _, text in command.params if not text] == []


def test_the_command_page_lists_every_command_with_its_options():
    page = cli_markdown()
    paths = {command.path for command in commands()}
    assert {"train", "trials", "sweep", "runs verify", "bench train", "export"} <= paths
    for path in paths:
        assert f"## `rlfoundry {path}`" in page
    assert "| `--total-timesteps` | int |" in page
    train = next(command for command in commands() if command.path == "train")
    options = [param for param in train.params if param[0].startswith("--")]
    assert options and all("Environment variable: `RLFOUNDRY_" in text for _, _, _, text in options)


def test_the_presets_page_lists_every_preset():
    page = presets_markdown()
    for env_id in load_presets():
        assert f"| `{env_id}` |" in page


# ---------------------------------------------------------------- the algorithm pages


def test_every_algorithm_has_a_page_and_a_row_in_the_index():
    pages = algorithm_pages()
    own = {name for name, cls in algorithms().items() if cls.__module__.startswith("rlfoundry.algos.")}
    assert {name for names in pages.values() for name in names} == own
    assert pages["td3"] == ["td3", "ddpg"]  # one page per module, its namesake first
    index = (DOCS / "algorithms" / "index.md").read_text()
    for page, names in pages.items():
        assert (DOCS / "algorithms" / f"{page}.md").is_file(), f"docs/algorithms/{page}.md is missing"
        for name in names:
            assert re.search(rf"^\| \[`{name}`\]\({page}\.md\) \|", index, re.M), f"{name}: no row in the index"


@pytest.mark.parametrize("name", sorted(algorithms()))
def test_the_settings_section_lists_every_key_of_the_algorithm(name):
    section = algorithm_markdown(name)
    keys = config_sections()[f"algo ({name})"]
    assert keys and "| key | type (allowed values) | default | description |" in section
    assert [key.path for key in keys if f"| `{key.path}` |" not in section] == []


def test_the_generated_part_of_a_page_has_settings_presets_and_benchmarks_of_each_algorithm():
    page = algorithm_page_markdown("td3", DOCS)
    for title in ("## Settings", "## Presets", "## Benchmark rows", "### `td3`", "### `ddpg`"):
        assert title in page
    assert "| `algo.policy_delay` | int, > 0 | 1 |" in page and "| `algo.policy_delay` | int, > 0 | 2 |" in page
    assert "| `Pendulum-v1:ddpg` | identity | 20,000 | -250.0 |" in algorithm_presets_markdown("ddpg")
    ppo_presets = algorithm_presets_markdown("ppo")
    assert "| `CartPole-v1:ppo-lstm` | lstm |" in ppo_presets and "`CartPole-v1:dqn`" not in ppo_presets


def test_benchmark_rows_are_found_by_the_algorithm_their_spec_trains():
    assert spec_algorithm("CartPole-v1:ppo-lstm") == "ppo"  # a preset variant: its algo.name
    assert spec_algorithm("Acrobot-v1:a2c") == "a2c"  # no preset: the variant names the algorithm
    assert spec_algorithm("CartPole-v1:nothing") is None
    tables = benchmark_rows("ppo", DOCS)
    assert {table.page for table in tables} <= set(BENCHMARK_PAGES) and tables
    rows = [row for table in tables for row in table.rows]
    assert any(row.startswith("| `CartPole-v1:ppo` |") for row in rows)
    assert any(row.startswith("| `CartPole-v1:ppo-lstm` |") for row in rows)
    assert not any("`CartPole-v1:dqn`" in row for row in rows)
    for table in tables:  # each under its table's header and rule
        assert table.header[0].startswith("| spec |") and set(table.header[1]) <= set("|-: ")
    sac = {table.page for table in benchmark_rows("sac", DOCS)}
    assert {"BENCHMARKS.md", "BENCHMARKS-dreamer-pendulum.md"} <= sac


def test_an_algorithm_without_benchmark_rows_says_so():
    assert benchmark_rows("no-such-algorithm", DOCS) == []
    assert algorithm_benchmarks_markdown("no-such-algorithm", DOCS).startswith("No benchmark page has a row")
