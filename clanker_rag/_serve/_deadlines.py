"""How long a connection may take to say what it wants: the proxy's header deadline.

Each connection of the proxy holds a thread and one of ``max_connections``
slots.  A socket timeout alone does not free them in time: it bounds each
``recv``, so a client that opens a connection and then sends nothing, half a
request line, or a header a byte every few seconds, keeps its slot for as
long as it likes, and a few hundred such clients make the proxy answer 503 to
everyone.  So a connection waiting for a request (a new one, or an idle
keep-alive one between requests) must have the request line and every header
in within ``seconds``; past that, :class:`HeaderDeadlines` shuts its socket
down, which wakes the thread blocked reading it and ends the connection.
Once the headers are in, the long timeouts of the body and the stream apply.

One thread per server watches every deadline; it starts with the first
connection and ends when the server closes.  :class:`LimitedServer` is the
server side both the proxy and the browse-only server use: at most
``max_connections`` connections at once (past it, 503 at once) and the
header deadline on each.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast

from .._exceptions import ConfigError

__all__ = [
    "DEFAULT_HEADER_SECONDS",
    "DEFAULT_MAX_CONNECTIONS",
    "DeadlineHandler",
    "HeaderDeadlines",
    "LimitedServer",
    "check_header_seconds",
]

logger = logging.getLogger("clanker_rag._serve._proxy")

# Real clients send a request line and headers in one packet, milliseconds
# after they connect or reuse a connection; Apache's keep-alive timeout is 5 s.
DEFAULT_HEADER_SECONDS = 5.0
# Connections served at once (a thread each); past it a connection gets 503 at
# once.  Well above the concurrent streams one upstream can serve.
DEFAULT_MAX_CONNECTIONS = 256
_BUSY_BODY = b'{"error": {"message": "the server has too many connections", "type": "server_error", "code": "busy"}}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class HeaderDeadlines:
    """Shuts down the socket of any connection whose request headers take longer than ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._cond = threading.Condition()
        self._pending: dict[int, tuple[float, socket.socket]] = {}  # ticket -> (deadline, socket)
        self._heap: list[tuple[float, int]] = []
        self._tickets = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.expired = 0  # connections cut (for logs and tests)

    def start(self, sock: socket.socket) -> int:
        """``sock`` starts waiting for a request's headers; returns the ticket :meth:`done` takes."""
        ticket = next(self._tickets)
        due = time.monotonic() + self.seconds
        with self._cond:
            if self._closed:  # (the server is closing: nothing is cut any more)
                return ticket
            self._pending[ticket] = (due, sock)
            heapq.heappush(self._heap, (due, ticket))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="clanker-rag header deadlines", daemon=True)
                self._thread.start()
            elif len(self._heap) == 1:
                self._cond.notify()
        return ticket

    def done(self, ticket: int) -> bool:
        """The headers of ``ticket``'s request are in (or its connection ended).

        False when the deadline passed first: the socket is shut down, and
        what was read of the request is cut short, so it must not be served.
        """
        with self._cond:
            return self._pending.pop(ticket, None) is not None or self._closed

    def close(self) -> None:
        """Stop watching (the server is closing); the watcher thread ends."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._heap.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _run(self) -> None:
        while True:
            late: list[socket.socket] = []
            with self._cond:
                while not self._closed:
                    now = time.monotonic()
                    # Tickets done since they were pushed are dropped as they surface.
                    while self._heap and self._heap[0][1] not in self._pending:
                        heapq.heappop(self._heap)
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._closed:
                    return
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, ticket = heapq.heappop(self._heap)
                    entry = self._pending.pop(ticket, None)
                    if entry is not None:
                        late.append(entry[1])
            for sock in late:
                self.expired += 1
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def check_header_seconds(value: object, most: float) -> None:
    """Raise ``ConfigError`` unless ``value`` is a number of seconds in (0, ``most``]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"header_timeout={value!r} must be a number of seconds")
    if not 0 < value <= most:
        raise ConfigError(f"header_timeout={value} is out of range: expected > 0 and <= {most:g}")


class _WithDeadlines(Protocol):
    header_deadlines: HeaderDeadlines


class DeadlineHandler(BaseHTTPRequestHandler):
    """A request handler whose request line and headers are due within its server's ``header_deadlines``.

    The wait starts when the handler waits for a request and ends once the
    headers are parsed; a request cut off at the deadline is not served.
    """

    _header_ticket = -1

    def _deadlines(self) -> HeaderDeadlines:
        return cast(_WithDeadlines, self.server).header_deadlines

    def handle_one_request(self) -> None:
        deadlines = self._deadlines()
        self._header_ticket = deadlines.start(self.connection)
        try:
            super().handle_one_request()
        finally:
            deadlines.done(self._header_ticket)

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if not self._deadlines().done(self._header_ticket):
            # Cut off at the deadline: the headers read may be a truncated set
            # (and the socket is shut down: nothing can be answered).
            self.close_connection = True
            return False
        return parsed


class LimitedServer(ThreadingHTTPServer):
    """A threading server with at most ``max_connections`` connections and the header deadline on each.

    Its handler must be a :class:`DeadlineHandler`.
    """

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[DeadlineHandler],
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        header_timeout: float = DEFAULT_HEADER_SECONDS,
    ) -> None:
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self.header_deadlines = HeaderDeadlines(header_timeout)
        super().__init__(address, handler)

    def server_close(self) -> None:
        super().server_close()
        self.header_deadlines.close()

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, or 503 at once when ``max_connections`` are open."""
        if not self._slots.acquire(blocking=False):
            logger.warning("refused a connection from %s: %d already open", client_address[0], self.max_connections)
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(_BUSY)
                request.shutdown(socket.SHUT_WR)
                # What the client already sent is read (without waiting), so
                # closing does not reset the connection before it reads the 503.
                request.setblocking(False)
                while request.recv(65536):
                    pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # no thread started to release it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
