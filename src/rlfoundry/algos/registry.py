"""Every algorithm by its `algo.name`: the `Agent` classes of rlfoundry's own algorithm modules, then those that
installed packages register through the `rlfoundry.algorithms` entry-point group.

A new algorithm of rlfoundry's is one file in `rlfoundry/algos/` whose class sets `name` and `config`; nothing else
lists it. A package adds one by naming its class in its own metadata:

    [project.entry-points."rlfoundry.algorithms"]
    vpg = "my_package.vpg:VPG"

Loading an entry point imports that package's module (code the user installed, as any import is); nothing is
imported from a run directory or a checkpoint. The tables the rest of rlfoundry reads are views of these classes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from functools import cache
from importlib.metadata import entry_points

from rlfoundry.algos.base import Agent, AlgorithmConfig
from rlfoundry.config.errors import ConfigError

GROUP = "rlfoundry.algorithms"


class PluginWarning(UserWarning):
    """An installed algorithm plugin that cannot be used (it is left out)."""


def _concrete(cls: object) -> bool:
    return inspect.isclass(cls) and issubclass(cls, Agent) and "name" in vars(cls) and not inspect.isabstract(cls)


@cache
def algorithms() -> dict[str, type[Agent]]:
    """Every algorithm class by name: rlfoundry's own (by module name), then the entry points' (by name)."""
    import rlfoundry.algos as package

    found: dict[str, type[Agent]] = {}
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        for _, cls in inspect.getmembers(module, _concrete):
            if cls.__module__ == module.__name__:
                _check_config(cls)
                found[cls.name] = cls
    for point in sorted(entry_points(group=GROUP), key=lambda point: point.name):
        try:
            found[point.name] = _plugin(point, found)
        except ConfigError as exc:  # a broken plugin is left out and says why; every other command still works
            warnings.warn(str(exc), PluginWarning, stacklevel=2)
    return found


def _check_config(cls: type[Agent]) -> None:
    config = getattr(cls, "config", None)
    if not (inspect.isclass(config) and issubclass(config, AlgorithmConfig)) \
            or getattr(config.model_fields.get("name"), "default", None) != cls.name:
        raise ConfigError(f"algorithm {cls.name} ({cls.__module__}): its `config` must be an AlgorithmConfig whose "
                          f"`name` field defaults to {cls.name!r}")


def _plugin(point, found: dict[str, type[Agent]]) -> type[Agent]:
    where = f"the algorithm plugin {point.name} = {point.value!r} (entry point group {GROUP})"
    try:
        cls = point.load()
    except Exception as exc:
        raise ConfigError(f"{where} cannot be loaded, so it is left out: {type(exc).__name__}: {exc}") from None
    if not _concrete(cls):
        raise ConfigError(f"{where}: not a concrete subclass of rlfoundry.algos.Agent with a `name`; left out")
    if cls.name != point.name:
        raise ConfigError(f"{where}: its class is named {cls.name!r}, not as its entry point; left out")
    if point.name in found:
        taken = found[point.name]
        raise ConfigError(f"{where}: the name is taken by {taken.__module__}.{taken.__qualname__}; left out")
    try:
        _check_config(cls)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}; left out") from None
    return cls


def algorithm(name: str) -> type[Agent]:
    """The class of `algo.name` = `name` (a ConfigError listing the names for an unknown one)."""
    found = algorithms()
    if name not in found:
        raise ConfigError(f"algo.name = {name!r}: unknown algorithm; available: {', '.join(found)}")
    return found[name]


def check_actions(cfg) -> None:
    """A ConfigError, before anything trains, when `cfg`'s algorithm acts in one kind of action space (`Agent.actions`)
    and its env has another; the env is built once to read its spaces. What `trials` and `bench arch` check for every
    spec first, so that one impossible spec stops the set before the others train."""
    from rlfoundry.envs import make_kwargs, probe_spaces

    allowed = algorithm(cfg.algo.name).actions
    _, action_space = probe_spaces(cfg.env.id, make_kwargs(cfg.env), cfg.env)
    if type(action_space).__name__ not in allowed:
        raise ConfigError(f"algo.name = '{cfg.algo.name}' acts in {' or '.join(allowed)} action spaces; "
                          f"{cfg.env.id} has {action_space}")


def known_monitor_keys() -> set[str]:
    """Every metric key some algorithm monitors by default (the near misses a monitor override is checked for)."""
    return {key for cls in algorithms().values() for key in cls.monitors}
