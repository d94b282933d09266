"""Every YAML a user writes (experiment files, presets, sweep files, override values) is read strictly: a key given
twice in one mapping is an error naming its line, where PyYAML would keep the last one silently. Anchors and merge
keys, which repeat keys on purpose, still work."""

import pytest

from rlfoundry.config.errors import ConfigError
from rlfoundry.experiment.load import load_config, parse_override, read_yaml


def test_a_key_given_twice_names_both_lines(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("base: CartPole-v1:ppo\nalgo:\n  lr: 1.0e-3\n  gamma: 0.9\n  lr: 2.0e-3\n")
    with pytest.raises(ConfigError, match=r"line 5, column 3: key 'lr' given twice \(first at line 3\)"):
        read_yaml(path)
    with pytest.raises(ConfigError, match="given twice"):
        load_config(str(path))


def test_the_same_key_in_different_mappings_and_merge_keys_are_fine(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("base: CartPole-v1:ppo\nshared: &s {lr: 1.0e-3, gamma: 0.9}\n"
                    "algo:\n  <<: *s\n  lr: 5.0e-4\nenv: {num_envs: 2}\ntrain: {total_timesteps: 2048}\n")
    data = read_yaml(path)
    assert data["algo"] == {"lr": 5.0e-4, "gamma": 0.9}  # an explicit key over the merged one, as YAML says


def test_an_override_value_with_a_repeated_key_is_refused():
    with pytest.raises(ConfigError, match="cannot parse value"):
        parse_override("algo.lr={start: 1, start: 2}")
