"""Gymnasium wrappers named in the config (`env.wrappers`), applied to each sub-env in the listed order, innermost
first, after the family's own preprocessing. A name without a colon is looked up in `gymnasium.wrappers`;
`module:Class` imports the user's own module. Lists among the kwargs are given as tuples (YAML has none;
`ResizeObservation` checks for one). An unknown name, a class that is not a `gymnasium.Wrapper`, a keyword the
wrapper does not take, and any error its constructor raises (`ClipReward` with min > max, a shape it cannot resize
to) is a ConfigError (exit 2) naming the entry, `env.wrappers[i]`, with the wrapper's own message;
docs/environments/options.md shows an example.
"""

from __future__ import annotations

import difflib
import importlib
import inspect

import gymnasium as gym
from gymnasium import wrappers as gym_wrappers

from rlfoundry.config.errors import ConfigError


def _exported(name: str):
    """gymnasium.wrappers.<name>, or None where importing it needs a package that is not installed (its array-API
    conversions import jax, torch or array_api_compat on first access)."""
    try:
        return getattr(gym_wrappers, name)
    except (ImportError, AttributeError, gym.error.DependencyNotInstalled):
        return None


def resolve_wrapper(name: str, where: str) -> type[gym.Wrapper]:
    """The wrapper class `name` names (module docstring); `where` names the config entry in errors."""
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            found = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{where} = '{name}': cannot import it: {exc}") from None
    else:
        if name not in gym_wrappers.__all__:  # its single-env wrappers and their array-API conversions
            close = difflib.get_close_matches(name, gym_wrappers.__all__, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else "; give a Gymnasium wrapper or `module:Class`"
            raise ConfigError(f"{where} = '{name}': not a wrapper of gymnasium.wrappers{hint}")
        found = _exported(name)
        if found is None:
            raise ConfigError(f"{where} = '{name}': gymnasium.wrappers.{name} needs a package that is not installed")
    if not (inspect.isclass(found) and issubclass(found, gym.Wrapper)):
        raise ConfigError(f"{where} = '{name}': {found!r} is not a gymnasium.Wrapper class")
    return found


def apply_wrappers(env: gym.Env, wrappers: list) -> gym.Env:
    """`env` inside each of `wrappers` (`WrapperConfig`s) in order; on a bad entry, `env` is closed and the
    ConfigError names the entry (module docstring)."""
    try:
        for index, entry in enumerate(wrappers):
            env = _wrap(env, index, entry)
    except ConfigError:
        env.close()
        raise
    return env


def _wrap(env: gym.Env, index: int, entry) -> gym.Env:
    where = f"env.wrappers[{index}].id"
    cls = resolve_wrapper(entry.id, where)
    # YAML has no tuples, and Gymnasium's wrappers check for them (ResizeObservation's `shape`)
    kwargs = {key: tuple(value) if isinstance(value, list) else value for key, value in entry.kwargs.items()}
    try:
        inspect.signature(cls).bind(env, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where} = '{entry.id}': bad env.wrappers[{index}].kwargs {entry.kwargs}: {exc}; "
                          f"it takes {inspect.signature(cls)}") from None
    try:
        return cls(env, **kwargs)
    except Exception as exc:  # the wrapper refuses its kwargs or this env: the user's entry, said on one line
        shown = f"{entry.id} with kwargs {entry.kwargs}" if entry.kwargs else entry.id
        env_id = env.spec.id if env.spec is not None else "the env"
        message = " ".join(str(exc).split()) or "no message"
        raise ConfigError(f"env.wrappers[{index}] = {shown}: cannot wrap {env_id}: "
                          f"{type(exc).__name__}: {message}") from None


def wrapped(make_env, wrappers: list) -> gym.Env:
    """`make_env()` inside `wrappers`: a module-level function, so a partial of it pickles for async envs."""
    return apply_wrappers(make_env(), wrappers)
