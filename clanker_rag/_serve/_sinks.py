"""The proxy's answers to its clients: OpenAI-style SSE chunks or one JSON body.

:class:`SseSink` streams a driven answer as ``chat.completion.chunk`` /
``text_completion`` events in one message with one ``finish_reason``;
:class:`JsonSink` collects it for a non-streamed request.  When the upstream
streamed its thinking (``reasoning_content`` / ``reasoning``), the turn put
it between ``<think>`` tags for the controller; :class:`ThinkSplit` takes
it back out, and the sinks send it in the field it came in.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any, Protocol

from .._sse import DONE, encode_event
from ._upstream import THINK_CLOSE, THINK_OPEN, UpstreamTurn

__all__ = ["ClientGone", "JsonSink", "ResponseWriter", "SseSink", "ThinkSplit"]


class ClientGone(Exception):
    """Writing to the client failed: it disconnected."""


class ResponseWriter(Protocol):
    """The request handler as a sink writes to it."""

    def send_response(self, code: int, message: str | None = None) -> None: ...

    def send_header(self, keyword: str, value: str) -> None: ...

    def end_headers(self) -> None: ...

    def write_body(self, data: bytes) -> None: ...


class JsonSink:
    """Collects the answer of a non-streamed request."""

    started = False

    def __init__(self, kind: str, turn: UpstreamTurn) -> None:
        self.kind = kind
        self.turn = turn
        self.parts: list[str] = []
        self.thinking: list[str] = []
        self.split = ThinkSplit()

    def text(self, text: str) -> None:
        if self.turn.reasoning_field is None:
            self.parts.append(text)
            return
        for thinking, part in self.split.feed(text):
            (self.thinking if thinking else self.parts).append(part)

    def error(self, payload: Mapping[str, Any]) -> None:  # pragma: no cover - started is always False
        raise AssertionError("a JSON answer cannot fail mid-stream")

    def finish(self, extension: Mapping[str, Any]) -> None:
        for thinking, part in self.split.flush():
            (self.thinking if thinking else self.parts).append(part)

    def response(self, extension: Mapping[str, Any]) -> dict[str, Any]:
        turn = self.turn
        text = "".join(self.parts)
        created = int(time.time())
        if self.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": turn.finish_reason or "stop",
            }
            if self.turn.reasoning_field is not None:
                choice["message"][self.turn.reasoning_field] = "".join(self.thinking)
            obj: dict[str, Any] = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion"}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": turn.finish_reason or "stop"}
            obj = {"id": "cmpl-" + secrets.token_hex(12), "object": "text_completion"}
        obj.update({"created": created, "model": turn.model or "unknown", "choices": [choice]})
        usage = turn.usage()
        if usage is not None:
            obj["usage"] = usage
        obj["clanker_rag"] = dict(extension)
        return obj


class SseSink:
    """Writes OpenAI-style server-sent events, chunked, one event per piece."""

    def __init__(self, handler: ResponseWriter, kind: str, turn: UpstreamTurn) -> None:
        self.handler = handler
        self.kind = kind
        self.turn = turn
        self.started = False
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        opts = turn.body.get("stream_options")
        self.include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        self.split = ThinkSplit()

    def _start(self) -> None:
        h = self.handler
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream; charset=utf-8")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("X-Accel-Buffering", "no")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
        except OSError as exc:
            raise ClientGone(str(exc)) from None
        self.started = True
        if self.kind == "chat":
            self._event(self._chunk({"role": "assistant", "content": ""}, None))

    def _event(self, obj: Mapping[str, Any] | str) -> None:
        data = encode_event(obj)
        self.handler.write_body(b"%x\r\n%s\r\n" % (len(data), data))

    def _chunk(self, delta: Mapping[str, Any] | str, finish: str | None) -> dict[str, Any]:
        model = self.turn.model or "unknown"
        if self.kind == "chat":
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": model,
                "choices": [choice],
            }
        choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": finish}
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": model,
            "choices": [choice],
        }

    def text(self, text: str) -> None:
        if not self.started:
            self._start()
        field = self.turn.reasoning_field
        if field is None or self.kind != "chat":
            if text:
                self._event(self._chunk({"content": text} if self.kind == "chat" else text, None))
            return
        # The upstream's thinking goes back out in the field it came in, in the same message.
        for thinking, part in self.split.feed(text):
            self._event(self._chunk({field if thinking else "content": part}, None))

    def send(self, chunk: Mapping[str, Any]) -> None:
        """Send a chunk built elsewhere (``--native-tools``) under this answer's id."""
        if not self.started:
            self._start()
        self._event({**chunk, "id": self.id})

    def close(self) -> None:
        """End a stream of :meth:`send` chunks."""
        if not self.started:
            self._start()
        self._event(DONE)
        self.handler.write_body(b"0\r\n\r\n")

    def error(self, payload: Mapping[str, Any]) -> None:
        self._event(dict(payload))
        self._event(DONE)
        self.handler.write_body(b"0\r\n\r\n")

    def finish(self, extension: Mapping[str, Any]) -> None:
        if not self.started:
            self._start()
        field = self.turn.reasoning_field
        if field is not None and self.kind == "chat":
            for thinking, part in self.split.flush():
                self._event(self._chunk({field if thinking else "content": part}, None))
        last = self._chunk({} if self.kind == "chat" else "", self.turn.finish_reason or "stop")
        last["clanker_rag"] = dict(extension)
        self._event(last)
        usage = self.turn.usage()
        if self.include_usage and usage is not None:
            self._event(
                {
                    "id": self.id,
                    "object": last["object"],
                    "created": self.created,
                    "model": self.turn.model or "unknown",
                    "choices": [],
                    "usage": usage,
                }
            )
        self._event(DONE)
        self.handler.write_body(b"0\r\n\r\n")


class ThinkSplit:
    """Splits visible text at the ``<think>`` / ``</think>`` tags the upstream turn put around its thinking.

    Incremental: a tag split across pieces is found; only characters that
    may still be a tag are held.  Yields ``(thinking, text)`` pairs, tags left out.
    """

    def __init__(self) -> None:
        self.thinking = False
        self.held = ""

    def feed(self, text: str) -> list[tuple[bool, str]]:
        buf = self.held + text
        out: list[tuple[bool, str]] = []
        while buf:
            tag = THINK_CLOSE if self.thinking else THINK_OPEN
            at = buf.find(tag)
            if at != -1:
                if at:
                    out.append((self.thinking, buf[:at]))
                buf = buf[at + len(tag) :]
                self.thinking = not self.thinking
                continue
            keep = next((k for k in range(min(len(tag) - 1, len(buf)), 0, -1) if tag.startswith(buf[-k:])), 0)
            if len(buf) > keep:
                out.append((self.thinking, buf[: len(buf) - keep]))
            buf = buf[len(buf) - keep :]
            break
        self.held = buf
        return out

    def flush(self) -> list[tuple[bool, str]]:
        held, self.held = self.held, ""
        return [(self.thinking, held)] if held else []
