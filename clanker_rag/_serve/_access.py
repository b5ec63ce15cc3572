"""Who may talk to our HTTP servers: the checks the proxy and the MCP server share.

A server bound to loopback is still reachable from any web page the user
opens: the page cannot read a cross-origin answer, but it can send requests,
and with DNS rebinding (a name of the attacker's that resolves to 127.0.0.1)
it can read them too.  So a request is refused when

* its ``Host`` is not a name of the address the server listens on (a page
  served from ``attacker.example`` that rebinds to loopback sends
  ``Host: attacker.example``): 421 Misdirected Request;
* it carries an ``Origin`` (every browser sends one on a cross-origin
  request) that is not the server's own: 403;
* it is a CORS preflight (``OPTIONS`` with ``Access-Control-Request-Method``):
  answered here, never passed on to an upstream that might allow it;
* it posts a body as a type a browser may send without a preflight
  (``text/plain``, ``application/x-www-form-urlencoded``): 415.

With a token (``CLANKER_RAG_TOKEN`` in the server's environment), every
request must also carry ``Authorization: Bearer <token>``: 401 otherwise,
compared in constant time.  That is the check for a server exposed beyond
loopback, where the host check cannot know the names it is reached by.
Pure functions over a request's method and headers; no I/O.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import urllib.parse
from collections.abc import Callable, Mapping
from typing import NamedTuple

from .._exceptions import ConfigError

__all__ = [
    "TOKEN_ENV",
    "AccessPolicy",
    "Refusal",
    "bearer_ok",
    "token_from_env",
]

TOKEN_ENV = "CLANKER_RAG_TOKEN"
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# The body types of a "simple" cross-origin request, which no preflight guards.
_SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded"})
MAX_TOKEN_CHARS = 4096


class Refusal(NamedTuple):
    """Why a request is refused: the status and a message for the client."""

    status: int
    message: str
    code: str


def token_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token a server requires (``CLANKER_RAG_TOKEN``), or None when unset or empty."""
    value = (os.environ if environ is None else environ).get(TOKEN_ENV, "")
    value = value.strip()
    if not value:
        return None
    check_token(value)
    return value


def check_token(token: str) -> None:
    """Refuse a token that cannot travel in a header (:class:`ConfigError`)."""
    if len(token) > MAX_TOKEN_CHARS or not token.isascii() or not token.isprintable() or " " in token:
        raise ConfigError(f"{TOKEN_ENV} must be printable ASCII without spaces, at most {MAX_TOKEN_CHARS} characters")


def bearer_ok(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` as a bearer token (constant time)."""
    if not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode("utf-8", "replace"), token.encode("ascii"))


def _split_host(value: str) -> tuple[str, str] | None:
    """``host[:port]`` (``[v6]:port`` too) as (host, port); None when malformed."""
    value = value.strip().lower()
    if not value or any(c in value for c in "/@?# \t"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:]
    else:
        host, _, port = value.partition(":")
        if ":" in port:
            return None
    if port and not port.isdigit():
        return None
    return host.rstrip("."), port


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AccessPolicy:
    """The checks of one server bound to ``bind_host``: host names, origins, body types, the token."""

    def __init__(self, bind_host: str, token: str | None = None) -> None:
        if token is not None:
            check_token(token)
        self.token = token
        host = bind_host.strip("[]").lower()
        # Bound to loopback: only loopback names reach it honestly.  Bound
        # anywhere else, the names it is reached by are unknown (DNS, a LAN
        # address): the host check cannot tell, the token must.
        self.loopback_only = _is_loopback(host)
        self.bind_host = host

    def _host_allowed(self, host: str) -> bool:
        if self.loopback_only:
            return _is_loopback(host)
        return True

    def refusal(self, method: str, header: Callable[[str], str | None]) -> Refusal | None:
        """Why the request (``header(name)`` reads its headers) must be refused, or None."""
        raw_host = header("Host")
        host = _split_host(raw_host) if raw_host is not None else None
        if host is None or not self._host_allowed(host[0]):
            return Refusal(421, "this server does not answer for that Host", "misdirected_request")
        origin = header("Origin")
        if origin is not None and not self._same_origin(origin, host):
            return Refusal(403, "cross-origin requests are refused (this server is not for web pages)", "forbidden")
        if method == "OPTIONS" and header("Access-Control-Request-Method") is not None:
            # A preflight from the server's own origin never happens; any other is refused here.
            return Refusal(403, "CORS preflight refused: this server allows no other origin", "forbidden")
        if self.token is not None and not bearer_ok(header("Authorization"), self.token):
            return Refusal(401, "a bearer token is required (Authorization: Bearer <token>)", "unauthorized")
        if method in ("POST", "PUT", "PATCH"):
            kind = (header("Content-Type") or "").split(";", 1)[0].strip().lower()
            if kind in _SIMPLE_TYPES:
                return Refusal(415, f"send the body as Content-Type: application/json, not {kind}", "unsupported_media")
        return None

    def _same_origin(self, origin: str, host: tuple[str, str]) -> bool:
        """An origin is ours when it names the host and port the request was sent to."""
        parsed = urllib.parse.urlsplit(origin.strip())
        # This server speaks plain HTTP; https can only be ours behind a
        # TLS-terminating proxy, which means a bind beyond loopback.
        schemes = ("http",) if self.loopback_only else ("http", "https")
        if parsed.scheme not in schemes or not parsed.netloc:
            return False  # "null" (sandboxed frames, file: pages), or nonsense
        theirs = _split_host(parsed.netloc)
        if theirs is None or not self._host_allowed(theirs[0]):
            return False
        default = "443" if parsed.scheme == "https" else "80"
        return theirs[0] == host[0] and (theirs[1] or default) == (host[1] or default)
