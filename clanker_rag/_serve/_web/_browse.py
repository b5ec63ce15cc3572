"""``clanker-rag serve`` without an upstream: the pages alone, for browsing a knowledge base.

The same pages, endpoints and access checks as the proxy (Host, Origin, the
bearer token) and the same connection limits (``max_connections``, the header
deadline: :class:`~clanker_rag._serve._deadlines.LimitedServer`); generation
requests get a 503 saying there is no upstream.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from typing import Any

from ..._validate import check_int
from .._access import AccessPolicy
from .._deadlines import (
    DEFAULT_HEADER_SECONDS,
    DEFAULT_MAX_CONNECTIONS,
    DeadlineHandler,
    LimitedServer,
    check_header_seconds,
)
from ._api import WebApp, is_page, serves
from ._trace import TraceLog

__all__ = ["BrowseServer"]

logger = logging.getLogger("clanker_rag._serve._proxy")


class BrowseServer(LimitedServer):
    """The web pages over ``retriever`` on ``address``; no proxying."""

    def __init__(
        self,
        address: tuple[str, int],
        retriever: object,
        token: str | None = None,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        header_timeout: float = DEFAULT_HEADER_SECONDS,
    ) -> None:
        check_int("max_connections", max_connections, 1)
        check_header_seconds(header_timeout, _BrowseHandler.timeout)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.access = AccessPolicy(str(address[0]), token)
        self.trace = TraceLog()
        self.web = WebApp(retriever, self.trace, browse_only=True)
        super().__init__(address, _BrowseHandler, max_connections=max_connections, header_timeout=header_timeout)

    def server_close(self) -> None:
        super().server_close()
        self.trace.close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host_s = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://[{host_s}]:{port}" if ":" in host_s else f"http://{host_s}:{port}"


class _BrowseHandler(DeadlineHandler):
    server: BrowseServer
    protocol_version = "HTTP/1.1"
    server_version = "clanker-rag"
    timeout = 60

    def version_string(self) -> str:
        return self.server_version

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s: %s", self.address_string(), format % args)

    def _error(self, status: int, message: str, code: str) -> None:
        data = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="clanker-rag"')
        self.close_connection = True
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self) -> None:
        started = time.perf_counter()
        with contextlib.suppress(OSError):
            refusal = self.server.access.refusal(self.command, self.headers.get)
            if refusal is not None and not (refusal.status == 401 and is_page(self.command, self.path)):
                self._error(refusal.status, refusal.message, refusal.code)
                status = refusal.status
            elif serves(self.command, self.path):
                status, _ = self.server.web.answer(self)
            else:
                status = 503
                self._error(
                    503, "this server only browses its knowledge base (serve was given no --upstream)", "no_upstream"
                )
            logger.info(
                "%s %s %s %d %.0f ms",
                self.address_string(),
                self.command,
                self.path.split("?", 1)[0],
                status,
                (time.perf_counter() - started) * 1e3,
            )

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _dispatch
