"""What the ingest needs of a knowledge base's index writer: :class:`PreparedWriter`.

A knowledge base hands its writer to the ingest and to ``add_texts(jobs=)``
(they never look inside the knowledge base): files already read and hashed
go in without being hashed again, chunks counted by worker processes without
being counted again, and the ingest asks before its first save whether that
save would replace another index, and after an interrupt whether the index
in memory was left whole; it commits its checkpoints through the writer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from .._text._analysis import Analyzer
from .._text._chunking import Chunker
from .._types import Sections, StrPath
from ._counting import CountedChunk, CountedTexts

__all__ = ["Counted", "PreparedWriter", "TextItem"]

Counted = Callable[[Mapping[str, int]], Iterable[CountedChunk]]
"""``counted(vocab)``: a text's chunks, chunked and counted elsewhere, with term ids of ``vocab``."""
TextItem = tuple[str, str, "Mapping[str, Any] | None"]
"""``(text, source, metadata)``: one item of a bulk add."""


class PreparedWriter(Protocol):
    """The index writer of a knowledge base, as the ingest and the bulk add use it."""

    @property
    def analyzer(self) -> Analyzer: ...

    @property
    def chunker(self) -> Chunker: ...

    def takes_prepared(self) -> bool:
        """Whether :meth:`add_prepared` indexes what the knowledge base's ``add_text`` would
        (not when ``add_text`` is overridden or wrapped: the ingest then calls it for every file)."""
        ...

    def add_prepared(
        self,
        text: str,
        source: str,
        metadata: Mapping[str, Any] | None,
        sections: Sections | None,
        *,
        content: str | None,
        counted: Counted | None = None,
    ) -> int:
        """``add_text`` for a file already read: ``content`` is a hash of the bytes the text was
        read from (which ``metadata`` also records; the change check uses it instead of hashing the
        text again), ``counted`` the chunks when counted elsewhere: exactly what ``add_text``
        computes for the same text and sections."""
        ...

    def add_counted(self, items: Sequence[TextItem], counted: CountedTexts) -> int | None:
        """``items``, all new sources, as ``counted`` chunks and counts them, all at once; the chunks
        added, or None (nothing changed) when some item is not a new source ``add_text`` would take."""
        ...

    def is_intact(self) -> bool:
        """Whether every change so far ran to its end (False once one was stopped midway: a save refuses)."""
        ...

    def would_replace(self, path: StrPath) -> bool:
        """Whether folder ``path`` holds an index this knowledge base was not loaded from or saved to."""
        ...

    def commit(self, path: StrPath, *, overwrite: bool, merge: bool = True) -> Path:
        """Save to folder ``path`` as ``KnowledgeBase.save`` does (``overwrite``: even over an index
        this knowledge base was not loaded from or saved to; ``merge=False``: the changes as a new
        segment, whatever the merge policy says, as an ingest's checkpoints are written)."""
        ...
