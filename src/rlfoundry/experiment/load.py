"""Turn a SPEC (`ENV_ID:VARIANT` or an experiment YAML path) plus overrides into one validated config.

Every way this can fail raises `ConfigError` with a message naming the key, the value and what is
allowed; nothing is created on disk before loading succeeds.

The schema is imported by the functions that validate: it imports every algorithm and torch, which reading YAML and
applying overrides (all a sweep's Ray trial does here) do not need.
"""

from __future__ import annotations

import copy
import difflib
import math
import types
import typing
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from rlfoundry.config.errors import ConfigError

if TYPE_CHECKING:
    from rlfoundry.experiment.schema import ExperimentConfig

SECTIONS = ("env", "algo", "network", "train", "eval", "logging", "checkpoint", "solved")
PRESET_KEYS = (*SECTIONS, "variants")
EXPERIMENT_KEYS = (*SECTIONS, "preset", "variant", "provenance")


@dataclass(frozen=True)
class Preset:
    env_id: str
    path: Path
    data: dict[str, Any]

    @property
    def variants(self) -> dict[str, dict[str, Any]]:
        return self.data.get("variants") or {}

    @property
    def solved(self) -> dict[str, Any] | None:
        return self.data.get("solved")


# ---------------------------------------------------------------- YAML and merging


class StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error: PyYAML keeps the last one silently,
    so a sweep file with two `base:` keys or a preset with two `lr:` would run what its author did not read."""


def _mapping_of_unique_keys(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may repeat keys it merges in: YAML allows it
            continue
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, typing.Hashable) and key in lines:
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' given twice (first at line {lines[key]})", key_node.start_mark)
        lines[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_of_unique_keys)


def strict_yaml(text: str) -> Any:
    """`yaml.safe_load` refusing duplicate keys (a yaml.YAMLError naming the line)."""
    return yaml.load(text, Loader=StrictLoader)  # a SafeLoader: no Python objects are built


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = strict_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"malformed YAML in {path}{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A new dict: `update` over `base`, merging nested mappings key by key."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _check_keys(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key '{key}'{_did_you_mean(str(key), allowed)}; allowed: {', '.join(allowed)}")


def _did_you_mean(word: str, options: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


# ---------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[list[str], Any]:
    """`algo.lr=3e-4` → (['algo', 'lr'], 3e-4). Values are YAML scalars or flow lists/maps."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{text}' must look like section.key=value, e.g. algo.lr=3e-4")
    try:
        value = strict_yaml(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"override '{text}': cannot parse value {raw!r}") from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        if path[0] not in EXPERIMENT_KEYS:
            raise ConfigError(
                f"override '{text}': unknown section '{path[0]}'{_did_you_mean(path[0], SECTIONS)}; "
                f"allowed: {', '.join(SECTIONS)}"
            )
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override '{text}': '{'.'.join(path[: i + 1])}' is a value, not a section")
            node = child
        node[path[-1]] = value
    return data


# ---------------------------------------------------------------- presets


def presets_dir() -> Path:
    return Path(str(resources.files("rlfoundry") / "presets"))


def load_presets() -> dict[str, Preset]:
    """Every preset shipped with the package, by env id."""
    found: dict[str, Preset] = {}
    for path in sorted(presets_dir().glob("*.yaml")):
        data = read_yaml(path)
        _check_keys(data, PRESET_KEYS, f"preset {path.name}")
        env_id = (data.get("env") or {}).get("id")
        if not env_id:
            raise ConfigError(f"preset {path.name}: env.id is missing")
        found[env_id] = Preset(env_id, path, data)
    return found


def preset_layers(preset: Preset, variant: str) -> dict[str, Any]:
    if variant not in preset.variants:
        raise ConfigError(
            f"variant '{variant}' is not in the preset for {preset.env_id}{_did_you_mean(variant, preset.variants)}; "
            f"available: {', '.join(preset.variants)}"
        )
    shared = {k: v for k, v in preset.data.items() if k != "variants"}
    return deep_merge(shared, {**_variant_block(preset, variant, ()), "variant": variant})


def _variant_block(preset: Preset, variant: str, seen: tuple[str, ...]) -> dict[str, Any]:
    """A variant's sections; `extends: OTHER` starts from variant OTHER's (resolved) sections."""
    block = dict(preset.variants[variant] or {})
    where = f"preset {preset.path.name}, variant '{variant}'"
    _check_keys(block, (*SECTIONS, "extends"), where)
    parent = block.pop("extends", None)
    if parent is None:
        return block
    if parent not in preset.variants or parent in seen:
        problem = "extends in a cycle" if parent in seen else "extends an unknown variant"
        raise ConfigError(f"{where}: {problem} '{parent}'; available: {', '.join(preset.variants)}")
    return deep_merge(_variant_block(preset, parent, (*seen, variant)), block)


# ---------------------------------------------------------------- generic defaults from spaces


def check_env_id(env_id: Any) -> str:
    import gymnasium as gym

    from rlfoundry.envs import load_family, register_optional_families

    if not isinstance(env_id, str) or not env_id:
        raise ConfigError(f"env.id = {env_id!r}: expected a registered Gymnasium id such as CartPole-v1")
    register_optional_families(env_id)
    family = load_family(env_id)
    if env_id not in gym.registry and hasattr(family, "check_id"):  # the family knows best what is missing
        family.check_id(env_id)
    if env_id not in gym.registry:
        raise ConfigError(
            f"env.id = '{env_id}': not a registered Gymnasium id{_did_you_mean(env_id, gym.registry.keys())}"
        )
    return env_id


def default_network(env_id: str, observation_space) -> dict[str, Any]:
    """The encoder an id's observations call for: vectors → MLP (the schema default), MiniGrid's symbolic
    grids → the grid encoder, uint8 images → Nature CNN with a 512-unit layer, one trunk for policy and value
    (Mnih et al. 2015, as CleanRL's ppo_atari.py); images under 36 pixels a side, which the Nature CNN's strides
    cannot take, → the IMPALA CNN (3×3 convs and pooling: any size)."""
    from rlfoundry.envs import is_image_space, is_minigrid

    if not is_image_space(observation_space):
        return {}
    if is_minigrid(env_id):
        return {"encoder": "minigrid", "hidden_sizes": [64]}
    small = min(observation_space.shape[1:]) < 36
    return {"encoder": "impala_cnn" if small else "nature_cnn", "hidden_sizes": [512], "shared": True}


def generic_layers(env_id: str, algo: str, env_section: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults for an id without a preset, chosen from its spaces (see each algo's `defaults_for`), as the env looks
    with the user's `env_section` options (e.g. `env.atari.obs_type: ram` makes Atari's frames a vector)."""
    from rlfoundry.config.sections import EnvConfig
    from rlfoundry.envs import make_kwargs, probe_spaces
    from rlfoundry.experiment.schema import ALGO_CONFIGS

    if algo not in ALGO_CONFIGS:
        raise ConfigError(
            f"variant '{algo}': {env_id} has no preset, so the variant must be an algorithm"
            f"{_did_you_mean(algo, ALGO_CONFIGS)}; available: {', '.join(ALGO_CONFIGS)}"
        )
    try:
        env_cfg = EnvConfig.model_validate({**(env_section or {}), "id": env_id})
    except ValidationError:
        env_cfg = EnvConfig(id=env_id)  # the options' errors are reported by `validate`, in full
    observation_space, action_space = probe_spaces(env_id, make_kwargs(env_cfg), env_cfg)
    layers: dict[str, Any] = ALGO_CONFIGS[algo].defaults_for(observation_space, action_space, env_id)
    if env_cfg.pixels.enabled:  # the user chose the rendered frames' size (env.pixels.img_size)
        layers.get("env", {}).pop("img_size", None)
    layers = deep_merge(layers, {"network": default_network(env_id, observation_space)})
    layers = deep_merge(layers, {"variant": algo, "env": {"id": env_id}, "algo": {"name": algo}})
    solved = gymnasium_threshold(env_id)
    if solved is not None:
        layers["solved"] = solved
    return layers


def gymnasium_threshold(env_id: str) -> dict[str, Any] | None:
    import gymnasium as gym

    threshold = gym.spec(env_id).reward_threshold
    return None if threshold is None else {"return": float(threshold), "source": f"Gymnasium {env_id} reward_threshold"}


def task_solved(env_id: str) -> dict[str, Any] | None:
    """An id's threshold at its registered time limit: its preset's, else Gymnasium's."""
    preset = load_presets().get(env_id)
    return preset.solved if preset is not None and preset.solved else gymnasium_threshold(env_id)


def _time_limit(env_section: dict[str, Any]) -> int | None:
    """The env's time limit: `max_episode_steps` if set, else its id's registered one."""
    import gymnasium as gym

    if env_section.get("max_episode_steps") is not None:
        return env_section["max_episode_steps"]
    try:
        return gym.spec(env_section["id"]).max_episode_steps
    except (gym.error.Error, KeyError, TypeError):
        return None


def task_threshold(base: dict[str, Any], data: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """A `solved` threshold holds for the task it was stated for: an env id at a time limit (MountainCar's −110 is
    met by every episode cut at 100 steps). Where the user's layers change the base's id or time limit and set no
    threshold of their own, the base's gives way to the new task's: its preset's or Gymnasium's, at the id's
    registered time limit, or none."""
    if "solved" in user:
        return data
    base_env, env = _section(base, "env"), _section(data, "env")
    env_id, limit = check_env_id(env.get("id")), _time_limit(env)
    if (env_id, limit) == (base_env.get("id"), _time_limit(base_env)):
        return data
    return {**data, "solved": task_solved(env_id) if limit == _time_limit({"id": env_id}) else None}


# ---------------------------------------------------------------- the entry point


def split_spec(spec: str) -> tuple[str, str]:
    env_id, sep, variant = spec.rpartition(":")
    if not sep:
        return spec, "ppo"
    if not env_id or not variant:
        raise ConfigError(f"spec '{spec}' must be ENV_ID:VARIANT (e.g. CartPole-v1:ppo) or a path to a YAML file")
    return env_id, variant


def spec_layers(spec: str, env_section: dict[str, Any] | None = None) -> dict[str, Any]:
    from rlfoundry.experiment.schema import ALGO_CONFIGS

    env_id, variant = split_spec(spec)
    presets = load_presets()
    preset = presets.get(env_id)
    if preset is not None and (variant in preset.variants or variant not in ALGO_CONFIGS):
        return preset_layers(preset, variant)
    check_env_id(env_id)
    layers = generic_layers(env_id, variant, env_section)
    if preset is not None:
        # an algorithm the preset has no variant for (Hopper-v5:dreamer) takes its generic defaults, with the task's
        # threshold from the preset
        layers["solved"] = task_solved(env_id)
    return layers


def is_experiment_file(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml")) or Path(spec).is_file()


def load_config(spec: str, overrides: list[str] | None = None) -> ExperimentConfig:
    """Resolve SPEC and overrides into a validated `ExperimentConfig`, or raise `ConfigError`."""
    overrides = overrides or []
    if is_experiment_file(spec):
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"experiment file '{spec}' does not exist")
        experiment = read_yaml(path)
        _check_keys(experiment, EXPERIMENT_KEYS, f"experiment file {path}")
        base_spec = experiment.pop("preset", None)
        user = apply_overrides(experiment, overrides)
        # what the user chose: the file's keys, unless it is a run's own config.yaml (every key written out; a run
        # from before encoders followed the observations resumes as it started)
        chosen = {} if "provenance" in experiment else user
        if base_spec is not None:
            base = spec_layers(str(base_spec), _section(user, "env"))
        else:
            env_id = check_env_id(_section(experiment, "env").get("id"))
            base = generic_layers(env_id, _section(experiment, "algo").get("name", "ppo"), _section(user, "env"))
        data = deep_merge(base, experiment)
    else:
        user = chosen = apply_overrides({}, overrides)
        base = data = spec_layers(spec, _section(user, "env"))
    data = apply_overrides(data, overrides)
    return validate(task_threshold(base, data, user), chosen)


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name} = {value!r}: must be a section (a mapping of keys), e.g. {name}: {{...}}")
    return value


def validate(data: dict[str, Any], chosen: dict[str, Any] | None = None) -> ExperimentConfig:
    """The validated config of `data`, whose env is built once to check it. `chosen`: the keys the user set
    (overrides, an experiment file's own), which the observations' encoder defaults never replace (`follow_images`)."""
    from rlfoundry.experiment.schema import ALGO_CONFIGS, ExperimentConfig

    data = copy.deepcopy(data)
    for name in SECTIONS:
        _section(data, name)
    name = _section(data, "algo").setdefault("name", "ppo")  # the discriminator of the algo union
    if name not in ALGO_CONFIGS:
        raise ConfigError(f"algo.name = {name!r}: unknown algorithm; available: {', '.join(ALGO_CONFIGS)}")
    check_env_id(_section(data, "env").get("id"))
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, data)) from None
    # Build one env now, so bad env.kwargs or an unsupported space is a config error, before any run dir.
    from rlfoundry.envs import make_kwargs, probe_spaces

    observation_space, action_space = probe_spaces(cfg.env.id, make_kwargs(cfg.env), env_cfg=cfg.env)
    cfg = follow_images(cfg, observation_space, action_space, chosen or {})
    check_encoder(cfg, observation_space)
    if cfg.eval.video:
        from rlfoundry.envs import check_renders

        check_renders(cfg.env.id)  # e.g. ALE ids cannot render yet: say so now, not at the first evaluation
    return cfg


def follow_images(cfg: ExperimentConfig, observation_space, action_space, chosen: dict[str, Any]) -> ExperimentConfig:
    """A config whose env observes images (a preset switched to frames: `env.pixels`, `env.dm_control.pixels`) with
    the MLP of its vector form: the image encoder (`default_network`) and the algorithm's replay size for images
    take their place, where the user set neither. An MLP the user named on images is bad input: it would take every
    pixel as an input (a 12,288 × 64 first layer on 64 × 64 frames)."""
    from rlfoundry.envs.spaces import first_image
    from rlfoundry.experiment.schema import ALGO_CONFIGS

    image = first_image(observation_space)
    if cfg.network.encoder != "mlp" or image is None:
        return cfg
    network_chosen = _section(chosen, "network")
    if "encoder" in network_chosen:
        raise ConfigError(
            f"network.encoder = mlp: {cfg.env.id} observes uint8 images {list(image.shape)} with these "
            f"env options, and an MLP would take its {math.prod(image.shape):,} pixels as inputs; set "
            "network.encoder=nature_cnn or impala_cnn, or leave it out for the image defaults")
    network = {key: value for key, value in default_network(cfg.env.id, image).items()
               if key not in network_chosen}
    update: dict[str, Any] = {"network": cfg.network.model_copy(update=network)}
    images = ALGO_CONFIGS[cfg.algo.name].defaults_for(image, action_space, cfg.env.id).get("algo", {})
    capacity = images.get("buffer_size")
    current = getattr(cfg.algo, "buffer_size", None)  # the off-policy algorithms' replay
    if capacity is not None and current is not None and "buffer_size" not in _section(chosen, "algo") \
            and current > capacity:
        update["algo"] = cfg.algo.model_copy(update={"buffer_size": capacity})
    return cfg.model_copy(update=update)


def check_encoder(cfg: ExperimentConfig, observation_space) -> None:
    """An image encoder needs image observations (a preset's CNN with `env.atari.obs_type: ram`, say)."""
    from rlfoundry.envs.spaces import has_images

    encoder = cfg.network.encoder
    if encoder in ("nature_cnn", "impala_cnn", "minigrid") and not has_images(observation_space):
        raise ConfigError(
            f"network.encoder = {encoder}: it takes uint8 images [C, H, W], and {cfg.env.id} observes "
            f"{observation_space} with these env options; set network.encoder=mlp")


# ---------------------------------------------------------------- error messages


def _model_at(path: list[str], data: dict[str, Any]) -> type[BaseModel] | None:
    from rlfoundry.experiment.schema import ALGO_CONFIGS, ExperimentConfig

    model: type[BaseModel] | None = ExperimentConfig
    keyed = False  # the last field maps keys to sections (logging.monitors.metrics): this part is such a key
    for depth, key in enumerate(path):
        if keyed:
            keyed = False
            continue
        if model is None:
            return None
        if depth == 0 and key == "algo":  # a union: the algorithm's own config
            model = ALGO_CONFIGS.get(data.get("algo", {}).get("name", "ppo"))
            continue
        field = next((f for n, f in model.model_fields.items() if key in (n, f.alias)), None)
        if field is None:
            return None
        annotation = field.annotation
        if typing.get_origin(annotation) is dict:
            annotation, keyed = typing.get_args(annotation)[1], True
        model = _first_model(annotation)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _first_model(arg)
            if found is not None:
                return found
    return None


def _key_path(loc: tuple[Any, ...], data: dict[str, Any]) -> list[str]:
    """The loc parts that are real keys of the input (drops pydantic's union/type labels)."""
    path, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(str(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(str(part))
            node = node[part]
    return path


def format_validation_error(exc: ValidationError, data: dict[str, Any]) -> str:
    lines: list[str] = []
    seen: set[str] = set()
    for error in exc.errors():
        path = _key_path(error["loc"], data)
        key = ".".join(path) or ".".join(str(p) for p in error["loc"])
        if key in seen:
            continue
        seen.add(key)
        if error["type"] == "extra_forbidden":
            model = _model_at(path[:-1], data)
            allowed = [f.alias or n for n, f in model.model_fields.items()] if model else []
            lines.append(
                f"{key} = {error.get('input')!r}: unknown key{_did_you_mean(path[-1], allowed)}"
                + (f"; allowed: {', '.join(allowed)}" if allowed else "")
            )
        elif error["type"] == "missing":
            lines.append(f"{key}: required but missing")
        elif not path or error["msg"].startswith(f"Value error, {key}."):  # a section's own check names its keys
            lines.append(error["msg"].removeprefix("Value error, "))
        else:
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{key} = {error.get('input')!r}: {message}")
    return "invalid config: " + ("\n  ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines))
