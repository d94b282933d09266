"""The one error type for bad user input: the CLI prints its message and exits 2."""


class ConfigError(Exception):
    """Bad config, preset, override or CLI value. The message names the key, the value and what is allowed."""
