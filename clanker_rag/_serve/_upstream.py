"""The ``serve`` proxy's upstream side: the client and one generation request.

:class:`Upstream` opens requests to the upstream server through the package's
one HTTP client (:class:`~clanker_rag._http.ModelServer`) and maps each of
its failures to an :class:`UpstreamError` that already holds the status and
OpenAI-style JSON the proxy's client gets (:func:`upstream_error`).
:class:`UpstreamTurn` is one ``/v1/chat/completions`` or ``/v1/completions``
request seen as a ``generate(prompt, stop)`` callable, so the controller can
drive it: each call is one upstream request, streamed back as
:class:`~clanker_rag._stream._generate.Token` pieces.  :func:`redact` keeps
credentials out of everything logged or echoed.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import BackendError, ServerStatusError, ServerTimeoutError, ServerUnreachableError
from .._http import ModelServer, Response, Timeout
from .._stream._generate import Token
from .._urls import BaseUrl

__all__ = [
    "REASONING_FIELDS",
    "THINK_CLOSE",
    "THINK_OPEN",
    "ChatTurns",
    "Upstream",
    "UpstreamError",
    "UpstreamTurn",
    "as_stops",
    "chat_turns",
    "error_body",
    "event_stream",
    "message_text",
    "prepend_to_content",
    "redact",
    "upstream_error",
]

MAX_ERROR_BODY = 2000
# Delta fields servers stream a model's thinking in (llama.cpp and vLLM: reasoning_content; others: reasoning).
REASONING_FIELDS = ("reasoning_content", "reasoning")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_SECRET_RE = re.compile(
    r"(?i)(\b(?:bearer|basic)\s+)[^\s\"',;]+"
    r"|(\b(?:api[_-]?key|access[_-]?token|token|key|password|secret)=)[^\s&\"',;]+"
    r"|\b(?:sk|pk|rk|hf|gsk|xai)[-_][A-Za-z0-9_\-]{8,}"
)


def redact(text: str, extra: Sequence[str] = ()) -> str:
    """``text`` with credentials blanked: known values in ``extra`` and anything shaped like a key."""
    for value in extra:
        if value and len(value) >= 4:
            text = text.replace(value, "[redacted]")

    def sub(m: re.Match[str]) -> str:
        prefix = m.group(1) or m.group(2) or ""
        return prefix + "[redacted]"

    return _SECRET_RE.sub(sub, text)


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
        return error_body(redact(self.message, secrets_), self.err_type, self.code)


def error_body(message: str, err_type: str, code: str | int | None = None, param: str | None = None) -> dict[str, Any]:
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
    snippet = " ".join(text.split())[:MAX_ERROR_BODY]
    message = obj["error"] if isinstance(obj, dict) and isinstance(obj.get("error"), str) else snippet
    return UpstreamError(client_status, f"upstream {url} answered HTTP {status}: {message}", "upstream_error", status)


def upstream_error(exc: BackendError) -> UpstreamError:
    """The proxy's answer to a failure of the upstream client: 502 or 504, or the upstream's own error status."""
    if isinstance(exc, ServerStatusError):
        return _http_error(exc.status, exc.body, exc.url)
    if isinstance(exc, ServerTimeoutError):
        return UpstreamError(504, str(exc), "upstream_timeout")
    if isinstance(exc, ServerUnreachableError):
        return UpstreamError(502, str(exc), "upstream_unreachable")
    return UpstreamError(502, str(exc), "upstream_error")


class Upstream:
    """Opens requests to the upstream server at ``base``; ``timeout`` bounds connecting and each wait for bytes."""

    def __init__(self, base: BaseUrl, timeout: float | Timeout) -> None:
        self.server = ModelServer(base, timeout, name="upstream")
        self.base = base
        self.timeout = self.server.timeout

    def url(self, path: str) -> str:
        return self.server.url_of(path)

    def open(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]) -> Response:
        """The upstream's answer, status and headers read; close it when done.  Failures are :class:`UpstreamError`."""
        try:
            return self.server.request(method, path, body, headers)
        except BackendError as exc:
            raise upstream_error(exc) from None


def message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


@dataclass(frozen=True)
class ChatTurns:
    """A chat as a base model's prompt reads it: system text, earlier (question, answer) turns, the question."""

    system: str
    history: tuple[tuple[str, str], ...]
    question: str


def chat_turns(messages: list[Any]) -> ChatTurns | None:
    """``messages`` as plain turns, or None when they are not a user/assistant dialogue ending with a user."""
    system: list[str] = []
    history: list[tuple[str, str]] = []
    pending: str | None = None
    for msg in messages:
        if not isinstance(msg, dict):
            return None
        role, text = msg.get("role"), message_text(msg.get("content"))
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            pending = text if pending is None else f"{pending}\n{text}"
        elif role == "assistant" and pending is not None and isinstance(msg.get("content"), (str, list)):
            history.append((pending, text))
            pending = None
        else:  # tool results, an opening assistant turn, function calls: no few-shot layout for them
            return None
    if pending is None or not pending.strip():
        return None
    return ChatTurns("\n".join(system), tuple(history), pending)


def prepend_to_content(content: object, block: str) -> object:
    if isinstance(content, list):
        return [{"type": "text", "text": block}, *content]
    return block + message_text(content)


def as_stops(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


class UpstreamTurn:
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
        # The field the upstream streams thinking in ("reasoning_content", "reasoning"), once it has.
        self.reasoning_field: str | None = None
        self._thinking = False  # the text so far has an open <think> of the upstream's reasoning

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
                    msg["content"] = prepend_to_content(msg.get("content"), lead.strip("\n") + "\n\n")
                    break
        self.prefill = rest
        if rest:
            messages.append({"role": "assistant", "content": rest})
        return messages

    def generate(self, prompt: str, stop: Sequence[str], options: Mapping[str, Any] | None = None) -> Iterator[Token]:
        """Stream the upstream's tokens for ``prompt``; ``options`` are extra request fields (a ``grammar``)."""
        payload = self._payload(prompt, stop)
        payload.update(options or {})
        self.calls += 1
        # A resumed request continues inside the thinking section the context left open.
        self._thinking = self.reasoning_field is not None and prompt.rfind(THINK_OPEN) > prompt.rfind(THINK_CLOSE)
        data = json.dumps(payload).encode("utf-8")
        resp = self.upstream.open("POST", self.path, data, self.headers)
        url = resp.url
        try:
            objects = _objects(resp, finished=lambda: self.finish_reason is not None)
            finish: str | None = None
            tokens: Iterator[Token] = (tok for obj in objects for tok in self._tokens(obj, url))
            if self.kind == "chat" and self.prefill:
                tokens = drop_echo(tokens, self.prefill)
            for tok in tokens:
                if tok.finish_reason is not None:
                    finish = tok.finish_reason
                yield tok
            self.finish_reason = finish
        finally:
            # Closing mid-stream (a resume, or the client went away) makes the upstream stop generating.
            resp.close()

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
                message = f"upstream {url} reported an error: {json.dumps(obj['error'])[:MAX_ERROR_BODY]}"
                raise UpstreamError(502, message, "upstream_error")
            return
        choice = choices[0]
        if self.kind == "chat":
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                whole = choice.get("message")
                delta = whole if isinstance(whole, dict) else {}
            text = delta.get("content")
            text = self._with_reasoning(delta, text if isinstance(text, str) else "")
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

    def _with_reasoning(self, delta: Mapping[str, Any], content: str) -> str:
        """The delta's thinking and content as one text, the thinking inside ``<think>`` ... ``</think>``.

        The controller scans thinking as generated text (a call inside it is
        answered) and resumes with it in the context, as chat templates render
        it; the proxy's sink turns the tagged part back into the same field.
        """
        reasoning = ""
        for key in REASONING_FIELDS:
            value = delta.get(key)
            if isinstance(value, str) and value:
                reasoning, self.reasoning_field = value, key
                break
        text = ""
        if reasoning:
            if not self._thinking:
                text, self._thinking = THINK_OPEN, True
            text += reasoning
        if content:
            if self._thinking:
                text, self._thinking = text + THINK_CLOSE, False
            text += content
        return text

    def usage(self) -> dict[str, int] | None:
        if not self.usage_seen or self.prompt_tokens is None:
            return None
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def drop_echo(tokens: Iterator[Token], prefill: str) -> Iterator[Token]:
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


def event_stream(
    upstream: Upstream, path: str, payload: Mapping[str, Any], headers: Mapping[str, str]
) -> Iterator[dict[str, Any]]:
    """POST ``payload`` (a streamed request) and yield each parsed SSE object until ``[DONE]``.

    For callers that need whole chunks (``--native-tools`` reads their
    ``tool_calls``); failures are :class:`UpstreamError` as everywhere here,
    and closing the iterator closes the connection, which stops the upstream.
    """
    with upstream.open("POST", path, json.dumps(payload).encode("utf-8"), headers) as resp:
        yield from _objects(resp)


def _objects(resp: Response, *, finished: Callable[[], bool] | None = None) -> Iterator[dict[str, Any]]:
    """The JSON objects of an upstream's answer: its SSE events up to ``[DONE]``, or its one JSON body.

    ``finished``, asked after each event, says whether the answer has ended
    (a finish_reason); a stream that stops with neither that nor ``[DONE]``
    dropped mid-answer and is an error.  Without it, such a stream just ends.
    """
    ended = False
    try:
        for obj in resp.objects():
            yield obj
            ended = ended or (finished is not None and finished())
    except BackendError as exc:
        raise upstream_error(exc) from None
    if finished is not None and not ended and not resp.complete:
        # Neither [DONE] nor a finish_reason: the connection dropped mid-answer.
        raise UpstreamError(502, f"upstream {resp.url} ended the stream before finishing the answer", "upstream_error")
