"""``Timeout``: how long a model server may take to accept a connection and to send more bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._exceptions import ConfigError

__all__ = ["Timeout"]


@dataclass(frozen=True)
class Timeout:
    """Seconds allowed for connecting (``connect``) and for each wait on the answer's next bytes (``read``).

    ``read`` bounds every single wait, not the whole answer: a server that
    keeps streaming tokens never times out, one that goes quiet for ``read``
    seconds does.
    """

    connect: float = 10.0
    read: float = 120.0

    def __post_init__(self) -> None:
        for name in ("connect", "read"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ConfigError(f"timeout {name}={value!r} is out of range: expected a number of seconds > 0")

    @classmethod
    def of(cls, value: float | Timeout) -> Timeout:
        """``value`` as a :class:`Timeout`: a number of seconds is both the connect and the read timeout."""
        if isinstance(value, Timeout):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ConfigError(f"timeout must be > 0, got {value!r}")
        return cls(connect=value, read=value)
