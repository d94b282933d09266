"""Configuration: schema, presets, layered loading and overrides."""

from rlfoundry.config.errors import ConfigError
from rlfoundry.config.schedule import Schedule

__all__ = ["ConfigError", "Schedule"]
