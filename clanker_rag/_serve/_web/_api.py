"""The pages and the JSON endpoints they read, answered on the proxy's own port.

``GET /``, ``/sources`` and ``/trace`` are static HTML shells (they hold no
data and load without the token); ``/clanker-rag/static/NAME`` their CSS and
JavaScript; everything under ``/clanker-rag/`` else is data and passes the
same access checks as the proxy, token included (docs/proxy.md lists them).
Every answer carries a Content-Security-Policy that allows this origin only:
the pages build their DOM with ``textContent``, never from HTML, so a
retrieved ``<script>`` shows as text.
"""

from __future__ import annotations

import json
import queue
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..._sse import encode_event
from ..._types import Hit, HitLike, KnowledgeBaseLike, Retriever
from ._trace import TraceLog

__all__ = ["PAGES", "PREFIX", "Reads", "WebApp", "is_page", "serves"]

PREFIX = "/clanker-rag/"
PAGES = {"": "index.html", "/sources": "sources.html", "/trace": "trace.html"}
_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8", ".js": "text/javascript"}
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
MAX_K = 50
# A source larger than this is shown up to it (the page says so).
MAX_SOURCE_CHARS = 2_000_000
MAX_LISTED_SOURCES = 5000
# Seconds between the comments that keep an idle event stream (and the proxy's idle timeout) alive.
KEEPALIVE_SECONDS = 15.0
_WORD = re.compile(r"\w+")
T = TypeVar("T")


@runtime_checkable
class Reads(Protocol):
    """A served retriever that lends its current knowledge base to a reader (``SharedRetriever``)."""

    def read(self, fn: Callable[[Any], T]) -> T: ...


class _Failed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def serves(method: str, path: str) -> bool:
    """Whether ``path`` is one of the pages' (anything else goes to the upstream)."""
    route = urllib.parse.urlsplit(path).path.rstrip("/")
    return method in ("GET", "HEAD") and (route in PAGES or route.startswith(PREFIX))


def is_page(method: str, path: str) -> bool:
    """Whether a request asks for a static page or asset: an HTML shell that holds no data
    loads without the token (the page then asks for it); every data endpoint needs it."""
    route = urllib.parse.urlsplit(path).path.rstrip("/")
    return method in ("GET", "HEAD") and (route in PAGES or route.startswith(PREFIX + "static/"))


def _static(name: str) -> bytes | None:
    if not re.fullmatch(r"[a-z]+\.(html|css|js)", name):
        return None
    try:
        return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _marks(text: str, query_terms: set[str], analyzer: Callable[[str], Iterable[str]]) -> list[list[int]]:
    """Spans of ``text`` whose words analyse to a query term (what the page highlights)."""
    seen: dict[str, bool] = {}
    spans = []
    for m in _WORD.finditer(text):
        word = m.group().lower()
        hit = seen.get(word)
        if hit is None:
            hit = seen[word] = bool(query_terms.intersection(analyzer(word)))
        if hit:
            spans.append([m.start(), m.end()])
    return spans


def _hit_json(hit: HitLike) -> dict[str, Any]:
    # A plain retriever's hits may carry text, source and score only: where they lie is null then.
    h = hit if isinstance(hit, Hit) else None
    return {
        "source": hit.source,
        "score": hit.score,
        "text": hit.text,
        "start": h and h.start,
        "end": h and h.end,
        "start_line": h and h.start_line,
        "end_line": h and h.end_line,
        "section": h and h.section,
        "chunk_index": h and h.chunk_index,
        "chunk_id": h and h.chunk_id,
    }


def _retriever(served: object) -> Retriever:
    if not isinstance(served, Retriever):
        raise _Failed(501, "this server has nothing to search")
    return served


def _kb(served: object) -> KnowledgeBaseLike:
    """The served knowledge base; a plain retriever (a search function) has nothing to browse."""
    if not isinstance(served, KnowledgeBaseLike):
        raise _Failed(501, "this server searches a retriever that is not a knowledge base: nothing to browse")
    return served


class WebApp:
    """Answers the page and data requests of one server over ``retriever``, with its ``trace``."""

    def __init__(self, retriever: object, trace: TraceLog, *, browse_only: bool = False) -> None:
        self.retriever = retriever
        self.trace = trace
        self.browse_only = browse_only

    def _read(self, fn: Callable[[object], T]) -> T:
        served = self.retriever
        return served.read(fn) if isinstance(served, Reads) else fn(served)

    # -- answering ---------------------------------------------------------------------------
    def answer(self, handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        """Answer ``handler``'s request; the status and a note for the log line (499: the client left)."""
        try:
            return self._answer(handler)
        except OSError as exc:
            handler.close_connection = True
            return 499, f"client disconnected: {exc}"

    def _answer(self, handler: BaseHTTPRequestHandler) -> tuple[int, str]:
        parts = urllib.parse.urlsplit(handler.path)
        route = parts.path.rstrip("/")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(parts.query).items()}
        if route in PAGES or route.startswith(PREFIX + "static/"):
            name = PAGES.get(route) or route[len(PREFIX + "static/") :]
            data = _static(name)
            if data is None:
                return self._json(handler, 404, {"error": {"message": "no such file", "type": "not_found"}}), "web"
            kind = _TYPES[name[name.rindex(".") :]]
            return self._send(handler, 200, kind, data), "web page"
        if route == PREFIX + "trace/events" and handler.command == "GET":
            return self._events(handler), "trace events"
        endpoint: Callable[[Mapping[str, str]], Any] | None = {
            PREFIX + "info": self._info,
            PREFIX + "search": self._search,
            PREFIX + "explain": self._explain,
            PREFIX + "sources": self._sources,
            PREFIX + "source": self._source,
            PREFIX + "trace": lambda _: {"records": self.trace.records(), "size": self.trace.size},
        }.get(route)
        if endpoint is None:
            return self._json(handler, 404, {"error": {"message": "no such endpoint", "type": "not_found"}}), "web"
        try:
            body = endpoint(params)
        except _Failed as exc:
            return self._json(handler, exc.status, {"error": {"message": str(exc), "type": "invalid_request_error"}}), (
                "web"
            )
        return self._json(handler, 200, body), "web"

    def _send(self, handler: BaseHTTPRequestHandler, status: int, kind: str, data: bytes) -> int:
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in _SECURITY_HEADERS.items():
            handler.send_header(name, value)
        # A page's requests come in a burst and stop: no connection (and its thread) idles after them.
        handler.send_header("Connection", "close")
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)
        return status

    def _json(self, handler: BaseHTTPRequestHandler, status: int, obj: object) -> int:
        return self._send(handler, status, "application/json", json.dumps(obj, ensure_ascii=False).encode("utf-8"))

    # -- endpoints ---------------------------------------------------------------------------
    def _info(self, _: Mapping[str, str]) -> dict[str, Any]:
        def info(served: object) -> dict[str, Any]:
            if not isinstance(served, KnowledgeBaseLike):
                return {"chunks": None, "sources": None}
            # A sharded index counts its sources on the shards (no list of names comes here).
            return {"chunks": len(served), "sources": served.source_count()}

        return {**self._read(info), "browse_only": self.browse_only, "trace_size": self.trace.size}

    def _search(self, params: Mapping[str, str]) -> dict[str, Any]:
        query = params.get("q", "").strip()
        try:
            k = max(1, min(MAX_K, int(params.get("k", "10"))))
        except ValueError:
            raise _Failed(400, "k must be a whole number") from None
        source = params.get("source") or None

        def search(served: object) -> dict[str, Any]:
            kb = served if isinstance(served, KnowledgeBaseLike) else None
            hits: Sequence[HitLike]
            if kb is not None:
                hits = kb.search(query, k, source=source)
            elif source:
                raise _Failed(501, "this server searches a retriever that is not a knowledge base: no source filter")
            else:
                hits = _retriever(served).search(query, k)
            analyzer = kb.analyzer if kb is not None else None
            terms = set(analyzer(query)) if analyzer is not None else set()
            out = []
            for hit in hits:
                item = _hit_json(hit)
                item["marks"] = _marks(hit.text, terms, analyzer) if analyzer is not None and terms else []
                out.append(item)
            return {"query": query, "terms": sorted(terms), "hits": out, "explain": kb is not None}

        return self._read(search) if query else {"query": "", "terms": [], "hits": [], "explain": False}

    def _chunk(self, kb: KnowledgeBaseLike, source: str, chunk_id: int) -> Hit:
        for hit in kb.chunks(source):
            if hit.chunk_id == chunk_id:
                return hit
        raise _Failed(404, "no such chunk (the index may have changed: search again)")

    def _explain(self, params: Mapping[str, str]) -> dict[str, Any]:
        try:
            chunk_id = int(params.get("chunk_id", ""))
        except ValueError:
            raise _Failed(400, "chunk_id must be a whole number") from None
        query, source = params.get("q", ""), params.get("source", "")

        def explain(served: object) -> dict[str, Any]:
            kb = _kb(served)
            result: dict[str, Any] = kb.explain(query, self._chunk(kb, source, chunk_id)).to_dict()
            return result

        return self._read(explain)

    def _sources(self, params: Mapping[str, str]) -> dict[str, Any]:
        needle = params.get("filter", "").strip().lower()

        def sources(served: object) -> dict[str, Any]:
            # A sharded index sends its names page by page: matches are counted as they pass, and only
            # the first MAX_LISTED_SOURCES are kept, so this costs the same memory at any index size.
            total, listed = 0, list[str]()
            for name in _kb(served).iter_sources():
                if needle in name.lower():
                    total += 1
                    if len(listed) < MAX_LISTED_SOURCES:
                        listed.append(name)
            return {"total": total, "sources": listed}

        return self._read(sources)

    def _source(self, params: Mapping[str, str]) -> dict[str, Any]:
        name = params.get("name", "")

        def source(served: object) -> dict[str, Any]:
            kb = _kb(served)
            text = kb.source_text(name)
            if text is None:
                raise _Failed(404, "no such source")
            meta = kb.source_metadata(name)
            chunks = [
                {k: v for k, v in _hit_json(h).items() if k not in ("text", "score", "source")} for h in kb.chunks(name)
            ]
            return {
                "name": name,
                "text": text[:MAX_SOURCE_CHARS],
                "truncated": len(text) > MAX_SOURCE_CHARS,
                "metadata": json.loads(json.dumps(meta, default=str)) if meta else {},
                "chunks": chunks,
            }

        return self._read(source)

    def _events(self, handler: BaseHTTPRequestHandler) -> int:
        """Every kept record (oldest first), then each record again whenever it changes: server-sent events."""
        updates = self.trace.subscribe()
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
            handler.send_header("X-Accel-Buffering", "no")
            for name, value in _SECURITY_HEADERS.items():
                handler.send_header(name, value)
            # No length and no chunking: the stream ends when the connection does.
            handler.send_header("Connection", "close")
            handler.close_connection = True
            handler.end_headers()
            for record in reversed(self.trace.records()):
                handler.wfile.write(encode_event(record))
            handler.wfile.flush()
            while True:
                try:
                    update = updates.get(timeout=KEEPALIVE_SECONDS)
                except queue.Empty:
                    handler.wfile.write(b": keep-alive\n\n")
                    handler.wfile.flush()
                    continue
                if update is None:
                    return 200
                handler.wfile.write(encode_event(update))
                handler.wfile.flush()
        finally:
            self.trace.unsubscribe(updates)
