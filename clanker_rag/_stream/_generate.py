"""The generation protocol shared by the controller and the backends.

A backend is any callable ``generate(prompt, stop)`` that returns an iterable of
pieces.  A piece is either a plain ``str`` or a :class:`Token`, which adds the
token's log-probability (for confidence-driven retrieval) and, on the last
piece, why generation stopped.  The async variant returns an async iterable.

Chat servers with OpenAI-style native function calling stream a call as
``tool_calls`` deltas: the function name first, the JSON arguments in
fragments.  :class:`ToolCallDeltas` assembles them and renders each finished
call as the same ``<tool name="...">query</tool>`` text the controller's
scanner reads, so native and text-based calls go through one code path;
:func:`retrieve_tool` is the ``tools`` entry a backend offers the server.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RETRIEVE_TOOL",
    "AsyncGenerateFn",
    "GenerateFn",
    "Piece",
    "RequestStats",
    "Token",
    "ToolCallDeltas",
    "piece_parts",
    "render_tool_call",
    "retrieve_tool",
]


@dataclass(frozen=True, slots=True)
class Token:
    """A piece of generated text with what the backend knows about it.

    ``logprob`` is the natural-log probability of the sampled token, when the
    backend reports it.  ``finish_reason`` is set on the last piece only:
    ``"stop"`` (end of sequence or a stop string), ``"length"`` (token limit),
    or a backend-specific value.  ``stop`` is the stop string that ended
    generation, when the backend says which one.
    """

    text: str
    logprob: float | None = None
    finish_reason: str | None = None
    stop: str | None = None


Piece = str | Token

GenerateFn = Callable[[str, Sequence[str]], Iterable[Piece]]
"""``generate(prompt, stop)``: a fresh iterable of pieces for this prompt."""

AsyncGenerateFn = Callable[
    [str, Sequence[str]],
    AsyncIterable[Piece] | Awaitable[AsyncIterable[Piece]] | Iterable[Piece],
]
"""``agenerate(prompt, stop)``: an async iterable of pieces (or a coroutine giving one)."""


@dataclass(slots=True)
class RequestStats:
    """What a backend learned about its last request.

    ``cached_tokens`` is the number of prompt tokens the server reused from
    its prompt cache, ``prompt_tokens`` the number it had to evaluate anew.
    Fields a backend cannot know stay None.
    """

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    generated_tokens: int | None = None
    prompt_ms: float | None = None
    generation_ms: float | None = None
    finish_reason: str | None = None
    stop: str | None = None


def piece_parts(piece: object) -> tuple[str, float | None, str | None, str | None]:
    """Split a piece into (text, logprob, finish_reason, stop), accepting duck types."""
    if isinstance(piece, str):
        return piece, None, None, None
    if isinstance(piece, Token):
        return piece.text, piece.logprob, piece.finish_reason, piece.stop
    text = getattr(piece, "text", None)
    if not isinstance(text, str):
        raise TypeError(f"a generated piece must be str or carry .text, got {type(piece).__name__}")
    logprob = getattr(piece, "logprob", None)
    finish = getattr(piece, "finish_reason", None)
    stop = getattr(piece, "stop", None)
    return (
        text,
        float(logprob) if isinstance(logprob, (int, float)) else None,
        finish if isinstance(finish, str) else None,
        stop if isinstance(stop, str) else None,
    )


# -- native tool calls ---------------------------------------------------------
def retrieve_tool(description: str | None = None) -> dict[str, Any]:
    """The OpenAI ``tools`` entry for ``retrieve`` (a fresh dict you may edit)."""
    return {
        "type": "function",
        "function": {
            "name": "retrieve",
            "description": description
            or (
                "Search the knowledge base. Call this whenever you need facts you are "
                "not sure of; the passages come back as numbered excerpts with sources."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "What to look up, as a short search query.",
                    }
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }


RETRIEVE_TOOL: Mapping[str, Any] = retrieve_tool()
"""The default ``retrieve`` tool schema (treat as read-only; use :func:`retrieve_tool` to edit)."""


def _escape_payload(text: str) -> str:
    # The payload goes between tags the scanner reads; keep it from closing early.
    return text.replace("<", "&lt;")


def render_tool_call(name: str, arguments: str) -> str:
    """Render a native call as scanner-readable text.

    ``arguments`` is the JSON string the model produced; for ``retrieve`` the
    ``query`` field becomes the payload.  Unparseable arguments are passed
    through verbatim as the payload so nothing is silently lost.
    """
    payload = arguments
    try:
        obj = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        query = obj.get("query")
        payload = query if isinstance(query, str) else json.dumps(obj, ensure_ascii=False)
    safe_name = "".join(c for c in name if c.isalnum() or c in "_-.") or "tool"
    return f'<tool name="{safe_name}">{_escape_payload(payload)}</tool>'


@dataclass
class _Partial:
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    call_id: str | None = None


class ToolCallDeltas:
    """Assembles streamed ``tool_calls`` deltas of one chat completion."""

    def __init__(self) -> None:
        self._calls: dict[int, _Partial] = {}

    def add(self, deltas: object) -> None:
        """Add the ``delta.tool_calls`` list of one streamed chunk (ignores junk)."""
        if not isinstance(deltas, list):
            return
        for pos, delta in enumerate(deltas):
            if not isinstance(delta, dict):
                continue
            index = delta.get("index", pos)
            if not isinstance(index, int):
                index = pos
            part = self._calls.setdefault(index, _Partial())
            if isinstance(delta.get("id"), str):
                part.call_id = delta["id"]
            fn = delta.get("function")
            if isinstance(fn, dict):
                if isinstance(fn.get("name"), str):
                    part.name += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    part.arguments.append(fn["arguments"])

    def __bool__(self) -> bool:
        return bool(self._calls)

    def finish(self) -> list[tuple[str, str]]:
        """Return the assembled calls as (name, arguments JSON) and forget them."""
        calls = [(p.name, "".join(p.arguments)) for _, p in sorted(self._calls.items())]
        self._calls.clear()
        return calls

    def render(self) -> str:
        """Finish and render every call as tag text, in index order."""
        return "".join(render_tool_call(name, args) for name, args in self.finish())
