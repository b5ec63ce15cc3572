"""The ``retrieve`` tool for chat models that use native function calling.

Chat servers that support OpenAI-style tools stream a call as ``tool_calls``
deltas: the function name arrives first, the JSON arguments in fragments.
:class:`ToolCallDeltas` assembles them and renders each finished call as the
same ``<tool name="...">query</tool>`` text the controller's scanner reads,
so native and text-based calls go through one code path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RETRIEVE_TOOL", "ToolCallDeltas", "render_tool_call", "retrieve_tool"]


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
