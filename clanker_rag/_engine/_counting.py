"""What a chunk counts: raw words and its section label, as term ids of the index.

The one definition of a chunk's term frequencies, shared by
:meth:`KnowledgeBase.add_text` and the parallel ingest's workers (which
number terms their own way) so both build the same index.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

from .._text._analysis import Analyzer
from .._text._chunking import ChunkSpan

__all__ = ["CountedChunk", "CountedTexts", "TermIds", "span_counts"]

# Cached raw tokens before the table is emptied: bounds its memory on a
# corpus with a huge vocabulary (identifiers, numbers).
_MAX_TERM_IDS = 2_000_000


class TermIds(dict[str, tuple[int, ...]]):
    """Raw token -> the ids of its terms in ``vocab`` (looking a term up there may create its id).

    Counting chunks straight into term ids skips hashing every word's term
    string twice (once to count it, once to find its postings list): the
    larger part of indexing time.
    """

    __slots__ = ("_analyzer", "_vocab")

    def __init__(self, analyzer: Analyzer, vocab: Mapping[str, int]) -> None:
        super().__init__()
        self._analyzer = analyzer
        self._vocab = vocab

    def __missing__(self, raw: str) -> tuple[int, ...]:
        if len(self) >= _MAX_TERM_IDS:
            self.clear()
        tids = tuple(map(self._vocab.__getitem__, self._analyzer.expand(raw)))
        self[raw] = tids
        return tids

    def count(self, words: Sequence[str]) -> Counter[int]:
        """Term-id frequencies of already split raw words."""
        if self._analyzer.custom is not None:
            terms = self._analyzer.count(words)
            return Counter(dict(zip(map(self._vocab.__getitem__, terms), terms.values())))
        return Counter(chain.from_iterable(map(self.__getitem__, words)))


def span_counts(span: ChunkSpan, term_ids: TermIds, analyzer: Analyzer, vocab: Mapping[str, int]) -> Counter[int]:
    """Term-id frequencies of one chunk: its words, then its section label's terms."""
    counts = term_ids.count(span.words)
    if span.label:
        counts.update(map(vocab.__getitem__, analyzer(span.label)))
    return counts


class CountedChunk(NamedTuple):
    """One chunk, counted: where it lies, its label, its distinct term ids and their frequencies."""

    start: int
    end: int
    start_line: int
    end_line: int
    label: str | None
    tids: Iterable[int]
    tfs: Collection[int]


@dataclass(frozen=True, slots=True)
class CountedTexts:
    """Several texts chunked and counted elsewhere (a bulk add's worker), laid end to end.

    ``term_ids(ids_of)`` gives the index's term id of every posting in
    order, given ``ids_of`` (distinct terms -> their ids, unknown ones
    created in the order given); call it only once the chunks are sure to
    be added, since it may create terms.
    """

    per_text: Sequence[int]  # chunks of each text
    bounds: array[int]  # start, end, start_line, end_line per chunk
    labels: Sequence[str | None]
    sizes: Collection[int]  # distinct terms per chunk
    tfs: array[int]  # per posting, chunk after chunk
    term_ids: Callable[[Callable[[list[str]], list[int]]], list[int]]
