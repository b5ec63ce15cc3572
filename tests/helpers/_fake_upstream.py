"""A scripted OpenAI-compatible upstream for proxy tests and benches, on the shared fake server.

It streams scripted text as SSE chunks the way OpenAI-compatible servers do
(honouring ``stop`` strings the way llama.cpp does: the stop string is left
out); the server (``_fake_server``) records every request and notices when the
client goes away mid-stream.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.helpers._fake_server import Exchange, FakeServer, Recorded

Responder = Callable[[str, dict[str, Any]], "Reply"]


class Reply:
    """What the fake answers: streamed ``pieces``, or an error ``status`` with ``body``."""

    def __init__(
        self,
        pieces: list[str] | None = None,
        *,
        status: int = 200,
        body: bytes | None = None,
        delay: float = 0.0,
        first_delay: float = 0.0,
        break_after: int | None = None,
        content_type: str = "application/json",
        stamp: bool = False,
    ) -> None:
        self.pieces = pieces or []
        self.status = status
        self.body = body
        self.delay = delay
        self.first_delay = first_delay
        self.break_after = break_after
        self.content_type = content_type
        # Benchmarks: each piece's text becomes its send time, taken as it is written.
        self.stamp = stamp


def prompt_text(path: str, body: dict[str, Any]) -> str:
    """Everything the model would read: the raw prompt, or all message contents."""
    if "messages" in body:
        parts = []
        for msg in body["messages"]:
            content = msg.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(f"{msg.get('role')}: {content}")
        return "\n".join(parts)
    return str(body.get("prompt", ""))


def apply_stop(text: str, stop: object) -> tuple[str, bool]:
    stops = (
        [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str)] if isinstance(stop, list) else []
    )
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class FakeUpstream:
    """Use as a context manager; ``url`` is its base URL, ``requests`` what it received."""

    def __init__(self, responder: Responder | None = None, *, props: dict[str, Any] | None = None) -> None:
        self.responder: Responder = responder or (lambda path, body: Reply(["Hello", " world", "."]))
        # Served at GET /props as llama.cpp does (None: no such route, like other servers).
        self.props = props
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.pieces_sent = 0
        self.server = FakeServer(self._handle)
        self.requests: list[Recorded] = self.server.requests
        self.disconnected = self.server.disconnected

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self) -> FakeUpstream:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def _handle(self, ex: Exchange) -> None:
        if ex.method == "GET":
            if ex.path == "/props" and self.props is not None:
                ex.json(200, self.props)
            elif ex.path.startswith("/v1/models"):
                models = [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "test"}]
                ex.json(200, {"object": "list", "data": models})
            else:
                ex.json(404, {"error": {"message": f"no route {ex.path}", "type": "not_found"}})
            return
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self._answer(ex, ex.body)
        finally:
            with self.lock:
                self.active -= 1

    def _answer(self, ex: Exchange, body: dict[str, Any]) -> None:
        reply = self.responder(ex.path, body)
        if reply.first_delay:
            time.sleep(reply.first_delay)
        if reply.status != 200:
            ex.send(reply.status, reply.body or b"", reply.content_type)
            return
        chat = ex.path.endswith("/chat/completions")
        text, stopped = apply_stop("".join(reply.pieces), body.get("stop"))
        pieces, used = [], 0
        for piece in reply.pieces:
            if used >= len(text):
                break
            pieces.append(piece[: len(text) - used])
            used += len(piece)
        usage = {"prompt_tokens": 7, "completion_tokens": len(pieces), "total_tokens": 7 + len(pieces)}
        if ex.path == "/completion":
            self._native(ex, pieces, stopped, body.get("stop"))
            return
        if not body.get("stream"):
            choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            n = int(body.get("n") or 1)
            ex.json(
                200,
                {
                    "id": "x",
                    "object": "chat.completion" if chat else "text_completion",
                    "created": 0,
                    "model": "fake-model",
                    "choices": [dict(choice, index=i) for i in range(n)],
                    "usage": usage,
                },
            )
            return
        ex.stream(chunked=True)
        for i, piece in enumerate(pieces):
            if reply.break_after is not None and i >= reply.break_after:
                ex.drop()
                return
            if reply.stamp:
                piece = f"t={time.perf_counter():.6f}; "
            if chat:
                choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            else:
                choice = {"index": 0, "text": piece, "finish_reason": None}
            _event(ex, {"id": "x", "object": "chunk", "created": 0, "model": "fake-model", "choices": [choice]})
            with self.lock:
                self.pieces_sent += 1
            if reply.delay:
                time.sleep(reply.delay)
        final: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
        if chat:
            final["delta"] = {}
        else:
            final["text"] = ""
        _event(ex, {"id": "x", "object": "chunk", "created": 0, "model": "fake-model", "choices": [final]})
        _event(ex, {"id": "x", "object": "chunk", "created": 0, "model": "fake-model", "choices": [], "usage": usage})
        ex.write(b"data: [DONE]\n\n")
        ex.end()

    def _native(self, ex: Exchange, pieces: list[str], stopped: bool, stop: object) -> None:
        """llama.cpp's own ``POST /completion`` stream: ``content`` pieces, then a last one with ``stop``."""
        ex.stream(chunked=True)
        for piece in pieces:
            _event(ex, {"content": piece, "stop": False})
            with self.lock:
                self.pieces_sent += 1
        stops = [s for s in (stop if isinstance(stop, list) else [stop]) if isinstance(s, str) and s]
        word = next(iter(stops), "") if stopped else ""
        last = {"content": "", "stop": True, "stop_type": "word" if stopped else "eos", "stopping_word": word}
        _event(ex, {**last, "timings": {"cache_n": 0, "prompt_n": 7}})
        ex.end()


def _event(ex: Exchange, obj: Any) -> None:
    ex.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
