"""``clanker-rag serve``: an OpenAI-compatible proxy that injects knowledge.

Any unmodified OpenAI client points its base URL at the proxy; the proxy sits
in front of an upstream server (llama.cpp, vLLM, Ollama, LM Studio...) and
runs each ``/v1/chat/completions`` and ``/v1/completions`` request through a
:class:`~clanker_rag.RagController`:

* the user's question is retrieved for before generation starts and the
  passages go into the request (a ``<context>`` block at the end of a raw
  prompt, or in front of the last user message of a chat);
* while the upstream streams, question sentences the model writes and
  ``<tool name="retrieve">`` calls trigger more retrieval; the proxy then
  closes that upstream request and resumes with the extended text (a raw
  prompt grows by the block; a chat gets the partial answer as a trailing
  assistant message, which llama.cpp and Ollama continue).

Requests the controller cannot represent (``n`` > 1, client-defined tools,
log-probabilities, ``echo``) get the up-front injection only and are then
forwarded verbatim, as is every other endpoint (``/v1/models``...).

Security: binds 127.0.0.1 unless told otherwise, caps request bodies,
forwards the client's ``Authorization`` header upstream but never logs it
(nor anything that looks like a key), and answers upstream failures with
OpenAI-style error JSON.  Standard library only.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ._exceptions import ConfigError
from ._generate import Token
from ._types import HitLike, Retriever

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "ProxyConfig", "ProxyServer", "make_server", "redact"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
_MAX_ERROR_BODY = 2000
_COPY_CHUNK = 65536

# Hop-by-hop headers (RFC 9110 section 7.6.1) and the ones the proxy sets itself.
_DROP_REQUEST_HEADERS = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
        "trailer", "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding", "expect",
    }
)  # fmt: skip
_DROP_RESPONSE_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "trailer", "transfer-encoding", "upgrade", "content-length",
     "server", "date"}
)  # fmt: skip

_SECRET_RE = re.compile(
    r"(?i)(\b(?:bearer|basic)\s+)[^\s\"',;]+"
    r"|(\b(?:api[_-]?key|access[_-]?token|token|key|password|secret)=)[^\s&\"',;]+"
    r"|\b(?:sk|pk|rk|hf|gsk|xai)[-_][A-Za-z0-9_\-]{8,}"
)
_QUESTION_RE = re.compile(r"[^.!?\n]*\?")
_WS_RE = re.compile(r"\s+")


def redact(text: str, extra: Sequence[str] = ()) -> str:
    """``text`` with credentials blanked: known values in ``extra`` and anything shaped like a key."""
    for value in extra:
        if value and len(value) >= 4:
            text = text.replace(value, "[redacted]")

    def sub(m: re.Match[str]) -> str:
        prefix = m.group(1) or m.group(2) or ""
        return prefix + "[redacted]"

    return _SECRET_RE.sub(sub, text)


# -- configuration -----------------------------------------------------------------


@dataclass
class ProxyConfig:
    """Settings of one proxy.  ``upstream`` is the upstream server's base URL.

    ``live`` lets the controller resume generation mid-answer (new question
    sentences, tool calls); ``False`` keeps only the up-front injection and
    forwards the upstream stream untouched.
    """

    upstream: str
    k: int = 3
    questions: bool = True
    tools: bool = True
    live: bool = True
    show_blocks: bool = False
    min_score: float | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    timeout: float = 300.0
    retrieval_timeout: float = 10.0
    api_key: str | None = None  # used when the client sends no Authorization header
    upstream_scheme: str = field(init=False, default="http")
    upstream_host: str = field(init=False, default="")
    upstream_port: int | None = field(init=False, default=None)
    upstream_prefix: str = field(init=False, default="")

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--upstream must be an http(s) URL such as http://127.0.0.1:8080, got {self.upstream!r}")
        if parts.username or parts.password:
            raise ConfigError("--upstream must not carry credentials; set CLANKER_RAG_API_KEY instead")
        if self.k < 1:
            raise ConfigError(f"k={self.k} is out of range: expected >= 1")
        if self.max_request_bytes < 1024:
            raise ConfigError(f"max_request_bytes={self.max_request_bytes} is out of range: expected >= 1024")
        if self.timeout <= 0:
            raise ConfigError(f"timeout={self.timeout} is out of range: expected > 0")
        self.upstream_scheme = parts.scheme
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port
        prefix = parts.path.rstrip("/")
        # Users paste the OpenAI-style base URL (".../v1"); client paths carry /v1 already.
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        self.upstream_prefix = prefix
        self.upstream = urllib.parse.urlunsplit((parts.scheme, parts.netloc, prefix, "", ""))


class SharedRetriever:
    """A knowledge base shared by the proxy's threads.

    Searches are serialised (the index computes some statistics lazily) and
    the index folder is re-read when another process saves it, so an
    ``ingest`` into a served knowledge base takes effect without a restart.
    """

    def __init__(
        self, retriever: Retriever, path: str | os.PathLike[str] | None = None, *, check_every: float = 2.0
    ) -> None:
        self._retriever = retriever
        self._lock = threading.Lock()
        self._file = Path(path) / "index.json" if path is not None else None
        self._check_every = check_every
        self._checked = time.monotonic()
        self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[int, int] | None:
        if self._file is None:
            return None
        try:
            st = self._file.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if self._file is None or now - self._checked < self._check_every:
            return
        self._checked = now
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return
        from ._kb import KnowledgeBase

        try:
            fresh = KnowledgeBase.load(self._file.parent)
        except Exception as exc:  # a save in progress or a broken file: keep serving the old one
            logger.warning("could not reload %s: %s", self._file, exc)
            return
        self._retriever = fresh
        self._stamp = stamp
        logger.info("reloaded %s (%d chunks)", self._file.parent, len(fresh))

    def search(self, query: str, k: int = 10) -> Sequence[HitLike]:
        with self._lock:
            self._maybe_reload()
            return list(self._retriever.search(query, k))


# -- upstream ------------------------------------------------------------------------


class UpstreamError(Exception):
    """An upstream failure, already mapped to the status and JSON the client gets."""

    def __init__(
        self,
        status: int,
        message: str,
        err_type: str,
        code: str | int | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.code = code
        self.body = body

    def payload(self, secrets_: Sequence[str]) -> dict[str, Any]:
        if self.body is not None:
            # The upstream's own OpenAI-style error, passed on after redaction.
            cleaned: dict[str, Any] = json.loads(redact(json.dumps(self.body), secrets_))
            return cleaned
        return _error_body(redact(self.message, secrets_), self.err_type, self.code)


def _error_body(message: str, err_type: str, code: str | int | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def _client_status(upstream_status: int) -> int:
    # 4xx are the client's problem and keep their status; 503 means "retry
    # later" (llama.cpp while loading); any other upstream 5xx is a bad gateway.
    if 400 <= upstream_status < 500 or upstream_status == 503:
        return upstream_status
    return 502


def _http_error(status: int, raw: bytes, url: str) -> UpstreamError:
    text = raw.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    client_status = _client_status(status)
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict) and "message" in obj["error"]:
        return UpstreamError(client_status, str(obj["error"]["message"]), "upstream_error", status, body=obj)
    snippet = " ".join(text.split())[:_MAX_ERROR_BODY]
    message = obj["error"] if isinstance(obj, dict) and isinstance(obj.get("error"), str) else snippet
    return UpstreamError(client_status, f"upstream {url} answered HTTP {status}: {message}", "upstream_error", status)


class Upstream:
    """Opens requests to the upstream server; one connection per request."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config

    def url(self, path: str) -> str:
        return self.config.upstream + path

    def open(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        cfg = self.config
        cls = http.client.HTTPSConnection if cfg.upstream_scheme == "https" else http.client.HTTPConnection
        conn = cls(cfg.upstream_host, cfg.upstream_port, timeout=cfg.timeout)
        url = self.url(path)
        try:
            conn.connect()
            if conn.sock is not None:
                # Small SSE writes must not wait for Nagle's algorithm.
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.request(method, cfg.upstream_prefix + path, body=body, headers=dict(headers))
            resp = conn.getresponse()
        except TimeoutError:
            conn.close()
            raise UpstreamError(504, f"upstream {url} timed out after {cfg.timeout:g} s", "upstream_timeout") from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise UpstreamError(502, f"cannot reach upstream {url}: {exc}", "upstream_unreachable") from None
        return conn, resp


def _iter_sse_data(resp: http.client.HTTPResponse) -> Iterator[tuple[str, str]]:
    from .backends._openai_http import iter_sse

    return iter_sse(iter(resp.readline, b""))


# -- one generation request ---------------------------------------------------------------


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _question_of(text: str) -> str:
    """The retrieval query for a user message: its last question, else its tail."""
    found = _QUESTION_RE.findall(text[-4000:])
    question = found[-1] if found else text[-1000:]
    return _WS_RE.sub(" ", question).strip()


def _prepend_to_content(content: object, block: str) -> object:
    if isinstance(content, list):
        return [{"type": "text", "text": block}, *content]
    return block + _message_text(content)


def _as_stops(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


class _Turn:
    """One chat or completions request driven through the controller."""

    def __init__(self, kind: str, body: dict[str, Any], upstream: Upstream, headers: Mapping[str, str]) -> None:
        self.kind = kind
        self.body = body
        self.upstream = upstream
        self.headers = headers
        self.path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
        self.calls = 0
        self.initial_block = ""
        self.model: str | None = body.get("model") if isinstance(body.get("model"), str) else None
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens = 0
        self.usage_seen = False
        self.pieces = 0
        self.max_key = next((key for key in ("max_completion_tokens", "max_tokens") if key in body), None)
        self.prefill = ""

    def _payload(self, prompt: str, stop: Sequence[str]) -> dict[str, Any]:
        payload = {key: value for key, value in self.body.items() if key != "stream_options"}
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
        if stop:
            payload["stop"] = list(stop)
        else:
            payload.pop("stop", None)
        if self.max_key is not None and isinstance(self.body[self.max_key], int):
            # A resumed request may only spend what the earlier ones left over.
            payload[self.max_key] = max(1, self.body[self.max_key] - self.pieces)
        if self.kind == "chat":
            payload["messages"] = self._messages(prompt)
        else:
            payload["prompt"] = prompt
        return payload

    def _messages(self, context: str) -> list[Any]:
        if self.calls == 0:
            # The controller's first context is exactly the up-front block (or empty).
            self.initial_block = context
        lead = ""
        rest = context
        if self.initial_block and context.startswith(self.initial_block):
            lead, rest = self.initial_block, context[len(self.initial_block) :]
        messages: list[Any] = copy.deepcopy(self.body["messages"])
        if lead:
            for msg in reversed(messages):
                if isinstance(msg, dict) and msg.get("role") == "user":
                    msg["content"] = _prepend_to_content(msg.get("content"), lead.strip("\n") + "\n\n")
                    break
        self.prefill = rest
        if rest:
            messages.append({"role": "assistant", "content": rest})
        return messages

    def generate(self, prompt: str, stop: Sequence[str]) -> Iterator[Token]:
        payload = self._payload(prompt, stop)
        self.calls += 1
        data = json.dumps(payload).encode("utf-8")
        conn, resp = self.upstream.open("POST", self.path, data, self.headers)
        url = self.upstream.url(self.path)
        try:
            if resp.status >= 400:
                raise _http_error(resp.status, _read(resp, _MAX_ERROR_BODY * 2, url), url)
            ctype = (resp.getheader("Content-Type") or "").lower()
            if "text/event-stream" in ctype:
                objects: Iterator[dict[str, Any]] = self._events(resp, url)
            else:
                objects = iter([_decode(_read(resp, None, url).decode("utf-8", errors="replace"), url)])
            finish: str | None = None
            tokens: Iterator[Token] = (tok for obj in objects for tok in self._tokens(obj, url))
            if self.kind == "chat" and self.prefill:
                tokens = _drop_echo(tokens, self.prefill)
            for tok in tokens:
                if tok.finish_reason is not None:
                    finish = tok.finish_reason
                yield tok
            self.finish_reason = finish
        finally:
            # Closing mid-stream (a resume, or the client went away) makes the upstream stop generating.
            conn.close()

    def _events(self, resp: http.client.HTTPResponse, url: str) -> Iterator[dict[str, Any]]:
        finished = False
        try:
            for event, data in _iter_sse_data(resp):
                if data.strip() == "[DONE]":
                    return
                if event == "error":
                    message = f"upstream {url} reported an error: {data[:_MAX_ERROR_BODY]}"
                    raise UpstreamError(502, message, "upstream_error")
                yield _decode(data, url)
                finished = finished or self.finish_reason is not None
        except TimeoutError:
            raise UpstreamError(
                504, f"upstream {url} timed out after {self.upstream.config.timeout:g} s", "upstream_timeout"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise UpstreamError(502, f"connection to upstream {url} broke: {exc}", "upstream_error") from None
        if not finished:
            # Neither [DONE] nor a finish_reason: the connection dropped mid-answer.
            raise UpstreamError(502, f"upstream {url} ended the stream before finishing the answer", "upstream_error")

    def _tokens(self, obj: dict[str, Any], url: str) -> Iterator[Token]:
        self.finish_reason = None
        if isinstance(obj.get("model"), str) and obj["model"]:
            self.model = obj["model"]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage_seen = True
            if self.prompt_tokens is None and isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                self.completion_tokens += usage["completion_tokens"]
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if "error" in obj:
                message = f"upstream {url} reported an error: {json.dumps(obj['error'])[:_MAX_ERROR_BODY]}"
                raise UpstreamError(502, message, "upstream_error")
            return
        choice = choices[0]
        if self.kind == "chat":
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                whole = choice.get("message")
                delta = whole if isinstance(whole, dict) else {}
            text = delta.get("content")
        else:
            text = choice.get("text")
        text = text if isinstance(text, str) else ""
        finish = choice.get("finish_reason")
        finish = finish if isinstance(finish, str) else None
        self.finish_reason = finish
        if text:
            self.pieces += 1
        if text or finish is not None:
            yield Token(text, None, finish)

    def usage(self) -> dict[str, int] | None:
        if not self.usage_seen or self.prompt_tokens is None:
            return None
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def _drop_echo(tokens: Iterator[Token], prefill: str) -> Iterator[Token]:
    """Remove the trailing assistant message if the server repeats it first.

    llama.cpp continues a trailing assistant message but streams it back in
    front of the continuation; other servers send only the continuation.
    Text is held back only while it could still be that echo.
    """
    stripped = prefill.rstrip()
    buf = ""
    for tok in tokens:
        buf += tok.text
        if tok.finish_reason is None and (prefill.startswith(buf) or stripped.startswith(buf)):
            continue  # could still be the echo
        if buf.startswith(prefill):
            rest = buf[len(prefill) :]
        elif stripped and buf.startswith(stripped):
            rest = buf[len(stripped) :]
        elif prefill.startswith(buf) or stripped.startswith(buf):
            rest = ""  # the stream ended inside the echo
        else:
            rest = buf
        yield Token(rest, tok.logprob, tok.finish_reason, tok.stop)
        break
    else:
        return
    yield from tokens


def _read(resp: http.client.HTTPResponse, limit: int | None, url: str) -> bytes:
    try:
        return resp.read(limit) if limit is not None else resp.read()
    except TimeoutError:
        raise UpstreamError(504, f"upstream {url} timed out", "upstream_timeout") from None
    except (OSError, http.client.HTTPException) as exc:
        raise UpstreamError(502, f"connection to upstream {url} broke: {exc}", "upstream_error") from None


def _decode(data: str, url: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError:
        raise UpstreamError(
            502, f"upstream {url} answered something that is not JSON: {data[:200]!r}", "upstream_error"
        ) from None
    if not isinstance(obj, dict):
        raise UpstreamError(502, f"upstream {url} answered JSON that is not an object", "upstream_error")
    return obj


# -- the HTTP server ----------------------------------------------------------------------


class ProxyServer(ThreadingHTTPServer):
    """A threading HTTP server holding the proxy's shared state."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], retriever: Retriever, config: ProxyConfig) -> None:
        self.config = config
        self.retriever = retriever
        self.upstream = Upstream(config)
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host_s = host.decode() if isinstance(host, bytes) else str(host)
        if ":" in host_s:
            host_s = f"[{host_s}]"
        return f"http://{host_s}:{port}"


class _ProxyServer6(ProxyServer):
    address_family = socket.AF_INET6


def make_server(
    retriever: Retriever,
    upstream: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    index_path: str | os.PathLike[str] | None = None,
    **options: Any,
) -> ProxyServer:
    """A ready (not yet serving) proxy; call ``serve_forever()`` on it, ``shutdown()`` to stop."""
    config = ProxyConfig(upstream, **options)
    shared = retriever if isinstance(retriever, SharedRetriever) else SharedRetriever(retriever, index_path)
    cls = _ProxyServer6 if ":" in host else ProxyServer
    return cls((host, port), shared, config)


class _ClientGone(Exception):
    """Writing to the client failed: it disconnected."""


class _Handler(BaseHTTPRequestHandler):
    server: ProxyServer
    protocol_version = "HTTP/1.1"
    server_version = "clanker-rag"
    timeout = 600

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- logging: never headers, never credentials ------------------------------------
    def _secrets(self) -> list[str]:
        values = []
        auth = self.headers.get("Authorization", "") if getattr(self, "headers", None) is not None else ""
        if auth:
            values.append(auth)
            values.append(auth.split(None, 1)[-1])
        for name in ("api-key", "x-api-key"):
            value = self.headers.get(name) if getattr(self, "headers", None) is not None else None
            if value:
                values.append(value)
        if self.server.config.api_key:
            values.append(self.server.config.api_key)
        return values

    def _safe_path(self) -> str:
        path = getattr(self, "path", "") or ""
        base, _, query = path.partition("?")
        # Query strings can carry keys (?key=...): log their names only.
        if query:
            names = [part.split("=", 1)[0] for part in query.split("&") if part]
            base += "?" + "&".join(f"{name}=..." for name in names)
        return redact(base, self._secrets())

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # one line per request is logged by _finish_log instead

    def log_error(self, format: str, *args: Any) -> None:
        logger.warning("%s: %s", self.address_string(), redact(format % args, self._secrets()))

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s: %s", self.address_string(), redact(format % args, self._secrets()))

    def _finish_log(self, status: int, started: float, note: str = "") -> None:
        logger.info(
            "%s %s %s %d %.0f ms%s",
            self.address_string(),
            self.command,
            self._safe_path(),
            status,
            (time.perf_counter() - started) * 1e3,
            f" ({note})" if note else "",
        )

    # -- plumbing ---------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError, OSError) as exc:
            raise _ClientGone(str(exc)) from None

    def _send_json(self, status: int, obj: Mapping[str, Any], extra_headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (extra_headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
        except OSError as exc:
            raise _ClientGone(str(exc)) from None
        self._write(data)

    def _send_error_json(self, status: int, message: str, err_type: str, code: str | int | None = None) -> None:
        self._send_json(status, _error_body(redact(message, self._secrets()), err_type, code))

    def _upstream_headers(self, *, json_body: bool) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            if name.lower() in _DROP_REQUEST_HEADERS:
                continue
            if json_body and name.lower() in ("content-type", "accept"):
                continue
            headers[name] = value
        if json_body:
            headers["Content-Type"] = "application/json"
            headers["Accept"] = "text/event-stream, application/json"
        if self.server.config.api_key and not any(n.lower() == "authorization" for n in headers):
            headers["Authorization"] = f"Bearer {self.server.config.api_key}"
        headers["Accept-Encoding"] = "identity"
        return headers

    def _read_body(self) -> bytes | None:
        """The request body, or None after answering an error (size cap, bad framing)."""
        self._rejected = 400
        if self.headers.get("Transfer-Encoding"):
            self._rejected = 411
            self.close_connection = True
            self._send_error_json(411, "send the request body with a Content-Length", "invalid_request_error")
            return None
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self._send_error_json(400, f"invalid Content-Length {raw[:40]!r}", "invalid_request_error")
            return None
        cap = self.server.config.max_request_bytes
        if length > cap:
            # The body stays unread: the connection cannot be reused.
            self.close_connection = True
            self._rejected = 413
            self._send_error_json(
                413,
                f"request body of {length} bytes exceeds the proxy's limit of {cap} bytes",
                "invalid_request_error",
                "request_too_large",
            )
            return None
        return self.rfile.read(length)

    # -- dispatch ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_OPTIONS(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        started = time.perf_counter()
        status = 500
        note = ""
        try:
            body = self._read_body()
            if body is None:
                self._finish_log(self._rejected, started, "rejected")
                return
            route = self.path.split("?", 1)[0].rstrip("/")
            kind = {
                "/v1/chat/completions": "chat",
                "/chat/completions": "chat",
                "/v1/completions": "completions",
                "/completions": "completions",
            }.get(route)
            if self.command == "POST" and kind is not None:
                status, note = self._generation(kind, body)
            else:
                status = self._forward(body)
        except _ClientGone as exc:
            self.close_connection = True
            note = f"client disconnected: {exc}"
            status = 499
        except UpstreamError as exc:
            note = "upstream failure"
            status = exc.status
            try:
                self._send_json(exc.status, exc.payload(self._secrets()))
            except _ClientGone:
                self.close_connection = True
        except Exception as exc:  # never let one request take the server down
            logger.exception("internal error on %s %s", self.command, self._safe_path())
            status = 500
            self.close_connection = True
            with contextlib.suppress(_ClientGone):
                self._send_error_json(500, f"internal proxy error: {type(exc).__name__}", "server_error")
        self._finish_log(status, started, note)

    # -- pass-through ------------------------------------------------------------------------------
    def _forward(self, body: bytes, *, headers: Mapping[str, str] | None = None) -> int:
        hdrs = dict(headers) if headers is not None else self._upstream_headers(json_body=False)
        conn, resp = self.server.upstream.open(
            self.command, self.path, body if body or self.command in ("POST", "PUT", "PATCH") else None, hdrs
        )
        try:
            length = resp.getheader("Content-Length")
            try:
                self.send_response(resp.status, resp.reason)
                for name, value in resp.getheaders():
                    if name.lower() not in _DROP_RESPONSE_HEADERS:
                        self.send_header(name, value)
                head = self.command == "HEAD"
                chunked = length is None and not head
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                elif length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()
            except OSError as exc:
                raise _ClientGone(str(exc)) from None
            if head:
                return resp.status
            url = self.server.upstream.url(self.path)
            while True:
                try:
                    data = resp.read1(_COPY_CHUNK)
                except TimeoutError:
                    self.close_connection = True
                    logger.warning("upstream %s timed out mid-response", redact(url))
                    break
                except (OSError, http.client.HTTPException) as exc:
                    self.close_connection = True
                    logger.warning("upstream %s broke mid-response: %s", redact(url), exc)
                    break
                if not data:
                    break
                self._write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            if chunked and not self.close_connection:
                self._write(b"0\r\n\r\n")
            return resp.status
        finally:
            conn.close()

    # -- generation --------------------------------------------------------------------------------
    def _parse(self, body: bytes, kind: str) -> dict[str, Any] | None:
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            self._send_error_json(400, "the request body is not valid JSON", "invalid_request_error")
            return None
        if not isinstance(obj, dict):
            self._send_error_json(400, "the request body must be a JSON object", "invalid_request_error")
            return None
        if kind == "chat":
            messages = obj.get("messages")
            if not isinstance(messages, list) or not messages:
                self._send_error_json(
                    400, "'messages' must be a non-empty list", "invalid_request_error", "invalid_value"
                )
                return None
        elif "prompt" not in obj:
            self._send_error_json(400, "'prompt' is required", "invalid_request_error", "missing_required_parameter")
            return None
        return obj

    def _question(self, kind: str, body: Mapping[str, Any]) -> str | None:
        if kind == "chat":
            last = body["messages"][-1]
            if not isinstance(last, dict) or last.get("role") != "user":
                return None
            return _question_of(_message_text(last.get("content")))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        return _question_of(prompt) if isinstance(prompt, str) else None

    def _drivable(self, kind: str, body: Mapping[str, Any]) -> bool:
        if not self.server.config.live:
            return False
        if body.get("n") not in (None, 1) or body.get("best_of") not in (None, 1) or body.get("echo"):
            return False
        if body.get("logprobs") or body.get("top_logprobs"):
            return False
        if kind == "chat":
            return not any(body.get(key) for key in ("tools", "functions", "tool_choice", "function_call"))
        return isinstance(body.get("prompt"), str)

    def _generation(self, kind: str, raw: bytes) -> tuple[int, str]:
        body = self._parse(raw, kind)
        if body is None:
            return 400, "bad request"
        if not self._drivable(kind, body):
            return self._upfront(kind, body)
        return self._drive(kind, body)

    def _block(self, hits: Sequence[HitLike]) -> str:
        from ._controller import neutralize

        parts = ["<context>\n"]
        for i, hit in enumerate(hits, 1):
            where = hit.source
            start, end = getattr(hit, "start_line", None), getattr(hit, "end_line", None)
            if isinstance(start, int) and isinstance(end, int) and end >= start > 0:
                where += f":{start}-{end}"
            parts.append(f"[{i}] {neutralize(where)}\n{neutralize(hit.text.strip())}\n")
        parts.append("</context>\n")
        return "".join(parts)

    def _upfront(self, kind: str, body: dict[str, Any]) -> tuple[int, str]:
        """Inject for the question once, then forward the request untouched otherwise."""
        cfg = self.server.config
        question = self._question(kind, body) if cfg.questions else None
        note = "forwarded"
        if question:
            hits = [
                h
                for h in self.server.retriever.search(question, cfg.k)
                if cfg.min_score is None or h.score >= cfg.min_score
            ]
            if hits:
                block = self._block(hits)
                if kind == "chat":
                    for msg in reversed(body["messages"]):
                        if isinstance(msg, dict) and msg.get("role") == "user":
                            msg["content"] = _prepend_to_content(msg.get("content"), block + "\n")
                            break
                elif isinstance(body.get("prompt"), str):
                    body["prompt"] = block + "\n" + body["prompt"]
                elif isinstance(body.get("prompt"), list) and body["prompt"] and isinstance(body["prompt"][0], str):
                    body["prompt"] = [block + "\n" + body["prompt"][0], *body["prompt"][1:]]
                note = f"forwarded, 1 injection from {len(hits)} passages"
        headers = self._upstream_headers(json_body=True)
        return self._forward(json.dumps(body).encode("utf-8"), headers=headers), note

    def _drive(self, kind: str, body: dict[str, Any]) -> tuple[int, str]:
        from ._controller import InjectEvent, RagController, RetrieveEvent, TextEvent

        cfg = self.server.config
        stream = bool(body.get("stream"))
        turn = _Turn(kind, body, self.server.upstream, self._upstream_headers(json_body=True))
        ctl = RagController(
            self.server.retriever,
            k=cfg.k,
            tools=cfg.tools,
            questions=cfg.questions,
            min_score=cfg.min_score,
            retrieval_timeout=cfg.retrieval_timeout,
            show_blocks=cfg.show_blocks,
            stop=_as_stops(body.get("stop")),
        )
        prompt = "" if kind == "chat" else str(body["prompt"])
        question = (self._question(kind, body) or "") if kind == "chat" else None
        sink = _SseSink(self, kind, turn) if stream else _JsonSink(kind, turn)
        retrievals: list[dict[str, Any]] = []
        injections = 0
        events = ctl.events(turn.generate, prompt, question=question)
        assert isinstance(events, Generator)
        try:
            for ev in events:
                if isinstance(ev, TextEvent):
                    sink.text(ev.text)
                elif isinstance(ev, InjectEvent):
                    injections += 1
                    logger.debug("injected a %s block for %r", ev.tag, ev.query)
                    if cfg.show_blocks:
                        sink.text(ev.block)
                elif isinstance(ev, RetrieveEvent):
                    retrievals.append({"kind": ev.kind, "query": ev.query, "sources": [h.source for h in ev.hits]})
        except UpstreamError as exc:
            if not sink.started:
                raise
            logger.warning("upstream failed mid-stream: %s", redact(exc.message, self._secrets()))
            sink.error(exc.payload(self._secrets()))
            return 200, "upstream failed mid-stream"
        finally:
            events.close()
        extension = {"injections": injections, "retrievals": retrievals}
        sink.finish(extension)
        if not stream:
            assert isinstance(sink, _JsonSink)
            self._send_json(200, sink.response(extension), {"X-Clanker-Rag-Injections": str(injections)})
        return 200, f"{'stream' if stream else 'json'}, {injections} injections, {turn.calls} upstream requests"


class _JsonSink:
    """Collects the answer of a non-streamed request."""

    started = False

    def __init__(self, kind: str, turn: _Turn) -> None:
        self.kind = kind
        self.turn = turn
        self.parts: list[str] = []

    def text(self, text: str) -> None:
        self.parts.append(text)

    def error(self, payload: Mapping[str, Any]) -> None:  # pragma: no cover - started is always False
        raise AssertionError("a JSON answer cannot fail mid-stream")

    def finish(self, extension: Mapping[str, Any]) -> None:
        pass

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


class _SseSink:
    """Writes OpenAI-style server-sent events, chunked, one event per piece."""

    def __init__(self, handler: _Handler, kind: str, turn: _Turn) -> None:
        self.handler = handler
        self.kind = kind
        self.turn = turn
        self.started = False
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        opts = turn.body.get("stream_options")
        self.include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))

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
            raise _ClientGone(str(exc)) from None
        self.started = True
        if self.kind == "chat":
            self._event(self._chunk({"role": "assistant", "content": ""}, None))

    def _event(self, obj: Mapping[str, Any] | str) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
        data = b"data: " + payload.encode("utf-8") + b"\n\n"
        self.handler._write(b"%x\r\n%s\r\n" % (len(data), data))

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
        if text:
            self._event(self._chunk({"content": text} if self.kind == "chat" else text, None))

    def error(self, payload: Mapping[str, Any]) -> None:
        self._event(dict(payload))
        self._event("[DONE]")
        self.handler._write(b"0\r\n\r\n")

    def finish(self, extension: Mapping[str, Any]) -> None:
        if not self.started:
            self._start()
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
        self._event("[DONE]")
        self.handler._write(b"0\r\n\r\n")


def serve(server: ProxyServer, on_ready: Callable[[ProxyServer], None] | None = None) -> None:
    """Serve until interrupted (Ctrl-C), then close the listening socket."""
    if on_ready is not None:
        on_ready(server)
    try:
        server.serve_forever(poll_interval=0.25)
    finally:
        server.server_close()
