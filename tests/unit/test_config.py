"""The config layer: presets, layering, overrides, schedules and every kind of ConfigError."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest
import yaml
from pydantic import ValidationError

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.schedule import Schedule
from rlfoundry.experiment.load import load_config, load_presets, preset_layers, validate
from rlfoundry.experiment.schema import ExperimentConfig

PRESET_VARIANTS = [(env_id, variant) for env_id, preset in load_presets().items() for variant in preset.variants]


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    # Ids without a preset are probed by building one env; MuJoCo writes MUJOCO_LOG.TXT into the cwd.
    monkeypatch.chdir(tmp_path)


def config_error(spec: str, overrides: list[str] | None = None) -> str:
    """The message of the ConfigError that loading raises (fails the test when none is raised)."""
    with pytest.raises(ConfigError) as info:
        load_config(spec, overrides)
    return str(info.value)


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------- presets


def test_presets_are_shipped():
    presets = load_presets()
    assert {"CartPole-v1", "Pendulum-v1", "LunarLander-v3", "BipedalWalker-v3", "HalfCheetah-v5", "Hopper-v5"} <= set(presets)
    for preset in presets.values():
        assert preset.variants, preset.env_id
        assert preset.solved and "return" in preset.solved and preset.solved.get("source"), preset.env_id


@pytest.mark.parametrize(("env_id", "variant"), PRESET_VARIANTS, ids=[f"{e}:{v}" for e, v in PRESET_VARIANTS])
def test_every_preset_variant_loads(env_id, variant):
    preset = load_presets()[env_id]
    cfg = load_config(f"{env_id}:{variant}")
    assert isinstance(cfg, ExperimentConfig)
    assert cfg.env.id == env_id
    assert cfg.variant == variant
    solved = preset_layers(preset, variant)["solved"]  # a variant may have its own, or extend one that has
    assert cfg.threshold == pytest.approx(float(solved["return"]))
    if cfg.algo.name == "ppo":
        rollout = cfg.env.num_envs * cfg.algo.num_steps
        assert 1 <= cfg.algo.minibatch_samples(cfg.env.num_envs) <= rollout
        assert cfg.algo.num_minibatches(cfg.env.num_envs) >= 1
    # A threshold credited to Gymnasium must be Gymnasium's.
    if cfg.solved.source.startswith("Gymnasium"):
        assert cfg.threshold == pytest.approx(gym.spec(env_id).reward_threshold)


def test_spec_without_variant_defaults_to_ppo():
    assert load_config("CartPole-v1") == load_config("CartPole-v1:ppo")


def test_cartpole_preset_values():
    cfg = load_config("CartPole-v1:ppo")
    assert cfg.env.num_envs == 8
    assert cfg.algo.num_steps == 32
    assert cfg.algo.gamma == pytest.approx(0.98)
    assert cfg.algo.lr.kind == "linear" and cfg.algo.lr.start == pytest.approx(1e-3)
    assert cfg.algo.adam_eps == pytest.approx(1e-5)  # not in the preset: the algorithm default
    assert cfg.threshold == 475.0


# ---------------------------------------------------------------- overrides


def test_override_constant_lr():
    cfg = load_config("CartPole-v1:ppo", ["algo.lr=3e-4"])
    assert cfg.algo.lr.kind == "constant"
    assert cfg.algo.lr(0.0) == pytest.approx(3e-4)
    assert cfg.algo.lr(1.0) == pytest.approx(3e-4)


def test_override_linear_lr():
    cfg = load_config("Pendulum-v1:ppo", ["algo.lr=lin_1e-3"])
    assert cfg.algo.lr.kind == "linear"
    assert cfg.algo.lr(0.0) == pytest.approx(1e-3)
    assert cfg.algo.lr(1.0) == pytest.approx(0.0)


def test_override_num_envs_and_list_values():
    cfg = load_config("CartPole-v1:ppo", ["env.num_envs=16", "network.hidden_sizes=[32,32]"])
    assert cfg.env.num_envs == 16
    assert cfg.network.hidden_sizes == [32, 32]
    # untouched values stay from the preset
    assert cfg.algo.num_steps == 32


def test_later_override_wins_and_nested_dict_values():
    cfg = load_config("CartPole-v1:ppo", ["train.seed=3", "train.seed=4", "env.kwargs={sutton_barto_reward: true}"])
    assert cfg.train.seed == 4
    assert cfg.env.kwargs == {"sutton_barto_reward": True}


def test_override_solved_threshold():
    cfg = load_config("CartPole-v1:ppo", ["solved.return=200"])
    assert cfg.threshold == 200.0
    assert cfg.solved.source  # kept from the preset


# ---------------------------------------------------------------- layering


def test_experiment_file_layers_over_preset_and_cli_wins(tmp_path):
    path = write(
        tmp_path / "exp.yaml",
        "preset: CartPole-v1:ppo\n"
        "env:\n  num_envs: 4\n"
        "algo:\n  lr: 5.0e-4\n  num_steps: 64\n"
        "network:\n  hidden_sizes: [16]\n"
        "train:\n  seed: 7\n",
    )
    cfg = load_config(path)
    assert cfg.env.id == "CartPole-v1"  # preset
    assert cfg.variant == "ppo"
    assert cfg.algo.gamma == pytest.approx(0.98)  # preset variant
    assert cfg.algo.adam_eps == pytest.approx(1e-5)  # algorithm default
    assert cfg.env.num_envs == 4 and cfg.algo.num_steps == 64 and cfg.train.seed == 7  # the file
    assert cfg.network.hidden_sizes == [16]  # lists are replaced, not merged
    assert cfg.algo.lr.kind == "constant" and cfg.algo.lr.start == pytest.approx(5e-4)
    assert cfg.threshold == 475.0

    cfg = load_config(path, ["algo.lr=1e-4", "env.num_envs=6"])
    assert cfg.algo.lr.start == pytest.approx(1e-4)  # CLI over file
    assert cfg.env.num_envs == 6
    assert cfg.algo.num_steps == 64  # file value not overridden stays


def test_experiment_file_without_preset_uses_generic_defaults(tmp_path):
    path = write(tmp_path / "exp.yml", "env:\n  id: Acrobot-v1\nalgo:\n  num_steps: 64\n")
    cfg = load_config(path)
    generic = load_config("Acrobot-v1:ppo")
    assert cfg.env.id == "Acrobot-v1"
    assert cfg.algo.num_steps == 64
    assert cfg.env.num_envs == generic.env.num_envs
    assert cfg.algo.lr == generic.algo.lr
    assert cfg.solved == generic.solved


def test_resolved_config_round_trips_as_experiment_file(tmp_path):
    for spec in ("CartPole-v1:ppo", "HalfCheetah-v5:ppo", "Acrobot-v1:ppo"):
        cfg = load_config(spec, ["train.seed=5"])
        dumped = cfg.model_dump(mode="json", by_alias=True)
        path = write(tmp_path / "config.yaml", yaml.safe_dump(dumped))
        assert load_config(path) == cfg
        assert validate(json.loads(json.dumps(dumped))) == cfg


# ---------------------------------------------------------------- schedules


def test_schedule_constant():
    for value in (3e-4, "3e-4", 3):
        schedule = Schedule.model_validate(value)
        assert schedule.kind == "constant"
        assert schedule(0.0) == schedule(0.5) == schedule(1.0) == pytest.approx(float(value))


def test_schedule_linear_shorthand():
    schedule = Schedule.model_validate("lin_1e-3")
    assert schedule.kind == "linear"
    assert schedule(0.0) == pytest.approx(1e-3)
    assert schedule(0.5) == pytest.approx(5e-4)
    assert schedule(1.0) == pytest.approx(0.0)
    assert schedule(2.0) == pytest.approx(0.0)  # progress is clamped


def test_schedule_dict_form():
    schedule = Schedule.model_validate({"kind": "linear", "start": 1.0, "end": 0.5})
    assert schedule(0.0) == pytest.approx(1.0)
    assert schedule(0.5) == pytest.approx(0.75)
    assert schedule(1.0) == pytest.approx(0.5)
    assert Schedule.model_validate({"start": 0.2}) == Schedule.model_validate(0.2)


@pytest.mark.parametrize(
    "value", [2.5e-4, 1e-5, "lin_1e-3", "lin_2.5e-4", {"kind": "linear", "start": 1.0, "end": 0.1}, {"kind": "constant", "start": 0.2}]
)
def test_schedule_serialisation_round_trip(value):
    schedule = Schedule.model_validate(value)
    dumped = schedule.model_dump(mode="json")
    assert Schedule.model_validate(dumped) == schedule
    assert Schedule.model_validate(yaml.safe_load(yaml.safe_dump(dumped))) == schedule
    assert Schedule.model_validate(json.loads(json.dumps(dumped))) == schedule


def test_schedule_is_frozen():
    schedule = Schedule.model_validate(1.0)
    with pytest.raises(ValidationError):
        schedule.start = 2.0


@pytest.mark.parametrize("value", ["lin_abc", "foo", "lin_", "", True, None, [1], {"kind": "exp", "start": 1}, {"start": 1, "bogus": 2}])
def test_schedule_rejects_bad_values(value):
    with pytest.raises(ValidationError):
        Schedule.model_validate(value)


@pytest.mark.parametrize("value", ["lin_abc", "foo"])
def test_bad_schedule_string_is_a_config_error(value):
    message = config_error("CartPole-v1:ppo", [f"algo.lr={value}"])
    assert "algo.lr" in message and value in message
    assert "lin_" in message  # says what is allowed


# ---------------------------------------------------------------- minibatch size


def test_minibatch_fraction_is_a_share_of_the_rollout():
    cfg = load_config("CartPole-v1:ppo", ["algo.minibatch_size=0.5"])
    rollout = cfg.env.num_envs * cfg.algo.num_steps
    assert cfg.algo.minibatch_samples(cfg.env.num_envs) == rollout // 2
    assert cfg.algo.num_minibatches(cfg.env.num_envs) == 2
    cfg = load_config("CartPole-v1:ppo", ["algo.minibatch_size=0.5", "env.num_envs=16"])
    assert cfg.algo.minibatch_samples(16) == 16 * cfg.algo.num_steps // 2


def test_minibatch_fraction_one_is_the_whole_rollout():
    cfg = load_config("CartPole-v1:ppo", ["algo.minibatch_size=1.0"])
    assert cfg.algo.minibatch_samples(cfg.env.num_envs) == cfg.env.num_envs * cfg.algo.num_steps


def test_minibatch_int_equal_to_rollout_is_accepted():
    cfg = load_config("CartPole-v1:ppo", ["algo.minibatch_size=256"])
    assert cfg.algo.minibatch_samples(8) == 256


def test_minibatch_int_larger_than_rollout_is_rejected():
    message = config_error("CartPole-v1:ppo", ["algo.minibatch_size=257"])
    assert "minibatch_size" in message and "257" in message and "256" in message


def test_minibatch_larger_than_rollout_after_num_envs_override():
    message = config_error("CartPole-v1:ppo", ["env.num_envs=4"])  # 4 x 32 = 128 < 256
    assert "minibatch_size" in message and "128" in message


@pytest.mark.parametrize("value", ["1.5", "-0.5"])
def test_minibatch_fraction_out_of_range_is_rejected(value):
    message = config_error("CartPole-v1:ppo", [f"algo.minibatch_size={value}"])
    assert "minibatch_size" in message and value in message and "(0, 1]" in message


# ---------------------------------------------------------------- ids without a preset


def test_generic_discrete_id():
    cfg = load_config("Acrobot-v1:ppo")
    assert cfg.env.id == "Acrobot-v1"
    assert cfg.variant == "ppo" and cfg.algo.name == "ppo"
    assert cfg.env.normalize_obs is False
    assert cfg.threshold == pytest.approx(gym.spec("Acrobot-v1").reward_threshold)
    assert "Gymnasium" in cfg.solved.source


def test_generic_continuous_id():
    cfg = load_config("MountainCarContinuous-v0:ppo")
    assert cfg.env.normalize_obs is True
    assert cfg.env.normalize_reward is True
    assert cfg.threshold == pytest.approx(gym.spec("MountainCarContinuous-v0").reward_threshold)
    cfg = load_config("MountainCarContinuous-v0:ppo", ["env.normalize_obs=false"])
    assert cfg.env.normalize_obs is False


def test_generic_id_without_reward_threshold_has_no_solved():
    assert gym.spec("Humanoid-v5").reward_threshold is None
    cfg = load_config("Humanoid-v5:ppo")
    assert cfg.solved is None and cfg.threshold is None


def test_a_threshold_holds_for_the_task_it_was_stated_for(tmp_path):
    """An id at a time limit: MountainCar's −110 is met by every episode cut at 100 steps, and CartPole's 475 says
    nothing of Acrobot. A layer of the user's that changes either, and sets no threshold, takes the new task's."""
    assert load_config("MountainCar-v0:ppo", ["env.max_episode_steps=100"]).solved is None
    assert load_config("MountainCar-v0:ppo", ["env.max_episode_steps=200"]).threshold == -110  # the registered limit
    assert load_config("Pendulum-v1:sac", ["env.max_episode_steps=400"]).solved is None  # a preset's threshold too
    assert load_config("CartPole-v1:ppo", ["env.id=Acrobot-v1"]).threshold == gym.spec("Acrobot-v1").reward_threshold
    assert load_config("CartPole-v1:ppo", ["env.id=Pendulum-v1"]).solved == load_config("Pendulum-v1:sac").solved
    assert load_config("CartPole-v1:ppo", ["env.id=Humanoid-v5"]).solved is None
    own = load_config("MountainCar-v0:ppo", ["env.max_episode_steps=100", "solved.return=-90", "solved.source=mine"])
    assert (own.threshold, own.solved.source) == (-90, "mine")
    shorter = write(tmp_path / "exp.yaml", "preset: CartPole-v1:ppo\nenv: {max_episode_steps: 200}\n")
    assert load_config(str(shorter)).solved is None
    generic = write(tmp_path / "generic.yaml", "env: {id: Acrobot-v1, max_episode_steps: 100}\n")
    assert load_config(str(generic)).solved is None
    assert load_config(str(generic), ["env.max_episode_steps=500"]).threshold == -100


def test_an_algorithm_without_a_variant_in_the_preset_takes_its_generic_defaults():
    """`ID:ALGO` works for every id, as for ids without a preset: Pendulum's preset has no DQN, CartPole's no vector
    DreamerV3. The preset still gives the task's threshold."""
    cfg = load_config("CartPole-v1:dreamer")
    generic = load_config("Acrobot-v1:dreamer")
    assert cfg.variant == "dreamer" and cfg.algo.name == "dreamer"
    assert cfg.env.num_envs == generic.env.num_envs == 1 and cfg.env.normalize_obs is False
    assert cfg.solved == load_config("CartPole-v1:ppo").solved
    assert load_config("Pendulum-v1:dqn").solved.source.startswith("Tianshou")  # the preset's, not Gymnasium's None
    with pytest.raises(ConfigError, match="did you mean 'dreamer-pixels'"):
        load_config("CartPole-v1:dreamer-pixel")  # not an algorithm: a misspelt variant


# ---------------------------------------------------------------- errors


ERRORS = {
    # name: (spec, overrides, substrings the message must contain)
    "unknown key": ("CartPole-v1:ppo", ["algo.lrr=1"], ["algo.lrr", "unknown key", "did you mean 'lr'", "num_steps"]),
    "unknown section": ("CartPole-v1:ppo", ["algoo.lr=1"], ["algoo", "unknown section", "'algo'", "network"]),
    "unknown section no suggestion": ("CartPole-v1:ppo", ["zzz.q=1"], ["zzz", "unknown section", "env, algo"]),
    "wrong type": ("CartPole-v1:ppo", ["algo.num_steps=abc"], ["algo.num_steps", "abc", "integer"]),
    "fractional int": ("CartPole-v1:ppo", ["train.seed=1.5"], ["train.seed", "1.5", "integer"]),
    "section not a mapping": ("CartPole-v1:ppo", ["network=[1]"], ["network", "[1]", "mapping"]),
    "gamma out of range": ("CartPole-v1:ppo", ["algo.gamma=1.5"], ["algo.gamma", "1.5", "less than or equal to 1"]),
    "num_envs out of range": ("CartPole-v1:ppo", ["env.num_envs=0"], ["env.num_envs", "0", "greater than 0"]),
    "clip_obs out of range": ("CartPole-v1:ppo", ["env.clip_obs=0"], ["env.clip_obs", "greater than 0"]),
    "list item out of range": ("CartPole-v1:ppo", ["network.hidden_sizes=[32,0]"], ["network.hidden_sizes", "greater than 0"]),
    "unknown env id": ("CartPol-v1:ppo", [], ["CartPol-v1", "not a registered Gymnasium id", "did you mean 'CartPole-v1'"]),
    "unknown env id override": ("CartPole-v1:ppo", ["env.id=CartPol-v1"], ["env.id", "CartPol-v1", "CartPole-v1"]),
    "unknown variant": ("CartPole-v1:nope", [], ["nope", "CartPole-v1", "available: ppo"]),
    "unknown algorithm": ("Acrobot-v1:trpo", [], ["trpo", "Acrobot-v1", "no preset", "available: a2c"]),
    "unknown algo.name": ("CartPole-v1:ppo", ["algo.name=trpo"], ["algo.name", "trpo", "available: a2c"]),
    "unsupported observation space": ("CartPole-v1:ppo", ["env.wrappers=[{id: 'tests.unit.test_config:Mission'}]"],
                                      ["CartPole-v1", "entry ['mission'] is a Text", "FilterObservation"]),
    "bad override syntax": ("CartPole-v1:ppo", ["algo.lr"], ["algo.lr", "section.key=value"]),
    "empty override key part": ("CartPole-v1:ppo", ["algo..lr=3"], ["algo..lr=3", "section.key=value"]),
    "unparsable override value": ("CartPole-v1:ppo", ["algo.lr=[1"], ["algo.lr=[1", "cannot parse"]),
    "override into a value": ("CartPole-v1:ppo", ["algo.lr.x=1"], ["algo.lr", "not a section"]),
    "bad literal": ("CartPole-v1:ppo", ["env.vectorization=turbo"], ["env.vectorization", "turbo", "'auto'", "'sync'", "'async'", "'vector_entry_point'"]),
    "bad device": ("CartPole-v1:ppo", ["train.device=gpu"], ["train.device", "gpu", "'cpu'", "'cuda'"]),
    "malformed spec": ("CartPole-v1:", [], ["CartPole-v1:", "ENV_ID:VARIANT"]),
    "unknown core": ("CartPole-v1:ppo", ["network.core=rnn"], ["network.core", "rnn", "'lstm'", "'mamba2'"]),
    "core with a latent model": ("Pendulum-v1:planet", ["network.core=lstm"],
                                 ["network.core = 'lstm'", "ppo", "dqn", "sac", "td3", "planet allows only: identity"]),
    "heads do not divide the width": ("CartPole-v1:ppo-trxl", ["network.num_heads=3"],
                                      ["network.num_heads = 3", "must divide network.core_hidden (64)"]),
    "mamba2 head size": ("CartPole-v1:ppo-mamba2", ["network.mamba2_head_dim=48"], ["network.mamba2_head_dim = 48"]),
    "sequence length does not divide the rollout": ("CartPole-v1:ppo-lstm", ["algo.sequence_length=5"],
                                                    ["algo.sequence_length = 5", "must divide algo.num_steps (32)"]),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_config_errors_name_key_value_and_allowed(name):
    spec, overrides, expected = ERRORS[name]
    message = config_error(spec, overrides)
    for text in expected:
        assert text in message, f"{text!r} not in {message!r}"
    assert "Traceback" not in message


def test_malformed_yaml_reports_line(tmp_path):
    path = write(tmp_path / "exp.yaml", "preset: CartPole-v1:ppo\nalgo:\n  lr: 1.0e-3\n    num_steps: 4\n")
    message = config_error(path)
    assert "malformed YAML" in message and "exp.yaml" in message
    assert re.search(r"\bline 4\b", message), message


def test_yaml_top_level_not_a_mapping(tmp_path):
    path = write(tmp_path / "exp.yaml", "- 1\n- 2\n")
    message = config_error(path)
    assert "exp.yaml" in message and "mapping" in message and "list" in message


def test_experiment_file_unknown_top_level_key(tmp_path):
    path = write(tmp_path / "exp.yaml", "preset: CartPole-v1:ppo\nalgoo:\n  lr: 1\n")
    message = config_error(path)
    assert "algoo" in message and "unknown key" in message and "algo" in message and "preset" in message


def test_experiment_file_unknown_nested_key(tmp_path):
    path = write(tmp_path / "exp.yaml", "preset: CartPole-v1:ppo\nalgo:\n  lrr: 1\n")
    message = config_error(path)
    assert "algo.lrr" in message and "did you mean 'lr'" in message


def test_experiment_file_bad_preset(tmp_path):
    path = write(tmp_path / "exp.yaml", "preset: CartPole-v1:nope\n")
    message = config_error(path)
    assert "nope" in message and "available: ppo" in message


def test_experiment_file_without_env_id(tmp_path):
    path = write(tmp_path / "exp.yaml", "algo:\n  num_steps: 64\n")
    message = config_error(path)
    assert "env.id" in message and "CartPole-v1" in message  # names an example of what is allowed


def test_missing_experiment_file(tmp_path):
    path = str(tmp_path / "nothere.yaml")
    message = config_error(path)
    assert "nothere.yaml" in message and "does not exist" in message


def test_several_errors_are_all_reported():
    message = config_error("CartPole-v1:ppo", ["algo.gamma=1.5", "env.clip_obs=-1"])
    assert "algo.gamma" in message and "env.clip_obs" in message


# ---------------------------------------------------------------- malformed sections and values


def test_env_section_not_a_mapping_is_a_config_error():
    message = config_error("CartPole-v1:ppo", ["env=3"])
    assert "env" in message and "3" in message


def test_experiment_file_env_not_a_mapping_is_a_config_error(tmp_path):
    path = write(tmp_path / "exp.yaml", "env: CartPole-v1\n")
    message = config_error(path)
    assert "env" in message and "CartPole-v1" in message


def test_algo_section_not_a_mapping_names_the_value():
    message = config_error("CartPole-v1:ppo", ["algo=3"])
    assert "3" in message and "None" not in message


@pytest.mark.parametrize("override", ["algo.update_epochs=true", "algo.minibatch_size=true", "train.seed=false"])
def test_boolean_for_an_integer_is_a_wrong_type(override):
    config_error("CartPole-v1:ppo", [override])


@pytest.mark.parametrize("value", ["-1", "lin_-1e-3", ".nan"])
def test_learning_rate_out_of_range_is_rejected(value):
    message = config_error("CartPole-v1:ppo", [f"algo.lr={value}"])
    assert "algo.lr" in message


def test_unknown_env_kwarg_is_a_config_error():
    message = config_error("CartPole-v1:ppo", ["env.kwargs={bogus: 1}"])
    assert "bogus" in message


def test_a_variant_can_extend_another(tmp_path):
    lstm, masked = load_config("CartPole-v1:ppo-lstm"), load_config("CartPole-v1:ppo-masked")
    assert lstm.network.core == "lstm" and lstm.network.core_hidden == 64 and lstm.variant == "ppo-lstm"
    assert lstm.env == masked.env and lstm.algo == masked.algo and lstm.solved == masked.solved
    assert lstm.network.model_copy(update={"core": "identity"}) == masked.network


@pytest.mark.parametrize("extends, problem", [("nope", "extends an unknown variant 'nope'"),
                                              ("b", "extends in a cycle")])
def test_bad_extends_is_a_config_error(tmp_path, monkeypatch, extends, problem):
    from rlfoundry.experiment import load

    (tmp_path / "Acrobot-v1.yaml").write_text(yaml.safe_dump({
        "env": {"id": "Acrobot-v1"},
        "variants": {"a": {"extends": extends, "algo": {"name": "ppo"}}, "b": {"extends": "a"}},
    }))
    monkeypatch.setattr(load, "presets_dir", lambda: tmp_path)
    message = config_error("Acrobot-v1:a")
    assert problem in message and "Acrobot-v1.yaml" in message


def test_any_ale_game_gets_simples_real_env_without_a_preset():
    cfg = load_config("ALE/Alien-v5:simple")  # no preset: SimpleConfig.defaults_for
    atari = cfg.env.atari
    assert cfg.algo.name == "simple" and cfg.env.num_envs == 1 and cfg.train.total_timesteps == 102_400
    assert atari.frame_size == (105, 80) and not atari.grayscale and not atari.max_pool and not atari.episodic_life
    assert atari.noop_max == 8 and atari.repeat_action_probability == 0.0 and atari.max_episode_frames == 72_000
    assert cfg.network.encoder == "nature_cnn"


def test_small_frames_get_a_cnn_that_fits_them():
    from rlfoundry.experiment.load import generic_layers

    assert generic_layers("rlfoundry/Catch-v0", "ppo")["network"]["encoder"] == "impala_cnn"  # 20x16: too small
    assert generic_layers("ALE/Pong-v5", "ppo")["network"]["encoder"] == "nature_cnn"


def test_generic_defaults_see_the_env_options(tmp_path):
    """An id without a preset gets its network from the env as the user's env options make it: Atari's RAM is a
    vector (an MLP), also from an experiment file; a preset's CNN on a vector is one clear error."""
    cfg = load_config("ALE/Seaquest-v5:ppo", ["env.atari.obs_type=ram", "env.atari.frame_stack=1"])
    assert cfg.network.encoder == "mlp" and cfg.env.atari.backend == "single"
    assert load_config("ALE/Seaquest-v5:ppo").network.encoder == "nature_cnn"
    experiment = tmp_path / "ram.yaml"
    experiment.write_text("env: {id: ALE/Seaquest-v5, atari: {obs_type: ram}}\n")
    assert load_config(str(experiment)).network.encoder == "mlp"
    with pytest.raises(ConfigError, match=r"network.encoder = nature_cnn: .*ALE/Pong-v5 observes .*network.encoder=mlp"):
        load_config("ALE/Pong-v5:ppo", ["env.atari.obs_type=ram"])
    assert load_config("ALE/Pong-v5:ppo", ["env.atari.obs_type=ram", "network.encoder=mlp"]).network.encoder == "mlp"


def test_the_mlp_scales_bytes_as_the_cnns_scale_frames():
    import torch

    from rlfoundry.experiment.schema import NetworkConfig
    from rlfoundry.nets.encoders import MLPEncoder

    encoder = MLPEncoder((3,), NetworkConfig(hidden_sizes=[4]), groups=1)
    raw = torch.tensor([[0, 128, 255]], dtype=torch.uint8)
    torch.testing.assert_close(encoder(raw), encoder(raw.float() / 255))


class Mission(gym.ObservationWrapper):
    """The env's observation beside a text mission: a space with no fixed-size vector form (MiniGrid's mission)."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({"obs": env.observation_space, "mission": gym.spaces.Text(12)})

    def observation(self, observation):
        return {"obs": observation, "mission": "go"}


# ---------------------------------------------------------------- encoders follow the observations


@pytest.mark.parametrize(("spec", "overrides", "buffer"), [
    ("Pendulum-v1:ppo", ["env.pixels.enabled=true"], None),
    ("Pendulum-v1:sac", ["env.pixels.enabled=true"], 100_000),  # the preset's 1M transitions of 64x64 frames: 12 GiB
    ("CartPole-v1:dqn", ["env.pixels.enabled=true"], 100_000),
])
def test_a_preset_switched_to_images_gets_the_image_encoder_and_replay(spec, overrides, buffer):
    vectors, images = load_config(spec), load_config(spec, overrides)
    assert vectors.network.encoder == "mlp" and images.network.encoder in ("nature_cnn", "impala_cnn")
    assert getattr(images.algo, "buffer_size", None) == buffer
    kept = {"buffer_size"} if buffer else set()
    assert images.algo.model_dump(exclude=kept) == vectors.algo.model_dump(exclude=kept)  # nothing else changes


def test_what_the_user_set_is_kept_and_an_mlp_on_images_is_refused(tmp_path):
    cfg = load_config("Pendulum-v1:sac", ["env.pixels.enabled=true", "algo.buffer_size=5000",
                                          "network.hidden_sizes=[64]"])
    assert (cfg.network.encoder, cfg.network.hidden_sizes, cfg.algo.buffer_size) == ("nature_cnn", [64], 5000)
    with pytest.raises(ConfigError, match=r"network.encoder = mlp: Pendulum-v1 observes uint8 images \[3, 64, 64\].*"
                                          r"12,288 pixels.*set network.encoder=nature_cnn or impala_cnn"):
        load_config("Pendulum-v1:ppo", ["env.pixels.enabled=true", "network.encoder=mlp"])
    experiment = tmp_path / "mine.yaml"
    experiment.write_text("preset: Pendulum-v1:ppo\nenv:\n  pixels: {enabled: true}\nnetwork:\n  encoder: mlp\n")
    with pytest.raises(ConfigError, match="network.encoder = mlp"):
        load_config(str(experiment))
