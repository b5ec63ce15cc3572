"""Server-sent events, read and written: the one SSE codec of the package.

The one HTTP client (``_http``) reads event streams with :func:`iter_sse`
for the backends and the ``serve`` proxy's upstream; the proxy writes its own
with :func:`encode_event`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["DONE", "encode_event", "iter_sse"]

DONE = "[DONE]"


def iter_sse(lines: Iterator[bytes]) -> Iterator[tuple[str, str]]:
    """Parse server-sent events from raw lines; yield (event field, data).

    Multi-line ``data:`` fields are joined with newlines; comment lines are
    skipped; an event still pending when the stream ends is dispatched.
    llama.cpp reports some failures as an ``error:`` line, yielded as
    event ``"error"``.
    """
    data: list[str] = []
    event = "message"
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            data = []
            event = "message"
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "error":
            yield "error", value
    if data:
        yield event, "\n".join(data)


def encode_event(payload: Mapping[str, Any] | str) -> bytes:
    """One ``data:`` event: a JSON object (UTF-8, not ASCII-escaped) or a literal such as ``[DONE]``."""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return b"data: " + text.encode("utf-8") + b"\n\n"
