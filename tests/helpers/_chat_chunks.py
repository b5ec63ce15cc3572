"""Scripted OpenAI-style chat chunks for the native tool-call tests: text answers and fragmented tool calls."""

from __future__ import annotations

from typing import Any

CLIENT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "up-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _split(text: str, sizes: list[int]) -> list[str]:
    parts, pos = [], 0
    for size in sizes:
        if pos >= len(text):
            break
        parts.append(text[pos : pos + size])
        pos += size
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def tool_call_chunks(calls: list[tuple[str, str, str]], sizes: list[int], text: str = "") -> list[dict[str, Any]]:
    """A tool-calling answer: role, optional text, then each call's id and name, then fragments of its arguments."""
    out = [_chunk({"role": "assistant", "content": None})]
    if text:
        out.append(_chunk({"content": text}))
    for index, (call_id, name, arguments) in enumerate(calls):
        out.append(
            _chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": {"name": name}}]})
        )
        for part in _split(arguments, sizes):
            out.append(_chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}))
    out.append(_chunk({}, "tool_calls"))
    out.append(_usage("up-1", 10, 5))
    return out


def text_chunks(*pieces: str) -> list[dict[str, Any]]:
    out = [_chunk({"role": "assistant", "content": ""})]
    out += [_chunk({"content": piece}) for piece in pieces]
    out.append(_chunk({}, "stop"))
    out.append(_usage("up-2", 30, 7))
    return out


def _usage(chunk_id: str, prompt: int, completion: int) -> dict[str, Any]:
    """The last chunk of a stream asked for with usage: no choices, the token counts."""
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {"id": chunk_id, "object": "chat.completion.chunk", "choices": [], "usage": usage}
