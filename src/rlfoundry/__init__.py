"""rlfoundry: deep reinforcement learning from one config.

`rlfoundry.train(...)` is `rlfoundry.run.launch.train`, `rlfoundry.Callback` (the base class of its `callbacks`)
is `rlfoundry.run.hooks.Callback`, `rlfoundry.load_policy(...)` is `rlfoundry.hub.load_policy` and
`rlfoundry.evaluate(...)` is `rlfoundry.hub.evaluation.evaluate`, `rlfoundry.load_config(SPEC, overrides)` is
`rlfoundry.experiment.load.load_config` and `rlfoundry.envs` the env package (`rlfoundry.envs.make(...)`), each
imported on first use, so that importing a light module (say `rlfoundry.config`) does not load torch and every env
family.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Callback", "envs", "evaluate", "load_config", "load_policy", "train", "__version__"]


def __getattr__(name: str) -> Any:  # PEP 562: a lazy attribute of the package
    if name == "train":
        from rlfoundry.run.launch import train

        return train
    if name == "Callback":
        from rlfoundry.run.hooks import Callback

        return Callback
    if name == "load_policy":
        from rlfoundry.hub import load_policy

        return load_policy
    if name == "evaluate":
        from rlfoundry.hub.evaluation import evaluate

        return evaluate
    if name == "load_config":
        from rlfoundry.experiment.load import load_config

        return load_config
    if name == "envs":
        import rlfoundry.envs

        return rlfoundry.envs
    raise AttributeError(f"module 'rlfoundry' has no attribute {name!r}")


def __dir__() -> list[str]:  # the lazy attributes too: tab completion and dir() show them before their first use
    return sorted({*globals(), *__all__})
