"""The one error type for bad user input: the CLI prints its message and exits 2."""

import difflib


class ConfigError(Exception):
    """Bad config, preset, override or CLI value. The message names the key, the value and what is allowed."""


def unknown_id(env_id: str, known: list[str], what: str) -> ConfigError:
    """The error for an id a family does not register: `what` it is not ("a POPGym id"), and the nearest of `known`
    (sorted), or the first of them."""
    near = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(near)}?" if near else f"allowed: {', '.join(known[:6])}, ... ({len(known)} ids)"
    return ConfigError(f"env.id = '{env_id}': not {what}; {hint}")
