"""``serve --native-tools``: live retrieval through the upstream's own function calling.

Some upstreams do function calling but do not continue a trailing assistant
message (vLLM without ``continue_final_message``, hosted OpenAI-compatible
APIs), so the proxy cannot splice a block into the answer mid-stream.  In this
mode the proxy offers the model a ``retrieve`` tool next to the client's own
tools and runs the conversation itself:

1. the request goes upstream (always streamed) with ``retrieve`` added;
2. text deltas go to the client as they arrive;
3. ``tool_calls`` deltas are assembled (ids, names and arguments come in
   fragments) and held until the upstream's answer ends;
4. if every call was ``retrieve``, the proxy retrieves, appends the assistant
   tool-call message and one ``tool`` message per call holding the block, and
   asks again: the client sees one answer;
5. if the model called the client's tools, those calls go to the client
   untouched (our own calls are left out, indices renumbered) and the proxy
   stops there, as the API expects: the client runs its tools and sends the
   next request.

Rounds are bounded: after ``max_retrievals`` the tool is withdrawn so the model
must answer.  This module does no I/O: the handler passes a function that
streams parsed upstream chunks and one that sends a chunk to the client, and
may pass one that sees the controller's events for the same answer (the text
sent, each retrieval with its timing, each ``tool`` message as an
:class:`~clanker_rag._stream._events.InjectEvent`), which the ``/trace`` page
records.
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._retrieval._fusion import hit_key
from .._stream._blocks import BlockBuilder
from .._stream._events import InjectEvent, RetrieveEvent, StreamEvent, TextEvent
from .._stream._generate import retrieve_tool
from .._types import HitLike, Retriever

__all__ = ["NativeResult", "assemble_response", "run_native"]

logger = logging.getLogger(__name__)

TOOL = "retrieve"


@dataclass
class _Call:
    index: int
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    # Each delta of this call with the chunk that carried it, as the upstream sent them.
    deltas: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)


@dataclass
class NativeResult:
    """What one client request came to: the retrievals run and how the answer ended."""

    retrievals: list[dict[str, Any]]
    finish_reason: str
    rounds: int


def _choice(chunk: Mapping[str, Any]) -> dict[str, Any] | None:
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


class _Round:
    """One upstream answer: forwards text now, holds tool calls until the end."""

    def __init__(self) -> None:
        self.calls: dict[int, _Call] = {}
        self.text: list[str] = []
        self.finish: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """Chunks to send to the client now."""
        choice = _choice(chunk)
        if choice is None:
            if isinstance(chunk.get("usage"), dict):
                self.usage = chunk["usage"]
            return []
        # A server that ignored stream=True answers one whole message: read it as one delta.
        delta = next((v for v in (choice.get("delta"), choice.get("message")) if isinstance(v, dict)), {})
        deltas = delta.get("tool_calls")
        if isinstance(deltas, list):
            for pos, item in enumerate(deltas):
                if isinstance(item, dict):
                    self._add(item, pos, chunk)
        if choice.get("finish_reason") is not None:
            self.finish = chunk
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
        # Forward text (and whatever else the server adds), never a tool call, the
        # end or a bare role announcement: the client gets one role, one end.
        rest = {key: value for key, value in delta.items() if key not in ("tool_calls", "role")}
        if not any(value not in (None, "") for value in rest.values()):
            return []
        out = copy.copy(chunk)
        out["choices"] = [{"index": 0, "delta": rest, "logprobs": None, "finish_reason": None}]
        return [out]

    def _add(self, item: dict[str, Any], pos: int, chunk: dict[str, Any]) -> None:
        index = item.get("index", pos)
        index = index if isinstance(index, int) and not isinstance(index, bool) else pos
        call = self.calls.setdefault(index, _Call(index))
        if isinstance(item.get("id"), str):
            call.id = item["id"]
        fn = item.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str):
                call.name += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call.arguments.append(fn["arguments"])
        call.deltas.append((chunk, item))

    def split(self, ours: str | None) -> tuple[list[_Call], list[_Call]]:
        """(our calls, the client's calls), in index order; ``ours`` is our tool's name, if we offer one."""
        calls = [self.calls[i] for i in sorted(self.calls)]
        return [c for c in calls if c.name == ours], [c for c in calls if c.name != ours]


def _query_of(call: _Call) -> tuple[str | None, str | None]:
    """The query of a retrieve call, or None and why not."""
    raw = "".join(call.arguments)
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None, f"the arguments are not JSON: {raw[:200]!r}"
    query = args.get("query") if isinstance(args, dict) else None
    if not isinstance(query, str) or not query.strip():
        return None, 'call retrieve with {"query": "what to look up"}'
    return query, None


def _client_chunks(calls: Sequence[_Call]) -> list[dict[str, Any]]:
    """The client's own tool-call deltas, as sent, renumbered from 0."""
    out = []
    for number, call in enumerate(calls):
        for chunk, item in call.deltas:
            delta = {**item, "index": number}
            choice = {"index": 0, "delta": {"tool_calls": [delta]}, "logprobs": None, "finish_reason": None}
            out.append({**chunk, "choices": [choice]})
    return out


def _sum_usage(total: dict[str, int] | None, usage: Mapping[str, Any] | None) -> dict[str, int] | None:
    if not usage:
        return total
    total = dict(total or {})
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value
    return total


def with_tool(tools: object, offer: bool) -> list[Any] | None:
    """The client's tools, plus ours when ``offer``; None when there are none."""
    own = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    if offer:
        own = [*own, retrieve_tool()]
    return own or None


def run_native(
    body: Mapping[str, Any],
    *,
    retriever: Retriever,
    open_stream: Callable[[dict[str, Any]], Iterable[dict[str, Any]]],
    emit: Callable[[dict[str, Any]], None],
    k: int = 3,
    min_score: float | None = None,
    block_chars: int = 2000,
    max_retrievals: int = 4,
    on_event: Callable[[StreamEvent], None] | None = None,
) -> NativeResult:
    """Answer one chat request, running ``retrieve`` calls here; see the module docstring.

    ``open_stream(payload)`` streams the upstream's parsed chunks for a
    request body; ``emit(chunk)`` sends one chunk to the client.  The last
    chunk emitted carries ``clanker_rag`` (the retrievals), then a usage chunk
    summed over the rounds when the client asked for usage.  ``on_event``
    sees the answer's text as it is sent, a ``RetrieveEvent`` per retrieval
    (kind ``"tool"``) and an ``InjectEvent`` per ``tool`` message, its block
    exactly as sent upstream.
    """
    see = on_event or (lambda ev: None)
    client_tools = body.get("tools")
    ours: str | None = TOOL
    if any(isinstance(t, dict) and (t.get("function") or {}).get("name") == TOOL for t in client_tools or []):
        # The client has its own "retrieve": its calls are the client's, not ours.
        logger.warning("the client defines a %r tool; --native-tools leaves it alone and adds none", TOOL)
        ours, max_retrievals = None, 0
    opts = body.get("stream_options")
    want_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
    messages = list(body.get("messages") or [])
    answer_id = "chatcmpl-" + secrets.token_hex(12)
    retrievals: list[dict[str, Any]] = []
    seen: set[Hashable] = set()
    blocks = BlockBuilder(block_chars)  # the controller's: numbered, cited, neutralised
    usage: dict[str, int] | None = None
    for round_no in range(max_retrievals + 1):
        offer = round_no < max_retrievals
        payload = {key: value for key, value in body.items() if key not in ("tools", "tool_choice")}
        payload.update(messages=messages, stream=True)
        tools = with_tool(client_tools, offer)
        if tools is not None:
            payload["tools"] = tools
            if "tool_choice" in body:
                payload["tool_choice"] = body["tool_choice"]
        rnd = _Round()
        for chunk in open_stream(payload):
            for out in rnd.feed(chunk):
                out["id"] = answer_id
                emit(out)
                content = out["choices"][0]["delta"].get("content")
                if isinstance(content, str) and content:
                    see(TextEvent(content))
        usage = _sum_usage(usage, rnd.usage)
        ours_calls, theirs = rnd.split(ours)
        if ours_calls and not theirs and offer:
            calls = []
            replies = []
            for n, call in enumerate(ours_calls):
                call_id = call.id or f"call_clanker_{round_no}_{n}"
                arguments = "".join(call.arguments)
                calls.append({"id": call_id, "type": "function", "function": {"name": TOOL, "arguments": arguments}})
                query, problem = _query_of(call)
                hits: list[HitLike] = []
                found = False
                if query is not None:
                    started = time.perf_counter()
                    # As in the controller: over-fetch, drop weak passages and ones this answer already has.
                    scored = [h for h in retriever.search(query, k * 3) if min_score is None or h.score >= min_score]
                    found = bool(scored)
                    hits = [h for h in scored if hit_key(h) not in seen][:k]
                    seen.update(hit_key(h) for h in hits)
                    see(RetrieveEvent(query, tuple(hits), "tool", time.perf_counter() - started))
                    # Several passages of one source name it once, in rank order.
                    sources = list(dict.fromkeys(h.source for h in hits))
                    retrievals.append({"kind": "tool", "query": query, "sources": sources})
                note = problem or (
                    None
                    if hits
                    else "No new passages (anything relevant is already above)."
                    if found
                    else "No relevant passages found."
                )
                block = blocks.build("result", hits, note)
                see(InjectEvent.of(block, "tool", query or ""))
                replies.append({"role": "tool", "tool_call_id": call_id, "content": block.text})
            text = "".join(rnd.text)
            messages = [*messages, {"role": "assistant", "content": text or None, "tool_calls": calls}, *replies]
            continue
        if ours_calls:
            logger.warning("dropped %d retrieve call(s) the model made next to the client's tools", len(ours_calls))
        for out in _client_chunks(theirs):
            out["id"] = answer_id
            emit(out)
        finish_reason = "tool_calls" if theirs else _finish_reason(rnd)
        last: dict[str, Any] = dict(rnd.finish) if rnd.finish is not None else {"object": "chat.completion.chunk"}
        choice = _choice(last) or {"index": 0}
        last.update(id=answer_id, choices=[{**choice, "delta": {}, "finish_reason": finish_reason}])
        last["clanker_rag"] = {"injections": len(retrievals), "retrievals": retrievals}
        emit(last)
        if want_usage and usage is not None:
            emit({"id": answer_id, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        return NativeResult(retrievals, finish_reason, round_no + 1)
    raise AssertionError("unreachable: the last round offers no tool")  # pragma: no cover


def _finish_reason(rnd: _Round) -> str:
    choice = _choice(rnd.finish) if rnd.finish is not None else None
    reason = choice.get("finish_reason") if choice is not None else None
    # Our own call that could not be run (offered on the last round anyway) ends as a plain stop.
    return reason if isinstance(reason, str) and reason != "tool_calls" else "stop"


def assemble_response(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` from the chunks :func:`run_native` emitted."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    obj: dict[str, Any] = {"object": "chat.completion"}
    finish = "stop"
    for chunk in chunks:
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk:
                obj[key] = chunk[key]
        if "usage" in chunk and chunk.get("usage"):
            obj["usage"] = chunk["usage"]
        if "clanker_rag" in chunk:
            obj["clanker_rag"] = chunk["clanker_rag"]
        choice = _choice(chunk)
        if choice is None:
            continue
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            text.append(delta["content"])
        for item in delta.get("tool_calls") or []:
            call = calls.setdefault(
                item["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if item.get("id"):
                call["id"] = item["id"]
            fn = item.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
        if choice.get("finish_reason"):
            finish = choice["finish_reason"]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or (None if calls else "")}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    obj["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]
    return obj
