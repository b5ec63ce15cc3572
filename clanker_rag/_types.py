"""Small shared types: the search hit and the ``Retriever`` protocol.

The stream controller, the proxy and the rerankers depend on these, never on
``KnowledgeBase`` itself, so any backend that returns hit-like objects can
stand in for the built-in index.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Hit", "HitLike", "Retriever", "metadata_matches", "source_matches"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved chunk.

    ``text`` is the exact slice ``document[start:end]`` of the original text;
    ``start_line`` and ``end_line`` are 1-based and inclusive.  ``section`` is
    the heading path or code symbol the chunk sits under, when known.
    """

    text: str
    source: str
    score: float
    metadata: Mapping[str, Any] = field(default_factory=dict)
    chunk_index: int = 0
    start: int = 0
    end: int = 0
    start_line: int = 1
    end_line: int = 1
    section: str | None = None
    chunk_id: int = -1

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape used by ``clanker-rag search --json``."""
        return {
            "source": self.source,
            "score": self.score,
            "text": self.text,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "start": self.start,
            "end": self.end,
            "chunk_index": self.chunk_index,
            "section": self.section,
            "metadata": dict(self.metadata),
        }


@runtime_checkable
class HitLike(Protocol):
    """What the controller needs of a hit: its text, where it came from, its score."""

    @property
    def text(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def score(self) -> float: ...


@runtime_checkable
class Retriever(Protocol):
    """Anything that can answer ``search(query, k)`` with ranked hits."""

    def search(self, query: str, k: int = 10) -> Sequence[HitLike]: ...


def source_matches(name: str, pattern: str | None) -> bool:
    """The ``source=`` filter: a glob when ``pattern`` has a wildcard, else a prefix."""
    if pattern is None:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return name.startswith(pattern)


_MISSING = object()


def metadata_matches(metadata: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """The ``where=`` filter: every key equals its value (a list value: any of them)."""
    if not where:
        return True
    for key, want in where.items():
        have = metadata.get(key, _MISSING)
        if isinstance(want, (list, tuple, set, frozenset)):
            if have not in want:
                return False
        elif have != want:
            return False
    return True
