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
from functools import cache
from importlib.metadata import entry_points

from rlfoundry.algos.base import Agent
from rlfoundry.config.errors import ConfigError

GROUP = "rlfoundry.algorithms"


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
                found[cls.name] = cls
    for point in sorted(entry_points(group=GROUP), key=lambda point: point.name):
        try:
            cls = point.load()
        except Exception as exc:  # a broken plugin names itself instead of breaking every command
            raise ConfigError(f"the algorithm plugin {point.name} = {point.value!r} (entry point group {GROUP}) "
                              f"cannot be loaded: {type(exc).__name__}: {exc}") from None
        if not _concrete(cls):
            raise ConfigError(f"the algorithm plugin {point.name} = {point.value!r}: not a concrete subclass of "
                              "rlfoundry.algos.Agent with a `name`")
        if cls.name != point.name:
            raise ConfigError(f"the algorithm plugin {point.name} = {point.value!r}: its class is named {cls.name!r}; "
                              "the entry point's name must be the class's `name`")
        if cls.name in found and found[cls.name] is not cls:
            raise ConfigError(f"the algorithm plugin {point.name} = {point.value!r}: the name {cls.name!r} is taken by "
                              f"{found[cls.name].__module__}.{found[cls.name].__qualname__}")
        found[cls.name] = cls
    for name, cls in found.items():
        if getattr(cls, "config", None) is None or cls.config.model_fields.get("name") is None \
                or cls.config.model_fields["name"].default != name:
            raise ConfigError(f"algorithm {name}: its `config` must be a StrictModel whose `name` field defaults to "
                              f"{name!r}")
    return found


def algorithm(name: str) -> type[Agent]:
    """The class of `algo.name` = `name` (a ConfigError listing the names for an unknown one)."""
    found = algorithms()
    if name not in found:
        raise ConfigError(f"algo.name = {name!r}: unknown algorithm; available: {', '.join(found)}")
    return found[name]


def known_monitor_keys() -> set[str]:
    """Every metric key some algorithm monitors by default (the near misses a monitor override is checked for)."""
    return {key for cls in algorithms().values() for key in cls.monitors}
