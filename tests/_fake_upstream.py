"""A scripted OpenAI-compatible server for proxy tests and benches (standard library).

It records every request (path, headers, JSON body), streams scripted text as
SSE chunks the way OpenAI-compatible servers do (honouring ``stop`` strings
the way llama.cpp does: the stop string is left out), and notices when the
client goes away mid-stream.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5. When more connections arrive at once than the accept
    # thread takes in time (a busy machine, two dozen proxy requests in a burst), Linux resets the
    # surplus and the proxy rightly answers 502 "cannot reach upstream ... Connection reset by peer":
    # a failure of this test server, not of the code under test. The proxy itself listens with 128
    # (ProxyServer.request_queue_size); this server, standing in for the model server, does too.
    request_queue_size = 128
    daemon_threads = True


class FakeUpstream:
    """Use as a context manager; ``url`` is its base URL, ``requests`` what it received."""

    def __init__(self, responder: Responder | None = None, *, props: dict[str, Any] | None = None) -> None:
        self.responder: Responder = responder or (lambda path, body: Reply(["Hello", " world", "."]))
        # Served at GET /props as llama.cpp does (None: no such route, like other servers).
        self.props = props
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.disconnected = threading.Event()
        self.pieces_sent = 0
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._record(self, {})
                if self.path == "/props" and fake.props is not None:
                    self._json(200, fake.props)
                elif self.path.startswith("/v1/models"):
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "test"}],
                        },
                    )
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                fake._record(self, body)
                with fake.lock:
                    fake.active += 1
                    fake.max_active = max(fake.max_active, fake.active)
                try:
                    self._answer(body)
                finally:
                    with fake.lock:
                        fake.active -= 1

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, body: dict[str, Any]) -> None:
                reply = fake.responder(self.path, body)
                if reply.first_delay:
                    time.sleep(reply.first_delay)
                if reply.status != 200:
                    data = reply.body or b""
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                chat = self.path.endswith("/chat/completions")
                text, _ = apply_stop("".join(reply.pieces), body.get("stop"))
                pieces, used = [], 0
                for piece in reply.pieces:
                    if used >= len(text):
                        break
                    pieces.append(piece[: len(text) - used])
                    used += len(piece)
                if not body.get("stream"):
                    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
                    if chat:
                        choice["message"] = {"role": "assistant", "content": text}
                    else:
                        choice["text"] = text
                    n = int(body.get("n") or 1)
                    self._json(
                        200,
                        {
                            "id": "x",
                            "object": "chat.completion" if chat else "text_completion",
                            "created": 0,
                            "model": "fake-model",
                            "choices": [dict(choice, index=i) for i in range(n)],
                            "usage": {
                                "prompt_tokens": 7,
                                "completion_tokens": len(pieces),
                                "total_tokens": 7 + len(pieces),
                            },
                        },
                    )
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for i, piece in enumerate(pieces):
                        if reply.break_after is not None and i >= reply.break_after:
                            # Die mid-body: no terminating chunk, connection dropped.
                            self.wfile.flush()
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        if reply.stamp:
                            piece = f"t={time.perf_counter():.6f}; "
                        if chat:
                            choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                        else:
                            choice = {"index": 0, "text": piece, "finish_reason": None}
                        self._event(
                            {"id": "x", "object": "chunk", "created": 0, "model": "fake-model", "choices": [choice]}
                        )
                        with fake.lock:
                            fake.pieces_sent += 1
                        if reply.delay:
                            time.sleep(reply.delay)
                    final: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
                    final.update({"delta": {}} if chat else {"text": ""})
                    self._event({"id": "x", "object": "chunk", "created": 0, "model": "fake-model", "choices": [final]})
                    self._event(
                        {
                            "id": "x",
                            "object": "chunk",
                            "created": 0,
                            "model": "fake-model",
                            "choices": [],
                            "usage": {
                                "prompt_tokens": 7,
                                "completion_tokens": len(pieces),
                                "total_tokens": 7 + len(pieces),
                            },
                        }
                    )
                    self._raw(b"data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    fake.disconnected.set()
                    self.close_connection = True

            def _event(self, obj: Any) -> None:
                self._raw(b"data: " + json.dumps(obj).encode() + b"\n\n")

            def _raw(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        return Handler

    def _record(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        with self.lock:
            # Header names lower-cased: clients differ in the case they send.
            headers = {k.lower(): v for k, v in handler.headers.items()}
            self.requests.append({"path": handler.path, "headers": headers, "body": body})
