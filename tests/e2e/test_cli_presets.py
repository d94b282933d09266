"""`rlfoundry presets` as a user reads it on an 80-column terminal: one line per preset, one preset in full by id,
a variant's settings by ENV_ID:VARIANT, and one error line (exit 2) for an unknown id or variant."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from rlfoundry.cli import app
from rlfoundry.experiment.load import load_presets


def presets(*args: str, columns: int = 80):
    result = CliRunner().invoke(app, ["presets", *args], env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert "Traceback" not in result.output, result.output
    return result


def test_the_list_is_one_line_per_preset_within_80_columns():
    result = presets()
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    found = load_presets()
    assert len(lines) == len(found) + 2, result.stdout  # a header, a line per preset, a closing hint
    for env_id in found:
        assert sum(line.startswith(env_id + " ") for line in lines) == 1, (env_id, result.stdout)
    assert max(map(len, lines)) <= 80, result.stdout
    cartpole = next(line for line in lines if line.startswith("CartPole-v1 "))
    assert "475" in cartpole and "ppo, ppo-masked" in cartpole and "+" in cartpole  # 12 variants do not fit
    assert "reward_threshold" not in result.stdout  # citations belong to `presets ENV_ID`


def test_a_wide_terminal_shows_every_variant():
    result = presets(columns=400)
    cartpole = next(line for line in result.stdout.splitlines() if line.startswith("CartPole-v1 "))
    assert cartpole.split("  ")[-1].split(", ") == list(load_presets()["CartPole-v1"].variants)


def test_a_filter_keeps_matching_ids_and_variants():
    result = presets("lstm")
    ids = [line.split()[0] for line in result.stdout.splitlines()[1:-1]]
    popgym = ["AutoencodeEasy", "CountRecallEasy", "NoisyPositionOnlyCartPoleEasy", "PositionOnlyCartPoleEasy",
              "RepeatPreviousEasy"]
    assert ids == ["CartPole-v1", "MiniGrid-MemoryS7-v0", *(f"popgym-{name}-v0" for name in popgym)], result.stdout
    assert "no preset matches" in presets("nothing-like-this").stdout


def test_an_env_id_shows_its_variants_and_cited_thresholds():
    result = presets("Walker2d-v5")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "solved at 3000.0: rl-baselines3-zoo benchmark.md PPO Walker2d-v3" in text
    assert "sac sac identity 3500.0 [1]" in text  # the variant's own threshold, with its source as a footnote
    assert "[1] rl-baselines3-zoo benchmark.md SAC Walker2d-v3" in text
    assert max(map(len, result.stdout.splitlines())) <= 80, result.stdout
    assert "ppo-lstm ppo lstm" in " ".join(presets("cartpole-v1").stdout.split())  # ids in any case


def test_env_id_and_variant_print_the_settings_it_sets():
    result = presets("CartPole-v1:ppo-lstm")
    assert result.exit_code == 0, result.output
    settings = yaml.safe_load(result.stdout)
    assert settings["network"]["core"] == "lstm" and settings["env"]["mask_obs"] == [1, 3]  # from ppo-masked
    assert settings["variant"] == "ppo-lstm"


def test_unknown_ids_and_variants_are_one_error_line():
    result = presets("CartPole-v1:nope")
    assert result.exit_code == 2 and "available: ppo" in result.stderr and result.stdout == ""
    result = presets("CartPol-v1:ppo")
    assert result.exit_code == 2 and "no preset for 'CartPol-v1'" in result.stderr
