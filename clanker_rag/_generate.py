"""The generation protocol shared by the controller and the backends.

A backend is any callable ``generate(prompt, stop)`` that returns an iterable of
pieces.  A piece is either a plain ``str`` or a :class:`Token`, which adds the
token's log-probability (for confidence-driven retrieval) and, on the last
piece, why generation stopped.  The async variant returns an async iterable.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "AsyncGenerateFn",
    "GenerateFn",
    "Piece",
    "RequestStats",
    "Token",
    "piece_parts",
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
