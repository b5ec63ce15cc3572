"""Base URLs of OpenAI-compatible servers, with or without the ``/v1`` suffix.

Users paste either ``http://host:8080`` or the OpenAI-style base URL
``http://host:8080/v1``.  The package's one HTTP client (``_http``, behind
the backends, the ``serve`` proxy's upstream and the server probe) reads the
URL through :func:`parse_base_url`, so both forms reach the same endpoints:
the request paths carry ``/v1`` themselves.
"""

from __future__ import annotations

import urllib.parse
from typing import NamedTuple

from ._exceptions import ConfigError

__all__ = ["BaseUrl", "parse_base_url"]


class BaseUrl(NamedTuple):
    """A server's base URL split for ``http.client``; ``prefix`` never ends in ``/`` or ``/v1``."""

    scheme: str
    host: str
    port: int | None
    prefix: str
    netloc: str
    has_credentials: bool

    @property
    def url(self) -> str:
        """The normalised base URL: scheme, host, port and prefix, no ``/v1``."""
        return urllib.parse.urlunsplit((self.scheme, self.netloc, self.prefix, "", ""))

    def path(self, endpoint: str) -> str:
        """The request path for ``endpoint`` (such as ``/v1/completions``) on this server."""
        return self.prefix + endpoint


def parse_base_url(url: str, *, what: str = "base_url") -> BaseUrl:
    """Split ``url``; a trailing ``/`` or ``/v1`` is dropped.  ``what`` names the setting in errors."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a port that is not a number or out of range
        raise ConfigError(f"{what} is not a valid URL ({exc}): {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} must be an http(s) URL such as http://127.0.0.1:8080, got {url!r}")
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    netloc = parts.netloc.rpartition("@")[2]
    return BaseUrl(parts.scheme, parts.hostname, port, prefix, netloc, bool(parts.username or parts.password))
