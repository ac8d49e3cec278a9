"""Configuration: the `Settings` dataclass, its loader (defaults, TOML file, environment)
and the API-key list the HTTP layer serves.

    from jobledger.config.load import Settings, load_settings
"""

from jobledger.config.load import load_settings
from jobledger.config.settings import Settings

__all__ = ["Settings", "load_settings"]
