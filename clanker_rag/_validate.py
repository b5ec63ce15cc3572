"""Parameter checks shared by the configurable classes."""

from __future__ import annotations

from ._exceptions import ConfigError

__all__ = ["positive_int"]


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (bools excluded), else ``ConfigError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive integer")
    return value
