"""Small shared types: the search hit, the ``Retriever`` protocol and what a knowledge base offers.

The stream controller, the proxy and the rerankers depend on these, never on
``KnowledgeBase`` itself, so any backend that returns hit-like objects can
stand in for the built-in index.  :class:`KnowledgeBaseLike` names what one
knowledge base and a sharded one both offer (the CLI reads either through
it); :class:`Sources`, its part an ingest changes, is what the ingest takes.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

if TYPE_CHECKING:  # (value types of the layers above, named only in annotations)
    from ._engine._collection import CollectionStats
    from ._engine._scoring import Explanation
    from ._ingest._report import IngestReport
    from ._text._analysis import Analyzer

__all__ = [
    "Hit",
    "HitLike",
    "KnowledgeBaseLike",
    "Retriever",
    "Sections",
    "Sources",
    "StrPath",
    "metadata_matches",
    "glob_matches",
    "has_wildcard",
    "source_matches",
]

StrPath = Union[str, "os.PathLike[str]"]
Sections = Sequence[tuple[int, int, str | None]]
"""``(start, end, label)`` spans of a text, chunked apart (see ``KnowledgeBase.add_text``)."""


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


class Sources(Protocol):
    """A knowledge base's sources by name, each added whole, replaced, removed, and saved: what an ingest changes."""

    def __len__(self) -> int: ...

    def sources(self) -> list[str]: ...

    def source_metadata(self, source: str) -> dict[str, Any] | None: ...

    def add_text(
        self, text: str, source: str, metadata: Mapping[str, Any] | None = None, *, sections: Sections | None = None
    ) -> int:
        """Index ``text`` under ``source``, replacing what that source held; the chunks added
        (0 when the same text and metadata were already indexed under ``source``)."""
        ...

    def remove(self, source: str) -> int: ...

    def save(self, path: StrPath | None = None) -> Path: ...


@runtime_checkable
class KnowledgeBaseLike(Sources, Retriever, Protocol):
    """What a knowledge base offers, one (``KnowledgeBase``) or sharded (``ShardedKnowledgeBase``):
    its sources and chunks, search, explanations and statistics, adds, removals, ingests and saves.

    ``isinstance(x, KnowledgeBaseLike)`` tells a knowledge base from a plain
    :class:`Retriever` (what the web pages browse only on the former)."""

    @property
    def path(self) -> Path | None: ...

    @property
    def analyzer(self) -> Analyzer:
        """What turns a text (or a query) into its terms."""
        ...

    def __contains__(self, source: object) -> bool: ...

    def source_count(self) -> int:
        """How many sources the index holds (without listing them)."""
        ...

    def iter_sources(self) -> Iterator[str]:
        """Every source name, sorted, one at a time (a sharded index fetches them page by page)."""
        ...

    def source_text(self, source: str) -> str | None: ...

    def chunks(self, source: str) -> Iterable[Hit]: ...

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        source: str | None = None,
        where: Mapping[str, Any] | None = None,
        feedback: bool = False,
    ) -> list[Hit]: ...

    def __call__(self, query: str, k: int = 10) -> list[Hit]: ...

    def explain(self, query: str, hit: Hit, *, feedback: bool = False) -> Explanation: ...

    def collection_stats(self, terms: Iterable[str]) -> CollectionStats:
        """Chunk count, summed length and the document frequency of ``terms`` (what BM25 weighs by)."""
        ...

    def add_texts(self, items: Iterable[tuple[str, str] | tuple[str, str, Mapping[str, Any] | None]]) -> int: ...

    def ingest(self, path: StrPath | Sequence[StrPath], **options: object) -> IngestReport:
        """Ingest files and folders (the options: ``IngestOptions``'s fields)."""
        ...


def glob_matches(name: str, pattern: str) -> bool:
    """Whether the source name ``name`` matches the glob ``pattern``: the one glob of
    ``search --filter``, ``sources GLOB`` and ``ingest --include``.

    ``*``, ``?`` and ``[...]`` match across folders (``docs/*.rst`` selects
    ``docs/a.rst`` and ``docs/api/b.rst``), and ``**/`` may also match no
    folder (``**/*.py`` selects ``setup.py``).  Case counts.
    """
    if fnmatch.fnmatchcase(name, pattern):
        return True
    return "**/" in pattern and fnmatch.fnmatchcase(name, pattern.replace("**/", ""))


def has_wildcard(pattern: str) -> bool:
    """Whether ``pattern`` is a glob rather than a plain name or prefix."""
    return any(c in pattern for c in "*?[")


def source_matches(name: str, pattern: str | None) -> bool:
    """The ``source=`` filter: a glob (:func:`glob_matches`) when ``pattern`` has a wildcard, else a prefix."""
    if pattern is None:
        return True
    if has_wildcard(pattern):
        return glob_matches(name, pattern)
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
