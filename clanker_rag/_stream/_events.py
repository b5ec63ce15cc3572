"""What one turn of the stream controller reports: the typed events.

:meth:`~clanker_rag.RagController.events` yields them in order; the hooks of
:class:`~clanker_rag._stream._settings.Hooks` receive the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._types import HitLike
from ._blocks import Block, Passage

__all__ = ["InjectEvent", "RetrieveEvent", "StreamEvent", "TextEvent"]


@dataclass(frozen=True, slots=True)
class TextEvent:
    """Text the model wrote that the user may see."""

    text: str


@dataclass(frozen=True, slots=True)
class RetrieveEvent:
    """A retrieval ran. ``kind`` is ``"tool"``, ``"question"``, ``"flare"`` or ``"entropy"``."""

    query: str
    hits: tuple[HitLike, ...]
    kind: str
    seconds: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class InjectEvent:
    """A block was added to the turn. ``tag`` is ``"result"`` or ``"context"``.

    ``block`` is the text the model reads; ``passages`` what it shows of each
    hit (:class:`~clanker_rag._stream._blocks.Block`), empty for a note.
    """

    block: str
    tag: str
    kind: str
    query: str
    passages: tuple[Passage, ...] = ()

    @classmethod
    def of(cls, block: Block, kind: str, query: str) -> InjectEvent:
        return cls(block.text, block.tag, kind, query, block.passages)


StreamEvent = TextEvent | RetrieveEvent | InjectEvent
