"""OpenAI-compatible and llama.cpp HTTP backends, standard library only.

Three endpoints, each a ``generate(prompt, stop)`` callable that streams
:class:`~clanker_rag._stream._generate.Token` pieces over server-sent events:

* :class:`CompletionsBackend` - ``POST /v1/completions`` with a raw prompt;
* :class:`ChatBackend` - ``POST /v1/chat/completions`` (the prompt becomes the
  user message; native ``tool_calls`` for ``retrieve`` are rendered as tag
  text so the controller handles them like written calls);
* :class:`LlamaCppBackend` - llama.cpp's native ``POST /completion`` with
  ``cache_prompt`` and ``n_probs``.

The requests go through the package's one HTTP client
(:class:`~clanker_rag._http.ModelServer`), so every failure (server down, HTTP
error, timeout, a body that is not the expected JSON) raises a
:class:`~clanker_rag._exceptions.BackendError` with the URL in the message:
the client's ``Server*Error`` subclasses for the transport, ``BackendError``
itself for JSON that is not the endpoint's shape.  ``timeout`` is seconds
(connect and read) or a :class:`~clanker_rag._http.Timeout`.  After each
request, ``last_stats`` holds what the server said about it (prompt tokens,
cached tokens, timings).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from .._exceptions import BackendError
from .._http import ModelServer, Timeout
from .._http import snippet as _snippet
from .._stream._generate import RequestStats, Token, ToolCallDeltas, retrieve_tool

__all__ = ["ChatBackend", "CompletionsBackend", "LlamaCppBackend"]

logger = logging.getLogger(__name__)


class _HttpBackend:
    """Shared plumbing: the server's client, one streaming POST, what its JSON objects may not be."""

    path = "/"

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float | Timeout = 120.0,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        # "http://h:8080" and "http://h:8080/v1" both work: request paths carry /v1.
        self._server = ModelServer(base_url, timeout)
        self.base_url = self._server.url
        self.timeout = self._server.timeout
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.headers.update(headers or {})
        self.extra = dict(extra or {})
        self.last_stats: RequestStats | None = None
        self.last_response: dict[str, Any] | None = None

    def _url(self, path: str) -> str:
        return self._server.url_of(path)

    def _post(self, path: str, payload: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """POST ``payload`` and yield each JSON object the server streams back (or its one JSON body)."""
        body = json.dumps({**payload, **self.extra}).encode("utf-8")
        # Closing mid-stream (the with block left early) tells the server to stop generating.
        with self._server.request("POST", path, body, self.headers) as resp:
            seen = False
            for obj in resp.objects():
                if "error" in obj and not obj.get("choices") and "content" not in obj:
                    raise BackendError(f"{resp.who} reported an error: {_snippet(json.dumps(obj['error']))}")
                seen = True
                yield obj
            if not seen:
                raise BackendError(f"{resp.who} sent an event stream with no data events")

    def __call__(self, prompt: str, stop: Sequence[str] = ()) -> Iterator[Token]:
        raise NotImplementedError

    async def agenerate(self, prompt: str, stop: Sequence[str] = ()) -> AsyncIterator[Token]:
        """Async version of calling the backend: the blocking reads run in a thread."""
        it = self(prompt, stop)
        done = object()
        try:
            while True:
                piece = await asyncio.to_thread(next, it, done)
                if piece is done:
                    return
                assert isinstance(piece, Token)
                yield piece
        finally:
            await asyncio.to_thread(it.close)  # type: ignore[attr-defined]


def _usage_stats(obj: Mapping[str, Any], stats: RequestStats) -> None:
    usage = obj.get("usage")
    if isinstance(usage, dict):
        prompt_tokens = usage.get("prompt_tokens")
        if isinstance(prompt_tokens, int):
            stats.prompt_tokens = prompt_tokens
        completion = usage.get("completion_tokens")
        if isinstance(completion, int):
            stats.generated_tokens = completion
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            stats.cached_tokens = details["cached_tokens"]
    _timing_stats(obj.get("timings"), stats)


def _timing_stats(timings: object, stats: RequestStats) -> None:
    # llama.cpp adds "timings" to its OpenAI-compatible and native answers.
    if not isinstance(timings, dict):
        return
    if isinstance(timings.get("cache_n"), int):
        stats.cached_tokens = timings["cache_n"]
    if isinstance(timings.get("prompt_n"), int):
        stats.prompt_tokens = timings["prompt_n"]
    if isinstance(timings.get("predicted_n"), int):
        stats.generated_tokens = timings["predicted_n"]
    if isinstance(timings.get("prompt_ms"), (int, float)):
        stats.prompt_ms = float(timings["prompt_ms"])
    if isinstance(timings.get("predicted_ms"), (int, float)):
        stats.generation_ms = float(timings["predicted_ms"])


def _first_choice(obj: Mapping[str, Any], url: str) -> dict[str, Any] | None:
    choices = obj.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        raise BackendError(f"{url} answered malformed choices: {_snippet(json.dumps(obj))}")
    if not choices:
        return None  # e.g. the final usage-only chunk
    first = choices[0]
    if not isinstance(first, dict):
        raise BackendError(f"{url} answered malformed choices: {_snippet(json.dumps(obj))}")
    return first


def _min_logprob(values: object) -> float | None:
    if not isinstance(values, list):
        return None
    nums = [float(v) for v in values if isinstance(v, (int, float))]
    return min(nums) if nums else None


class CompletionsBackend(_HttpBackend):
    """``POST /v1/completions``: raw prompt in, streamed text out.

    The server keeps (or not) its own prompt cache; with llama.cpp's server
    the resumed prompt of the controller reuses it.  ``logprobs=True`` asks
    for token log-probabilities (for ``flare``).  At most four stop strings
    are sent, the OpenAI limit.
    """

    path = "/v1/completions"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        logprobs: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url, **kwargs)
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.logprobs = logprobs

    def __call__(self, prompt: str, stop: Sequence[str] = ()) -> Iterator[Token]:
        payload: dict[str, Any] = {
            "prompt": prompt,
            "stream": True,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            payload["model"] = self.model
        if stop:
            payload["stop"] = list(stop)[:4]
        if self.logprobs:
            payload["logprobs"] = 1
        stats = RequestStats()
        self.last_stats = stats
        url = self._url(self.path)
        for obj in self._post(self.path, payload):
            self.last_response = obj
            _usage_stats(obj, stats)
            choice = _first_choice(obj, url)
            if choice is None:
                if "choices" not in obj and "usage" not in obj and "timings" not in obj:
                    raise BackendError(f"{url} answered without choices: {_snippet(json.dumps(obj))}")
                continue
            text = choice.get("text")
            if text is not None and not isinstance(text, str):
                raise BackendError(f"{url} answered a non-string text: {_snippet(json.dumps(obj))}")
            finish = choice.get("finish_reason")
            finish = finish if isinstance(finish, str) else None
            logprobs = choice.get("logprobs")
            logprob = _min_logprob(logprobs.get("token_logprobs")) if isinstance(logprobs, dict) else None
            if finish is not None:
                stats.finish_reason = finish
            if text or finish is not None:
                yield Token(text or "", logprob, finish)


class ChatBackend(_HttpBackend):
    """``POST /v1/chat/completions``: the prompt is sent as the user message.

    With ``tools=True`` the ``retrieve`` function schema is offered; a native
    ``tool_calls`` answer is rendered as ``<tool name="retrieve">query</tool>``
    text, which the controller handles like a written call.  A resumed turn
    is sent as one user message holding the whole extended prompt.
    """

    path = "/v1/chat/completions"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        system: str | None = None,
        tools: bool = False,
        max_tokens: int = 256,
        temperature: float = 0.0,
        logprobs: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url, **kwargs)
        self.model = model
        self.system = system
        self.tools = tools
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.logprobs = logprobs

    def __call__(self, prompt: str, stop: Sequence[str] = ()) -> Iterator[Token]:
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": prompt})
        payload: dict[str, Any] = {
            "messages": messages,
            "stream": True,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            payload["model"] = self.model
        if stop:
            payload["stop"] = list(stop)[:4]
        if self.tools:
            payload["tools"] = [retrieve_tool()]
        if self.logprobs:
            payload["logprobs"] = True
        stats = RequestStats()
        self.last_stats = stats
        url = self._url(self.path)
        calls = ToolCallDeltas()
        for obj in self._post(self.path, payload):
            self.last_response = obj
            _usage_stats(obj, stats)
            choice = _first_choice(obj, url)
            if choice is None:
                if "choices" not in obj and "usage" not in obj and "timings" not in obj:
                    raise BackendError(f"{url} answered without choices: {_snippet(json.dumps(obj))}")
                continue
            delta = choice.get("delta")
            if delta is None:
                delta = choice.get("message")  # a non-streamed answer
            if not isinstance(delta, dict):
                delta = {}
            calls.add(delta.get("tool_calls"))
            text = delta.get("content")
            if text is not None and not isinstance(text, str):
                raise BackendError(f"{url} answered non-string content: {_snippet(json.dumps(obj))}")
            logprob: float | None = None
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                logprob = _min_logprob([c.get("logprob") for c in lp["content"] if isinstance(c, dict)])
            finish = choice.get("finish_reason")
            finish = finish if isinstance(finish, str) else None
            if finish is not None:
                stats.finish_reason = finish
            if text:
                yield Token(text, logprob)
            if finish is not None:
                # Native calls become tag text the controller's scanner reads.
                yield Token(calls.render() if calls else "", None, finish)
        if calls:
            yield Token(calls.render(), None, "tool_calls")


class LlamaCppBackend(_HttpBackend):
    """llama.cpp's native ``POST /completion``.

    ``cache_prompt=True`` keeps the KV cache of the previous request so a
    resumed prompt only evaluates what was appended; ``last_stats`` reports
    ``cached_tokens`` (``timings.cache_n``) and ``prompt_tokens`` (the tokens
    evaluated anew).  ``n_probs > 0`` makes each piece carry the token's
    log-probability (for ``flare``).  The stop string that ended generation
    is reported on the last piece (``Token.stop``).
    """

    path = "/completion"

    def __init__(
        self,
        base_url: str,
        *,
        n_predict: int = 256,
        temperature: float = 0.0,
        cache_prompt: bool = True,
        n_probs: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url, **kwargs)
        self.n_predict = n_predict
        self.temperature = temperature
        self.cache_prompt = cache_prompt
        self.n_probs = n_probs

    def __call__(
        self, prompt: str, stop: Sequence[str] = (), *, options: Mapping[str, Any] | None = None
    ) -> Iterator[Token]:
        """Stream the completion of ``prompt``; ``options`` (e.g. a GBNF ``grammar``) join the request."""
        payload: dict[str, Any] = {
            **(options or {}),
            "prompt": prompt,
            "stream": True,
            "n_predict": self.n_predict,
            "temperature": self.temperature,
            "cache_prompt": self.cache_prompt,
        }
        if stop:
            payload["stop"] = list(stop)
        if self.n_probs:
            payload["n_probs"] = self.n_probs
        stats = RequestStats()
        self.last_stats = stats
        url = self._url(self.path)
        for obj in self._post(self.path, payload):
            self.last_response = obj
            text = obj.get("content")
            if not isinstance(text, str):
                raise BackendError(f"{url} answered without content: {_snippet(json.dumps(obj))}")
            logprob = _llama_logprob(obj)
            if obj.get("stop") is True:
                _timing_stats(obj.get("timings"), stats)
                word = obj.get("stopping_word")
                stop_word = word if isinstance(word, str) and word else None
                kind = obj.get("stop_type")
                finish = "length" if kind == "limit" or obj.get("stopped_limit") else "stop"
                stats.finish_reason = finish
                stats.stop = stop_word
                yield Token(text, logprob, finish, stop_word)
                return
            if text:
                yield Token(text, logprob)


def _llama_logprob(obj: Mapping[str, Any]) -> float | None:
    probs = obj.get("completion_probabilities")
    if not isinstance(probs, list) or not probs:
        return None
    values: list[float] = []
    for item in probs:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("logprob"), (int, float)):
            values.append(float(item["logprob"]))
        elif isinstance(item.get("prob"), (int, float)) and item["prob"] > 0:
            values.append(math.log(float(item["prob"])))
        elif isinstance(item.get("probs"), list) and item["probs"]:
            # Older servers: the sampled token's probability is listed first.
            top = item["probs"][0]
            if isinstance(top, dict) and isinstance(top.get("prob"), (int, float)) and top["prob"] > 0:
                values.append(math.log(float(top["prob"])))
    return min(values) if values else None
