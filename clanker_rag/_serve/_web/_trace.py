"""What the proxy gave the model: a bounded, live record of the requests it handled.

The handler opens one :class:`TraceRecord` per generation request and feeds
it the controller's events (:meth:`TraceRecord.see`); the record keeps, per
injection, the trigger, the query, the passages with their scores, the block
exactly as injected, where in the answer it went (so the text before and
after it can be shown) and how long retrieval and the first resumed token
took.  :class:`TraceLog` keeps the last ``size`` records in memory, tells
subscribers (the ``/trace`` page's event stream) each time one changes, and
with a ``path`` appends every finished record to that file as one JSON line.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..._stream._events import InjectEvent, RetrieveEvent, StreamEvent, TextEvent
from ..._types import Hit, HitLike
from ..._validate import check_int

__all__ = ["DEFAULT_TRACE_SIZE", "TraceLog", "TraceRecord"]

logger = logging.getLogger("clanker_rag._serve._proxy")

DEFAULT_TRACE_SIZE = 100
# An answer longer than this keeps its first part only: a record stays small enough to send whole.
MAX_TEXT_CHARS = 64_000
# Text shown either side of an injection.
CONTEXT_CHARS = 600
MAX_QUESTION_CHARS = 2000
# Updates a slow page has not read yet; past it, that page misses updates (never the proxy's time).
_QUEUE_UPDATES = 1000
_CLOSED = None


def _question(kind: str, body: object) -> str:
    """What the user asked: the last user message (chat) or the prompt's end (completions)."""
    if not isinstance(body, dict):
        return ""
    text: object = ""
    if kind == "chat" and isinstance(body.get("messages"), list):
        users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
        text = users[-1].get("content", "") if users else ""
        if isinstance(text, list):
            text = " ".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
    elif kind != "chat":
        text = body.get("prompt", "")
        if isinstance(text, list) and text and isinstance(text[0], str):
            text = text[0]
    text = text if isinstance(text, str) else ""
    return text[-MAX_QUESTION_CHARS:].strip()


def _passage(hit: HitLike) -> dict[str, Any]:
    # A plain retriever's hits may carry text, source and score only: where they lie is null then.
    where = (hit.start_line, hit.end_line, hit.section) if isinstance(hit, Hit) else (None, None, None)
    return {"source": hit.source, "score": hit.score, **dict(zip(("start_line", "end_line", "section"), where))}


class TraceRecord:
    """One request as the proxy handled it; :meth:`snapshot` is its JSON shape (docs/proxy.md)."""

    def __init__(self, log: TraceLog, rid: int, kind: str, body: object) -> None:
        self._log = log
        self._lock = threading.Lock()
        self.id = rid
        self.kind = kind
        self.time = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        model = body.get("model") if isinstance(body, dict) else None
        self.model = model if isinstance(model, str) else None
        self.question = _question(kind, body)
        self.status = "running"
        self.note = ""
        self.http_status: int | None = None
        self.total_ms: float | None = None
        self._text: list[str] = []
        self._chars = 0
        self._started = time.perf_counter()
        self._injections: list[dict[str, Any]] = []
        self._waiting: dict[str, Any] | None = None  # the injection whose first resumed token is due
        self._injected_at = 0.0

    # -- fed by the handler ---------------------------------------------------------------
    def see(self, ev: StreamEvent) -> None:
        """Take one controller event; a retrieval or an injection is published at once."""
        with self._lock:
            if isinstance(ev, TextEvent):
                if self._waiting is not None and ev.text:
                    self._waiting["first_token_ms"] = round((time.perf_counter() - self._injected_at) * 1e3, 1)
                    self._waiting = None
                if self._chars < MAX_TEXT_CHARS:
                    self._text.append(ev.text[: MAX_TEXT_CHARS - self._chars])
                    self._chars += len(self._text[-1])
                return
            if isinstance(ev, RetrieveEvent):
                self._injections.append(
                    {
                        "trigger": ev.kind,
                        "query": ev.query,
                        "retrieval_ms": round(ev.seconds * 1e3, 1),
                        "error": ev.error,
                        "passages": [_passage(h) for h in ev.hits],
                        "tag": None,
                        "block": None,
                        "at": None,
                        "first_token_ms": None,
                    }
                )
            elif isinstance(ev, InjectEvent):
                entry = next(
                    (e for e in reversed(self._injections) if e["block"] is None and e["query"] == ev.query), None
                )
                if entry is None:
                    entry = {"trigger": ev.kind, "query": ev.query, "retrieval_ms": None, "error": None}
                    entry["passages"] = [{"source": p.source, "score": None} for p in ev.passages]
                    entry["first_token_ms"] = None
                    self._injections.append(entry)
                entry.update(tag=ev.tag, block=ev.block, at=self._chars)
                self._waiting, self._injected_at = entry, time.perf_counter()
        self._log.publish(self)

    def upfront(self, query: str, hits: Sequence[HitLike], block: str) -> None:
        """The one injection of a request forwarded after it (``--no-live``, client tools...)."""
        with self._lock:
            self._injections.append(
                {
                    "trigger": "question",
                    "query": query,
                    "retrieval_ms": None,
                    "error": None,
                    "passages": [_passage(h) for h in hits],
                    "tag": "context",
                    "block": block,
                    "at": 0,
                    "first_token_ms": None,
                }
            )
        self._log.publish(self)

    def done(self, status: int, note: str) -> None:
        self.http_status, self.note = status, note

    # -- read by the pages ----------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            text = "".join(self._text)
            injections = []
            for entry in self._injections:
                item = dict(entry)
                at = item.pop("at")
                after_end = min(
                    (e["at"] for e in self._injections if e.get("at") is not None and at is not None and e["at"] > at),
                    default=len(text),
                )
                item["before"] = text[max(0, at - CONTEXT_CHARS) : at] if at is not None else None
                item["after"] = text[at : min(after_end, at + CONTEXT_CHARS)] if at is not None else None
                item["offset"] = at
                injections.append(item)
            return {
                "id": self.id,
                "time": self.time,
                "kind": self.kind,
                "model": self.model,
                "question": self.question,
                "status": self.status,
                "http_status": self.http_status,
                "note": self.note,
                "total_ms": self.total_ms,
                "text": text,
                "truncated": self._chars >= MAX_TEXT_CHARS,
                "injections": injections,
            }

    def _finish(self, failed: bool) -> None:
        with self._lock:
            self.total_ms = round((time.perf_counter() - self._started) * 1e3, 1)
            self.status = "error" if failed or (self.http_status or 200) >= 400 else "done"


class TraceLog:
    """The last ``size`` records, newest last; ``path``: a JSON-lines file every finished record is appended to."""

    def __init__(self, size: int = DEFAULT_TRACE_SIZE, path: str | Path | None = None) -> None:
        check_int("trace_size", size, 1)
        self.size = size
        self.path = Path(path) if path is not None else None
        self._records: deque[TraceRecord] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._next = 1
        self._subscribers: list[queue.Queue[dict[str, Any] | None]] = []
        self._closed = False

    @contextmanager
    def request(self, kind: str, raw: bytes) -> Iterator[TraceRecord]:
        """A record for one generation request (``raw``: its body), finished when the block ends."""
        try:
            body: object = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        with self._lock:
            record = TraceRecord(self, self._next, kind, body)
            self._next += 1
            self._records.append(record)
        self.publish(record)
        failed = True
        try:
            yield record
            failed = False
        finally:
            record._finish(failed)
            snap = self.publish(record)
            self._append(snap)

    def records(self) -> list[dict[str, Any]]:
        """Every kept record, newest first."""
        with self._lock:
            kept = list(self._records)
        return [r.snapshot() for r in reversed(kept)]

    def publish(self, record: TraceRecord) -> dict[str, Any]:
        snap = record.snapshot()
        with self._lock:
            subscribers = list(self._subscribers)
        for q in subscribers:
            with suppress(queue.Full):
                q.put_nowait(snap)
        return snap

    def subscribe(self) -> queue.Queue[dict[str, Any] | None]:
        """A queue of record snapshots as they change; None once the log closes."""
        q: queue.Queue[dict[str, Any] | None] = queue.Queue(_QUEUE_UPDATES)
        with self._lock:
            if self._closed:
                q.put_nowait(_CLOSED)
            else:
                self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue[dict[str, Any] | None]) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    def close(self) -> None:
        """End every subscription (the server is stopping)."""
        with self._lock:
            self._closed = True
            subscribers, self._subscribers = self._subscribers, []
        for q in subscribers:
            try:
                q.put_nowait(_CLOSED)
            except queue.Full:
                q.get_nowait()
                q.put_nowait(_CLOSED)

    def _append(self, snap: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps(snap, ensure_ascii=False) + "\n"
        try:
            with self._file_lock, self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError as exc:
            logger.warning("cannot append to the trace file %s: %s", self.path, exc)
