"""The ``serve`` proxy's HTTP side: the server, its settings and the request handler.

:class:`ProxyServer` holds what every request shares (settings, retriever,
upstream client); :class:`_Handler` answers one request: generation requests
(``/v1/chat/completions``, ``/v1/completions``) are driven through a
:class:`~clanker_rag.RagController` over an
:class:`~clanker_rag._serve._upstream.UpstreamTurn`, everything else is forwarded.
Nothing a client sends (a reset connection, a body nested too deeply to
parse) prints a traceback: each such request gets a clean answer or one log
line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._answer._ask import AnswerSettings, base_model_events, probe_server
from .._answer._prompts import STOP
from .._exceptions import BackendError, ConfigError, ServerTimeoutError
from .._stream._blocks import DEFAULT_BLOCK_CHARS, BlockBuilder, last_question, squash_ws
from .._stream._controller import InjectEvent, RagController, RetrieveEvent, StreamEvent, TextEvent
from .._stream._dialects import CLANKER, Dialect, dialects_of
from .._stream._settings import BlockLayout, Limits, Triggers
from .._text._sentences import last_question_start
from .._types import Retriever
from .._urls import BaseUrl, parse_base_url
from .._validate import check_int, check_number
from ._access import AccessPolicy
from ._deadlines import (
    DEFAULT_HEADER_SECONDS,
    DEFAULT_MAX_CONNECTIONS,
    DeadlineHandler,
    LimitedServer,
    check_header_seconds,
)
from ._native_tools import assemble_response, run_native
from ._served import ServedModel, served_model
from ._sinks import ClientGone, JsonSink, SseSink
from ._upstream import (
    ChatTurns,
    Upstream,
    UpstreamError,
    UpstreamTurn,
    as_stops,
    chat_turns,
    error_body,
    event_stream,
    message_text,
    prepend_to_content,
    redact,
)
from ._web._api import WebApp, is_page, serves
from ._web._trace import TraceLog, TraceRecord

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "ProxyConfig", "ProxyServer"]

# The proxy logs under one name, whichever of its modules writes the line.
logger = logging.getLogger("clanker_rag._serve._proxy")

# A chat request to a base model without a length limit gets `ask`'s default one.
BASE_MAX_TOKENS = 512

DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
# A client socket that neither sends nor reads for this long once its request's headers
# are in (before: ProxyConfig.header_timeout, _deadlines.py) is dropped.  (Waiting for
# the upstream does not count: that socket is the upstream's.)
CLIENT_IDLE_SECONDS = 60
# Deeper than any real request (a JSON schema in response_format is a few
# levels); far below Python's recursion limit.
MAX_JSON_DEPTH = 128
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
# An upstream's CORS grants (llama.cpp answers "Access-Control-Allow-Origin: *")
# would let web pages read the proxy's answers: never passed on.
_CORS_PREFIX = "access-control-"


@dataclass
class ProxyConfig:
    """Settings of one proxy.  ``upstream`` is the upstream server's base URL.

    ``live`` lets the controller resume generation mid-answer (new question
    sentences, tool calls); ``False`` keeps only the up-front injection and
    forwards the upstream stream untouched.  ``native_tools`` answers chat
    requests through the upstream's own function calling instead (see
    :mod:`clanker_rag._serve._native_tools`), client tools or not.

    ``base_model`` says the upstream serves a base model without a chat
    template: a chat request is then rendered into ``ask``'s few-shot
    completion prompt and sent to ``/v1/completions`` with ``ask``'s answer
    settings (one focused passage per block, answers end at their line; on a
    probed llama.cpp, answers copy the block's words under a grammar), and
    answered as a chat completion.  ``None`` asks the upstream once, on the
    first chat request, the way ``ask`` does (llama.cpp's ``/props``,
    :func:`~clanker_rag._answer._ask.probe_server`); an upstream that does not
    answer counts as a chat server.

    ``dialect`` is how the model writes a retrieval call (a name of
    :data:`~clanker_rag._stream._dialects.DIALECTS`, or several joined by
    commas).  ``None`` (``serve``'s default, ``--dialect auto``) asks a
    llama.cpp upstream once, on the first generation request: the dialect its
    chat template speaks is used beside ``clanker`` (``<tool_call>`` in the
    template: hermes; a template that does not say leaves ``clanker``), and
    the template's token-shaped strings that ``/tokenize`` calls control
    tokens are kept out of retrieved text too.
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
    block_chars: int = DEFAULT_BLOCK_CHARS
    native_tools: bool = False
    base_model: bool | None = False
    # Required of every client as "Authorization: Bearer <token>" when set
    # (see _access.py); the upstream then gets api_key, never the client's header.
    token: str | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    # Seconds a connection (new, or keep-alive between requests) has to send a request's headers.
    header_timeout: float = DEFAULT_HEADER_SECONDS
    dialect: str | None = "clanker"
    base: BaseUrl = field(init=False)

    def __post_init__(self) -> None:
        # Users paste the OpenAI-style base URL (".../v1"); client paths carry /v1 already.
        base = parse_base_url(self.upstream, what="--upstream")
        if base.has_credentials:
            raise ConfigError("--upstream must not carry credentials; set CLANKER_RAG_API_KEY instead")
        check_int("k", self.k, 1)
        check_int("max_request_bytes", self.max_request_bytes, 1024)
        check_number("timeout", self.timeout, 0, low_open=True)
        check_header_seconds(self.header_timeout, CLIENT_IDLE_SECONDS)
        check_int("max_connections", self.max_connections, 1)
        if self.dialect is not None:
            dialects_of(self.dialect)  # a bad name fails at start-up
        # The controller's own checks, made at start-up instead of on the first request.
        Triggers(min_score=self.min_score)
        Limits(retrieval_timeout=self.retrieval_timeout)
        BlockLayout(block_chars=self.block_chars)
        self.base = base
        self.upstream = base.url


# At most this much of a completion prompt's end goes after its question's block.
_RESTATE_CHARS = 600


def restated_question(prompt: str) -> str:
    """The end of a completion prompt that the block injected for its question goes before.

    The prompt's lines from the one where its last question begins to its end
    ("Q: What port?\nA:"; a question wrapped over lines is taken whole): the
    model reads the passages, then the question and its answer cue.  Empty
    when the prompt asks nothing, or when that tail is longer than
    :data:`_RESTATE_CHARS` (the block then follows the prompt).
    """
    # Only the last _RESTATE_CHARS characters can hold a tail short enough; a question begun
    # before them starts the window, and its line's start makes the tail too long.
    offset = max(0, len(prompt) - _RESTATE_CHARS)
    start = last_question_start(prompt[offset:])
    if start is None:
        return ""
    tail = prompt[prompt.rfind("\n", 0, offset + start) + 1 :]
    return tail if len(tail) <= _RESTATE_CHARS else ""


def _nests_deeper(obj: object, limit: int) -> bool:
    """Whether ``obj`` (parsed JSON) nests lists and objects more than ``limit`` deep; no recursion."""
    stack: list[tuple[object, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _question_of(text: str) -> str:
    """The retrieval query for a user message: its last question, else its tail."""
    return last_question(text) or squash_ws(text[-1000:])


class ProxyServer(LimitedServer):
    """A threading HTTP server holding the proxy's shared state."""

    def __init__(
        self, address: tuple[str, int], retriever: Retriever, config: ProxyConfig, trace: TraceLog | None = None
    ) -> None:
        self.config = config
        self.retriever = retriever
        self.trace = trace or TraceLog()  # what the /trace page shows
        self.upstream = Upstream(config.base, config.timeout)
        self._base_model = config.base_model
        self.llama_cpp = False  # the probe found llama.cpp: its completions take a GBNF grammar
        self._probe_lock = threading.Lock()
        self._served: ServedModel | None = None
        self._served_lock = threading.Lock()
        self._dialects: tuple[Dialect, ...] = (CLANKER,)
        self.access = AccessPolicy(str(address[0]), config.token)
        super().__init__(
            address, _Handler, max_connections=config.max_connections, header_timeout=config.header_timeout
        )

    def server_close(self) -> None:
        super().server_close()
        self.trace.close()

    def base_model(self) -> bool:
        """Whether chat requests go to the upstream as rendered completions (see :class:`ProxyConfig`)."""
        with self._probe_lock:
            if self._base_model is None:
                info = probe_server(self.config.upstream, timeout=min(5.0, self.config.timeout))
                self._base_model = info.base_model
                self.llama_cpp = info.llama_cpp
                if info.base_model:
                    logger.info("the upstream has no usable chat template: chat requests become completions")
            return self._base_model

    def served(self) -> tuple[tuple[Dialect, ...], tuple[str, ...]]:
        """The dialects calls are caught in and the served model's control tokens (see :class:`ProxyConfig`)."""
        with self._served_lock:
            if self._served is None:
                configured = self.config.dialect
                # A configured dialect asks nothing: the upstream may not be llama.cpp at all.
                self._served = served_model(self.upstream.server) if configured is None else ServedModel()
                dialects = dialects_of(configured) if configured is not None else self._detected(self._served)
                logger.info("retrieval calls in dialect %s", ", ".join(d.name for d in dialects))
                self._dialects = dialects
            return self._dialects, self._served.control_tokens

    @staticmethod
    def _detected(model: ServedModel) -> tuple[Dialect, ...]:
        if model.dialect is None or model.dialect == CLANKER.name:
            return (CLANKER,)
        return dialects_of((CLANKER.name, model.dialect))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line instead of socketserver's traceback on stderr."""
        exc = sys.exc_info()[1]
        peer = client_address[0] if isinstance(client_address, tuple) and client_address else client_address
        if isinstance(exc, (ConnectionError, TimeoutError)):
            # A client dropping an idle keep-alive connection is routine.
            logger.debug("%s reset the connection (%s)", peer, exc)
            return
        logger.error("error while serving %s: %s: %s", peer, type(exc).__name__, exc)
        logger.debug("traceback of that error", exc_info=exc)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host_s = host.decode() if isinstance(host, bytes) else str(host)
        if ":" in host_s:
            host_s = f"[{host_s}]"
        return f"http://{host_s}:{port}"


class _Handler(DeadlineHandler):
    server: ProxyServer
    _trace: TraceRecord  # the generation request's record (web/_trace.py)
    protocol_version = "HTTP/1.1"
    server_version = "clanker-rag"
    timeout = CLIENT_IDLE_SECONDS

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
    def write_body(self, data: bytes) -> None:
        """Write to the client (the sinks' one way out); :class:`ClientGone` when it has gone."""
        self._write(data)

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError, OSError) as exc:
            raise ClientGone(str(exc)) from None

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
            raise ClientGone(str(exc)) from None
        self._write(data)

    def _send_error_json(self, status: int, message: str, err_type: str, code: str | int | None = None) -> None:
        self._send_json(status, error_body(redact(message, self._secrets()), err_type, code))

    def _upstream_headers(self, *, json_body: bool) -> dict[str, str]:
        headers: dict[str, str] = {}
        ours = self.server.access.token is not None  # the client's Authorization carries our token
        for name, value in self.headers.items():
            if name.lower() in _DROP_REQUEST_HEADERS or (ours and name.lower() == "authorization"):
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
        try:
            return self.rfile.read(length)
        except OSError as exc:
            raise ClientGone(str(exc)) from None

    # -- dispatch ---------------------------------------------------------------------------
    def _dispatch(self) -> None:
        started = time.perf_counter()
        status = 500
        note = ""
        try:
            refusal = self.server.access.refusal(self.command, self.headers.get)
            if refusal is not None and not (refusal.status == 401 and is_page(self.command, self.path)):
                # Before the body is read: the connection is not reused.
                self.close_connection = True
                extra = {"WWW-Authenticate": 'Bearer realm="clanker-rag"'} if refusal.status == 401 else None
                self._send_json(
                    refusal.status, error_body(refusal.message, "invalid_request_error", refusal.code), extra
                )
                self._finish_log(refusal.status, started, "refused")
                return
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
            if serves(self.command, self.path):  # the pages (web/_api.py)
                status, note = WebApp(self.server.retriever, self.server.trace).answer(self)
            elif self.command == "POST" and kind is not None:
                with self.server.trace.request(kind, body) as self._trace:
                    status, note = self._generation(kind, body)
                    self._trace.done(status, note)
            else:
                status = self._forward(body)
        except ClientGone as exc:
            self.close_connection = True
            note = f"client disconnected: {exc}"
            status = 499
        except UpstreamError as exc:
            note = "upstream failure"
            status = exc.status
            try:
                self._send_json(exc.status, exc.payload(self._secrets()))
            except ClientGone:
                self.close_connection = True
        except Exception as exc:  # never let one request take the server down
            logger.error("internal error on %s %s: %s: %s", self.command, self._safe_path(), type(exc).__name__, exc)
            logger.debug("traceback of that error", exc_info=exc)
            status = 500
            self.close_connection = True
            with contextlib.suppress(ClientGone):
                self._send_error_json(500, f"internal proxy error: {type(exc).__name__}", "server_error")
        self._finish_log(status, started, note)

    # Every method goes through one dispatch, so the access check covers them all.
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _dispatch

    # -- pass-through ------------------------------------------------------------------------------
    def _forward(self, body: bytes, *, headers: Mapping[str, str] | None = None) -> int:
        hdrs = dict(headers) if headers is not None else self._upstream_headers(json_body=False)
        resp = self.server.upstream.open(
            self.command, self.path, body if body or self.command in ("POST", "PUT", "PATCH") else None, hdrs
        )
        with resp:
            length = resp.header("Content-Length")
            try:
                self.send_response(resp.status, resp.reason)
                for name, value in resp.headers():
                    lower = name.lower()
                    if lower not in _DROP_RESPONSE_HEADERS and not lower.startswith(_CORS_PREFIX):
                        self.send_header(name, value)
                head = self.command == "HEAD"
                chunked = length is None and not head
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                elif length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()
            except OSError as exc:
                raise ClientGone(str(exc)) from None
            if head:
                return resp.status
            while True:
                try:
                    data = resp.read1(_COPY_CHUNK)
                except ServerTimeoutError:
                    self.close_connection = True
                    logger.warning("upstream %s timed out mid-response", redact(resp.url))
                    break
                except BackendError as exc:
                    self.close_connection = True
                    logger.warning("upstream broke mid-response: %s", redact(str(exc)))
                    break
                if not data:
                    break
                self._write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            if chunked and not self.close_connection:
                self._write(b"0\r\n\r\n")
            return resp.status

    # -- generation --------------------------------------------------------------------------------
    def _parse(self, body: bytes, kind: str) -> dict[str, Any] | None:
        too_deep = f"the request body nests deeper than {MAX_JSON_DEPTH} levels"
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            self._send_error_json(400, "the request body is not valid JSON", "invalid_request_error")
            return None
        except RecursionError:
            self._send_error_json(400, too_deep, "invalid_request_error")
            return None
        if _nests_deeper(obj, MAX_JSON_DEPTH):
            # Copying and re-encoding the body recurse once per level.
            self._send_error_json(400, too_deep, "invalid_request_error")
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
            return _question_of(message_text(last.get("content")))
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
        if kind == "chat" and self.server.config.native_tools and body.get("n") in (None, 1):
            return self._native(body)
        if not self._drivable(kind, body):
            return self._upfront(kind, body)
        if kind == "chat":
            chat = chat_turns(body["messages"])
            if chat is not None and self.server.base_model():
                return self._drive_base(body, chat)
        return self._drive(kind, body)

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
                # The controller's builder and budget; the block leads the message as in _drive.
                block = BlockBuilder(cfg.block_chars).block("context", hits).lstrip("\n")
                if kind == "chat":
                    for msg in reversed(body["messages"]):
                        if isinstance(msg, dict) and msg.get("role") == "user":
                            msg["content"] = prepend_to_content(msg.get("content"), block + "\n")
                            break
                elif isinstance(body.get("prompt"), str):
                    body["prompt"] = block + "\n" + body["prompt"]
                elif isinstance(body.get("prompt"), list) and body["prompt"] and isinstance(body["prompt"][0], str):
                    body["prompt"] = [block + "\n" + body["prompt"][0], *body["prompt"][1:]]
                note = f"forwarded, 1 injection from {len(hits)} passages"
                self._trace.upfront(question, hits, block)
        headers = self._upstream_headers(json_body=True)
        return self._forward(json.dumps(body).encode("utf-8"), headers=headers), note

    def _drive(self, kind: str, body: dict[str, Any]) -> tuple[int, str]:
        cfg = self.server.config
        dialects, guard = self.server.served()
        turn = UpstreamTurn(kind, body, self.server.upstream, self._upstream_headers(json_body=True))
        ctl = RagController(
            self.server.retriever,
            k=cfg.k,
            tools=cfg.tools,
            questions=cfg.questions,
            show_blocks=cfg.show_blocks,
            stop=as_stops(body.get("stop")),
            triggers=Triggers(min_score=cfg.min_score),
            limits=Limits(retrieval_timeout=cfg.retrieval_timeout),
            layout=BlockLayout(
                block_chars=cfg.block_chars,
                # A completion prompt's block goes before its question and answer cue.
                question_tail=restated_question(str(body["prompt"])) if kind == "completions" else None,
                guard=guard,
            ),
            dialect=dialects,
        )
        prompt = "" if kind == "chat" else str(body["prompt"])
        question = (self._question(kind, body) or "") if kind == "chat" else None
        events = ctl.events(turn.generate, prompt, question=question)
        assert isinstance(events, Generator)
        return self._respond(kind, turn, events, events)

    def _drive_base(self, body: dict[str, Any], chat: ChatTurns) -> tuple[int, str]:
        """A chat request to a base model: ``ask``'s few-shot prompt over ``/v1/completions``, a chat answer."""
        cfg = self.server.config
        mode = {(True, True): "both", (True, False): "context", (False, True): "tools"}.get(
            (cfg.questions, cfg.tools), "none"
        )
        question = _question_of(chat.question)
        # The rendered prompt replaces the messages; sampling settings pass through as they are, but
        # what chat leaves unset is set as `ask` sets it: the answer is copied, so greedy, and as long as
        # it needs (completions servers stop at 16 tokens by default; chat's newer length field is not theirs).
        payload = {key: value for key, value in body.items() if key not in ("messages", "stop")}
        payload.setdefault("temperature", 0.0)
        longest = payload.pop("max_completion_tokens", None)
        payload.setdefault("max_tokens", longest if isinstance(longest, int) else BASE_MAX_TOKENS)
        turn = UpstreamTurn("completions", payload, self.server.upstream, self._upstream_headers(json_body=True))
        # `ask`'s answering path: on llama.cpp, answers copy the injected passages' words.
        events = base_model_events(
            self.server.retriever,
            question,
            turn.generate,
            llama_cpp=self.server.llama_cpp,
            settings=AnswerSettings(mode=mode),
            asked=chat.question,
            history=chat.history,
            system=chat.system,
            stop=(*STOP, *as_stops(body.get("stop"))),
            triggers=Triggers(min_score=cfg.min_score),
            limits=Limits(retrieval_timeout=cfg.retrieval_timeout),
            show_blocks=cfg.show_blocks,
        )
        assert isinstance(events, Generator)
        # The visible answer without the prompt's "Answer:" label; closing it closes the controller.
        return self._respond("chat", turn, events, events)

    def _respond(
        self, kind: str, turn: UpstreamTurn, events: Iterator[StreamEvent], controller: Generator[StreamEvent]
    ) -> tuple[int, str]:
        """Send ``events`` to the client as a ``kind`` answer, streamed or whole; then close ``controller``."""
        cfg = self.server.config
        stream = bool(turn.body.get("stream"))
        sink = SseSink(self, kind, turn) if stream else JsonSink(kind, turn)
        retrievals: list[dict[str, Any]] = []
        injections = 0
        try:
            for ev in events:
                self._trace.see(ev)
                if isinstance(ev, TextEvent):
                    sink.text(ev.text)
                elif isinstance(ev, InjectEvent):
                    injections += 1
                    logger.debug("injected a %s block for %r", ev.tag, ev.query)
                    if cfg.show_blocks:
                        sink.text(ev.block)
                elif isinstance(ev, RetrieveEvent):
                    # Several passages of one source name it once, in rank order.
                    sources = list(dict.fromkeys(h.source for h in ev.hits))
                    retrievals.append({"kind": ev.kind, "query": ev.query, "sources": sources})
        except UpstreamError as exc:
            if not sink.started:
                raise
            logger.warning("upstream failed mid-stream: %s", redact(exc.message, self._secrets()))
            sink.error(exc.payload(self._secrets()))
            return 200, "upstream failed mid-stream"
        finally:
            # Closing the controller's stream closes the upstream request (a client gone mid-answer).
            controller.close()
        extension = {"injections": injections, "retrievals": retrievals}
        sink.finish(extension)
        if not stream:
            assert isinstance(sink, JsonSink)
            self._send_json(200, sink.response(extension), {"X-Clanker-Rag-Injections": str(injections)})
        return 200, f"{'stream' if stream else 'json'}, {injections} injections, {turn.calls} upstream requests"

    def _native(self, body: dict[str, Any]) -> tuple[int, str]:
        """``--native-tools``: the model calls ``retrieve`` as a function; see :mod:`._native_tools`."""
        cfg = self.server.config
        stream = bool(body.get("stream"))
        headers = self._upstream_headers(json_body=True)
        turn = UpstreamTurn("chat", body, self.server.upstream, headers)
        sink = SseSink(self, "chat", turn)
        chunks: list[dict[str, Any]] = []

        def events(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
            turn.calls += 1
            return event_stream(self.server.upstream, turn.path, payload, headers)

        emit = sink.send if stream else chunks.append
        try:
            result = run_native(
                body,
                retriever=self.server.retriever,
                open_stream=events,
                emit=emit,
                k=cfg.k,
                min_score=cfg.min_score,
                block_chars=cfg.block_chars,
                on_event=self._trace.see,
            )
        except UpstreamError as exc:
            if not sink.started:
                raise
            logger.warning("upstream failed mid-stream: %s", redact(exc.message, self._secrets()))
            sink.error(exc.payload(self._secrets()))
            return 200, "upstream failed mid-stream"
        if stream:
            sink.close()
        else:
            answer = assemble_response(chunks)
            answer["id"] = sink.id
            self._send_json(200, answer, {"X-Clanker-Rag-Injections": str(len(result.retrievals))})
        return 200, f"native tools, {len(result.retrievals)} retrievals, {result.rounds} upstream requests"
