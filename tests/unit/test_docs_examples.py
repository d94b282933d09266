"""The examples of the README and the documentation pages cannot rot unnoticed: every `rlfoundry` command in a
shell block parses against the command-line app (its command, options and their types) and the runs it names
resolve (the spec and its overrides load as a config); the fast ones (presets, algos) run; every YAML block is a
valid experiment file or sweep file; every Python block compiles. Training commands are not run here (their budgets
are minutes to hours): the Python examples that train run in tests/e2e/test_policy_api.py and test_hooks.py.
"""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from rlfoundry.cli import app
from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import is_experiment_file, load_config
from tests.docpages import ROOT, blocks, commands, parse

RUNS = {"train", "trials", "bench train", "bench arch"}  # commands whose first argument is a SPEC to load
FAST = {"presets", "algos"}  # commands that run here in a second (`presets --smoke` trains: parsed only)
# YAML blocks that are not rlfoundry's files
FOREIGN = {"command"}  # a W&B sweep file (`wandb sweep`) has a command list


def yaml_blocks() -> list[tuple[str, str]]:
    return [(block.where, block.text) for block in blocks("yaml")]


def python_blocks() -> list[tuple[str, str]]:
    return [(block.where, block.text) for block in blocks("python")]


def test_the_pages_show_commands_blocks_and_code():
    assert len(commands()) > 50 and len(yaml_blocks()) >= 4 and len(python_blocks()) >= 4


@pytest.mark.parametrize(("where", "args", "status"), commands(),
                         ids=lambda x: x if isinstance(x, str) else " ".join(x)[:60] if isinstance(x, list) else str(x))
def test_every_shown_command_parses_and_names_runs_that_load(where, args, status, tmp_path, monkeypatch):
    name, command, params = parse(args)  # options and their types checked
    assert name, f"{where}: `rlfoundry {' '.join(args)}` names no command"
    assert not hasattr(command, "commands"), f"{where}: `rlfoundry {' '.join(args)}`: {name} has no such command"
    if name in RUNS and params.get("spec" if "spec" in params else "env") and not params.get("resume"):
        spec = params.get("spec") or params.get("env")
        overrides = list(params.get("overrides") or [])
        if is_experiment_file(spec):  # a file the page shows in a YAML block (my_experiment.yaml)
            assert any(block.filename == spec for block in blocks("yaml")), f"{where}: {spec} is not shown"
            return
        if status == 0:
            load_config(spec if ":" in spec else f"{spec}:ppo", overrides)
        else:  # the page shows it failing on purpose: a bad config, one message
            with pytest.raises(ConfigError):
                load_config(spec, overrides)
    if name in FAST and not params.get("smoke"):
        monkeypatch.chdir(tmp_path)
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, f"{where}: {result.output}"


@pytest.mark.parametrize(("where", "text"), yaml_blocks(), ids=lambda x: x if ":" in x and "\n" not in x else "")
def test_every_yaml_block_is_a_valid_file(where, text, tmp_path):
    from rlfoundry.studies.sweep_file import base_spec, check_space, read_sweep

    data = yaml.safe_load(text)
    assert isinstance(data, dict), where
    if FOREIGN & set(data):
        return
    path = tmp_path / "block.yaml"
    if "parameters" in data:  # an rlfoundry sweep file
        path.write_text(text)
        sweep = read_sweep(path)
        check_space(sweep, base_spec(sweep, path))
        return
    if "env" not in data and "preset" not in data:  # a fragment (one section): checked on a preset
        data = {"preset": "CartPole-v1:ppo", **data}
    if any(":" in str(w.get("id", "")) for w in (data.get("env") or {}).get("wrappers", [])):  # your own wrapper
        data["env"]["wrappers"] = [w for w in data["env"]["wrappers"] if ":" not in str(w.get("id", ""))]
    path.write_text(yaml.safe_dump(data))
    load_config(str(path))


@pytest.mark.parametrize(("where", "text"), python_blocks(), ids=lambda x: x if ":" in x and "\n" not in x else "")
def test_every_python_block_compiles(where, text):
    compile(text, where, "exec")


def test_every_link_of_the_readme_resolves():
    """The README is read on the repository host, outside the site: its relative links name files of the tree."""
    text = (ROOT / "README.md").read_text()
    links = [target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", text)
             if not target.startswith(("http://", "https://", "mailto:", "#"))]
    assert len(links) >= 5
    assert [link for link in links if not (ROOT / link).exists()] == []
