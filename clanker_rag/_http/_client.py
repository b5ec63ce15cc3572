"""``ModelServer`` and ``Response``: requests to one model server, answers read as they arrive.

A :class:`ModelServer` is one base URL (with or without ``/v1``, see
:mod:`clanker_rag._urls`) and a :class:`~._timeout.Timeout`.
:meth:`ModelServer.request` sends one request and returns the
:class:`Response` once its status line and headers are in; the body is read
from it as the caller needs: whole (:meth:`Response.read`,
:meth:`Response.json`), in pieces as they arrive (:meth:`Response.read1`,
:meth:`Response.lines`, :meth:`Response.events`), or as the JSON objects of
an OpenAI-style answer (:meth:`Response.objects`: server-sent events up to
``[DONE]``, or one JSON body from a server that ignored ``"stream"``).
``http.client`` decodes chunked transfer; SSE goes through the package's one
decoder (:mod:`clanker_rag._sse`).

Every failure is raised once, here, as a ``Server*Error`` (all of them
:class:`~clanker_rag._exceptions.BackendError`) naming the server: no
connection (:class:`~clanker_rag._exceptions.ServerUnreachableError`), too
slow (:class:`~clanker_rag._exceptions.ServerTimeoutError`), an HTTP error
status (:class:`~clanker_rag._exceptions.ServerStatusError`, raised by
:meth:`Response.raise_for_status` and the readers that expect a 200), a
broken answer (:class:`~clanker_rag._exceptions.ServerAnswerError`).

Each request has its own connection, closed with its response: closing a
response before its end is how a server is told to stop generating (a
resumed turn, a client gone).  Connections are not kept alive for a next
request: on loopback a new one costs about a millisecond, small beside a
model's answer, while a kept one waited 40 ms per request on a server that
writes its headers and body apart (Nagle's algorithm meeting delayed ACKs),
and every idle kept connection holds one of the server's threads.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from .._exceptions import (
    ServerAnswerError,
    ServerStatusError,
    ServerTimeoutError,
    ServerUnreachableError,
)
from .._sse import DONE, iter_sse
from .._urls import BaseUrl, parse_base_url
from ._timeout import Timeout

__all__ = ["ModelServer", "Response", "snippet"]

# How much of an error answer is read, and how much of it a message quotes.
ERROR_BODY_BYTES = 4096
SNIPPET_CHARS = 500
# The most one read of a streamed body asks for; it returns what has arrived.
READ_SIZE = 65536
DEFAULT_TIMEOUT = Timeout()


def snippet(body: bytes | str, limit: int = SNIPPET_CHARS) -> str:
    """``body`` on one line, cut to ``limit`` characters: what an error message quotes of an answer."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "")


class ModelServer:
    """The client of one model server: its base URL and timeouts.

    ``name`` prefixes the URL in error messages (the proxy says
    ``upstream``); ``what`` names the URL setting when it is not valid.  One
    instance may serve many threads at once (it holds no connection between
    requests); each response belongs to the thread that asked.
    """

    def __init__(
        self,
        base_url: str | BaseUrl,
        timeout: float | Timeout = DEFAULT_TIMEOUT,
        *,
        name: str = "",
        what: str = "base_url",
    ) -> None:
        self.base = base_url if isinstance(base_url, BaseUrl) else parse_base_url(base_url, what=what)
        self.timeout = Timeout.of(timeout)
        self.name = name

    @property
    def url(self) -> str:
        """The normalised base URL (no ``/v1``)."""
        return self.base.url

    def url_of(self, path: str) -> str:
        """The full URL of ``path`` (such as ``/v1/completions``) on this server."""
        return self.base.url + path

    def describe(self, path: str) -> str:
        """How error messages name ``path`` on this server: its URL, after ``name`` when there is one."""
        url = self.url_of(path)
        return f"{self.name} {url}" if self.name else url

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> Response:
        """Send one request; the :class:`Response` once the status line and headers have arrived.

        Any status is returned (a 404 is an answer too); readers that expect
        a success call :meth:`Response.raise_for_status`.  Raises
        ``ServerUnreachableError`` or ``ServerTimeoutError``.
        """
        url, who = self.url_of(path), self.describe(path)
        target = self.base.path(path)
        conn = self._connect(url, who)
        try:
            conn.request(method, target, body=body, headers=dict(headers or {}))
            resp = conn.getresponse()
        except TimeoutError:
            conn.close()
            raise ServerTimeoutError(f"{who} timed out after {self.timeout.read:g} s", url) from None
        except (OSError, http.client.HTTPException) as exc:
            # Reset or closed before an answer (a server restarting, a proxy refusing): no answer at all.
            conn.close()
            raise ServerUnreachableError(f"cannot reach {who}: {exc}", url) from None
        return Response(self.timeout, conn, resp, url, who)

    def json(
        self,
        method: str,
        path: str,
        payload: object = None,
        headers: Mapping[str, str] | None = None,
    ) -> object:
        """``payload`` (if any) sent as JSON; the whole JSON answer, decoded.  A status >= 400 raises."""
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        with self.request(method, path, data, hdrs) as resp:
            return resp.json()

    def _connect(self, url: str, who: str) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.base.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.base.host, self.base.port, timeout=self.timeout.connect)
        try:
            conn.connect()
        except TimeoutError:
            conn.close()
            raise ServerTimeoutError(f"connecting to {who} timed out after {self.timeout.connect:g} s", url) from None
        except OSError as exc:
            conn.close()
            raise ServerUnreachableError(f"cannot reach {who}: {exc}", url) from None
        assert conn.sock is not None  # connect() either set it or raised
        # Small SSE writes must not wait for Nagle's algorithm; every later wait is a read.
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sock.settimeout(self.timeout.read)
        return conn


class Response:
    """One answer of a model server, read incrementally; close it (or use ``with``) when done.

    ``status``, ``reason`` and :meth:`header` are there at once; every
    reader maps a timeout or a broken connection to a ``Server*Error``.
    ``url`` is the request's URL, ``who`` how messages name it.
    ``complete`` turns true once :meth:`objects` has seen the answer's end
    (``[DONE]``, or the whole body of a one-JSON answer).
    """

    def __init__(
        self,
        timeout: Timeout,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        url: str,
        who: str,
    ) -> None:
        self._timeout = timeout
        self._conn = conn
        self._resp = resp
        self.url = url
        self.who = who
        self.status = resp.status
        self.reason = resp.reason
        self.complete = False

    def __enter__(self) -> Response:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def header(self, name: str) -> str | None:
        return self._resp.getheader(name)

    def headers(self) -> list[tuple[str, str]]:
        return self._resp.getheaders()

    @property
    def is_event_stream(self) -> bool:
        return "text/event-stream" in (self.header("Content-Type") or "").lower()

    def close(self) -> None:
        """Done with this answer: its connection is closed, which stops a server still generating it."""
        self._resp.close()
        self._conn.close()

    # -- readers -----------------------------------------------------------------------------------
    def _timed_out(self) -> ServerTimeoutError:
        return ServerTimeoutError(f"{self.who} timed out after {self._timeout.read:g} s", self.url)

    def _broke(self, exc: BaseException) -> ServerAnswerError:
        return ServerAnswerError(f"connection to {self.who} broke: {exc}", self.url)

    def read(self, limit: int | None = None) -> bytes:
        """The rest of the body (at most ``limit`` bytes)."""
        try:
            return self._resp.read(limit) if limit is not None else self._resp.read()
        except TimeoutError:
            raise self._timed_out() from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._broke(exc) from None

    def read1(self, size: int) -> bytes:
        """What has arrived, at most ``size`` bytes, waiting only while nothing has; ``b""`` at the end."""
        try:
            return self._resp.read1(size)
        except TimeoutError:
            raise self._timed_out() from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._broke(exc) from None

    def lines(self) -> Iterator[bytes]:
        """The body line by line (``\\n`` kept), each yielded as soon as it has arrived.

        Read with :meth:`read1`, not ``readline``: on a chunked body
        ``http.client``'s ``readline`` takes a connection dropped between two
        chunks for the body's end, ``read1`` reports it.
        """
        buf = b""
        while piece := self.read1(READ_SIZE):
            buf += piece
            start = 0
            while (end := buf.find(b"\n", start)) >= 0:
                yield buf[start : end + 1]
                start = end + 1
            buf = buf[start:]
        if buf:
            yield buf

    def events(self) -> Iterator[tuple[str, str]]:
        """The body's server-sent events as ``(event, data)`` (see :func:`clanker_rag._sse.iter_sse`)."""
        return iter_sse(self.lines())

    def raise_for_status(self) -> None:
        """``ServerStatusError`` (with the start of the body) when the status is 400 or more."""
        if self.status >= 400:
            body = self.read(ERROR_BODY_BYTES)
            raise ServerStatusError(
                f"{self.who} answered HTTP {self.status}: {snippet(body)}", self.url, self.status, body
            )

    def json(self) -> object:
        """The whole body as JSON, after :meth:`raise_for_status`."""
        self.raise_for_status()
        text = self.read().decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            raise self._not_json(text) from None

    def objects(self) -> Iterator[dict[str, Any]]:
        """The JSON objects of an OpenAI-style answer, after :meth:`raise_for_status`.

        An event stream yields each ``data:`` event up to ``[DONE]`` (an
        ``error`` line is a ``ServerAnswerError``); any other answer is one
        JSON body (a server that ignored ``"stream"``).  ``complete`` says
        whether the answer reached its end; a stream that stops without
        ``[DONE]`` just ends, and the caller judges it.
        """
        self.raise_for_status()
        if not self.is_event_stream:
            obj = self._object(self.read().decode("utf-8", errors="replace"))
            self.complete = True
            yield obj
            return
        for event, data in self.events():
            if data.strip() == DONE:
                self.complete = True
                return
            if event == "error":
                raise ServerAnswerError(f"{self.who} reported an error: {snippet(data)}", self.url)
            yield self._object(data)

    def _object(self, data: str) -> dict[str, Any]:
        try:
            obj = json.loads(data)
        except ValueError:
            raise self._not_json(data) from None
        if not isinstance(obj, dict):
            raise ServerAnswerError(f"{self.who} answered JSON that is not an object: {snippet(data)}", self.url)
        return obj

    def _not_json(self, text: str) -> ServerAnswerError:
        return ServerAnswerError(f"{self.who} answered something that is not JSON: {snippet(text)}", self.url)
