"""The one loopback HTTP server behind every fake the tests and benches talk to (standard library).

A fake is a function from an :class:`Exchange` (one request: method, path, headers, decoded
body) to an answer written through it: JSON, a whole body with a status, or a stream written
piece by piece (chunked or until the connection closes), or a connection dropped mid-body.
:class:`FakeServer` binds 127.0.0.1 on a port the system picks, serves each request on its own
thread, records every request and stops when its ``with`` block ends; the ``fake_server``
fixture (tests/conftest.py) starts one for a test and stops it after.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypedDict


class Recorded(TypedDict):
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased: clients differ in the case they send
    body: Any  # the JSON body; {"_raw": text} when it is not JSON; {} when there is none


Handle = Callable[["Exchange"], None]


class Exchange:
    """One request and the means to answer it."""

    def __init__(self, handler: BaseHTTPRequestHandler, request: Recorded) -> None:
        self._handler = handler
        self.request = request
        self._chunked = False

    @property
    def method(self) -> str:
        return self.request["method"]

    @property
    def path(self) -> str:
        return self.request["path"]

    @property
    def body(self) -> Any:
        return self.request["body"]

    @property
    def peer(self) -> tuple[str, int]:
        """The client's address: requests from one port came over one kept-alive connection."""
        host, port = self._handler.client_address[:2]
        return str(host), int(port)

    def send(self, status: int, data: bytes = b"", content_type: str = "application/json") -> None:
        """A whole answer: ``status``, a ``Content-Length`` and ``data``."""
        h = self._handler
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def json(self, status: int, obj: object) -> None:
        self.send(status, json.dumps(obj).encode())

    def stream(self, content_type: str = "text/event-stream", *, chunked: bool = False) -> None:
        """Start a 200 answer whose body :meth:`write` sends piece by piece.

        Chunked: each piece one HTTP chunk and the connection kept; otherwise the body ends
        when the connection closes, as many servers send SSE.
        """
        h = self._handler
        self._chunked = chunked
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Transfer-Encoding" if chunked else "Connection", "chunked" if chunked else "close")
        h.end_headers()
        if not chunked:
            h.close_connection = True

    def write(self, data: bytes) -> None:
        """One piece of a streamed body, flushed at once."""
        wfile = self._handler.wfile
        wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)
        wfile.flush()

    def end(self) -> None:
        """The end of a streamed body."""
        if self._chunked:
            self._handler.wfile.write(b"0\r\n\r\n")

    def drop(self) -> None:
        """Die mid-body: no terminating chunk, the connection shut."""
        self._handler.wfile.flush()
        self._handler.close_connection = True
        self._handler.connection.shutdown(socket.SHUT_RDWR)


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5. When more connections arrive at once than the accept
    # thread takes in time (a busy machine, two dozen proxy requests in a burst), Linux resets the
    # surplus and the proxy rightly answers 502 "cannot reach upstream ... Connection reset by peer":
    # a failure of this test server, not of the code under test. The proxy itself listens with 128
    # (ProxyServer.request_queue_size); this server, standing in for the model server, does too.
    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stops reading mid-stream (a stop string met, an answer cut short) closes its
        # socket with bytes unread, and Linux answers the next read on it with a reset. The handler
        # is then waiting for a next request on the kept-alive connection: nothing was being
        # answered, so nothing failed. socketserver would print that reset's traceback to stderr,
        # where the CLI tests read what the code under test said; every other error still prints.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class FakeServer:
    """An HTTP server on 127.0.0.1 answering every request with ``handle``; use as a context manager.

    ``url`` is its base URL, ``requests`` what it received (in order), ``disconnected`` is set
    once a client went away while being answered.
    """

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.disconnected = threading.Event()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-server", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve(b"")

            def do_POST(self) -> None:
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _serve(self, raw: bytes) -> None:
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = Recorded(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with fake.lock:
                    fake.requests.append(request)
                try:
                    fake.handle(Exchange(self, request))
                except (BrokenPipeError, ConnectionResetError):
                    fake.disconnected.set()
                    self.close_connection = True

        return Handler
