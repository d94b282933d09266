"""The documentation's generated references: every config key, command and option has a description, and the pages
hold what the code defines (keys of every section and algorithm, every command, every preset)."""

from __future__ import annotations

import pytest

from rlfoundry.algos.registry import algorithms
from rlfoundry.cli.reference import cli_markdown, commands, config_markdown, config_sections, presets_markdown
from rlfoundry.experiment.load import load_presets


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
