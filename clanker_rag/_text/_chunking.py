"""Token-window chunking that keeps the original text.

A chunk is a window of ``chunk_size`` word tokens, the next one starting
``stride`` tokens later.  The chunk's text is the exact slice of the original
(never a re-joined or lowercased token string) with character offsets and
1-based line numbers.  A window's end snaps to the nearest paragraph break,
else sentence end, else line break within ``slack`` tokens of the nominal end,
so chunks rarely stop mid-sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._exceptions import ConfigError
from ._analysis import find_words, piece_offsets

__all__ = ["ChunkSpan", "Chunker"]

_LEADING_NONSPACE = re.compile(r"\S*")
_SENTENCE_END = frozenset(".!?。！？")
_SHARE_WORDS_ABOVE = 100_000


@dataclass(slots=True)
class ChunkSpan:
    """One chunk: ``text[start:end]``, its lines, its section label and raw words."""

    start: int
    end: int
    start_line: int
    end_line: int
    label: str | None
    words: list[str]


class _LineCounter:
    """Line number of an offset, counting from the last query's offset.

    Windows overlap, so the next chunk starts before the last one ended:
    counting back over that overlap (instead of again from the top) keeps a
    whole file's chunking linear in its size.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1

    def at(self, offset: int) -> int:
        if offset < self.pos:
            self.line -= self.text.count("\n", offset, self.pos)
        else:
            self.line += self.text.count("\n", self.pos, offset)
        self.pos = offset
        return self.line


def _boundary_rank(gap: str) -> int:
    """0 paragraph break, 1 sentence end, 2 line break, 3 none."""
    if "\n" in gap:
        return 0 if gap.count("\n") >= 2 else (1 if _SENTENCE_END.intersection(gap) else 2)
    if _SENTENCE_END.intersection(gap) and gap[-1:].isspace():
        return 1
    return 3


class Chunker:
    """Splits text (or given sections of it) into overlapping token windows.

    ``chunk_size=None`` keeps each text (or section) whole.  ``slack`` defaults
    to a tenth of ``chunk_size``.
    """

    def __init__(self, chunk_size: int | None = 180, stride: int | None = None, slack: int | None = None) -> None:
        if chunk_size is not None:
            if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
                raise ConfigError(f"chunk_size={chunk_size!r} is out of range: expected an integer >= 1 or None")
            if stride is None:
                stride = max(1, chunk_size // 2)
            if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= chunk_size:
                raise ConfigError(f"stride={stride!r} is out of range: expected an integer in [1, {chunk_size}]")
            if slack is None:
                slack = chunk_size // 10
            if isinstance(slack, bool) or not isinstance(slack, int) or not 0 <= slack <= chunk_size // 2:
                raise ConfigError(f"slack={slack!r} is out of range: expected an integer in [0, {chunk_size // 2}]")
        self.chunk_size = chunk_size
        self.stride = stride
        self.slack = slack or 0

    def settings(self) -> dict[str, int | None]:
        return {"chunk_size": self.chunk_size, "stride": self.stride, "slack": self.slack}

    def split(self, text: str, sections: Sequence[tuple[int, int, str | None]] | None = None) -> list[ChunkSpan]:
        if sections is None:
            sections = [(0, len(text), None)]
        lines = _LineCounter(text)
        out: list[ChunkSpan] = []
        for start, end, label in sections:
            if self.chunk_size is None:
                words = find_words(text if start == 0 and end == len(text) else text[start:end])
                if words or label:
                    out.append(self._span(lines, text, start, end, label, words))
            else:
                self._windows(out, lines, text, start, end, label)
        return out

    @staticmethod
    def _span(lines: _LineCounter, text: str, start: int, end: int, label: str | None, words: list[str]) -> ChunkSpan:
        first = lines.at(start)
        last = lines.at(max(start, end - 1)) if end > start else first
        return ChunkSpan(start, end, first, last, label, words)

    def _windows(
        self, out: list[ChunkSpan], lines: _LineCounter, text: str, sec_start: int, sec_end: int, label: str | None
    ) -> None:
        size = self.chunk_size
        stride = self.stride
        assert size is not None and stride is not None
        section = text[sec_start:sec_end]
        words = find_words(section)
        n = len(words)
        if n > _SHARE_WORDS_ABOVE:
            # One str per distinct word instead of per occurrence: a big file's
            # word objects would otherwise take about 8x its size.
            distinct: dict[str, str] = {}
            words = list(map(distinct.setdefault, words, words))
        if n == 0:
            if label:
                out.append(self._span(lines, text, sec_start, sec_end, label, []))
            return
        if n <= size:
            out.append(self._span(lines, text, sec_start, sec_end, label, words))
            return
        # offs[2i] is where the gap before word i starts, offs[2i + 1] the word.
        offs = piece_offsets(section, words)
        s = 0
        while True:
            e = s + size
            if e >= n:
                e = n
                end = sec_end
            else:
                e = self._snap(section, offs, s, e, n)
                gap = section[offs[2 * e] : offs[2 * e + 1]]
                end = sec_start + offs[2 * e] + _LEADING_NONSPACE.match(gap).end()  # type: ignore[union-attr]
            start = sec_start if s == 0 else sec_start + offs[2 * s + 1]
            out.append(self._span(lines, text, start, end, label, words[s:e]))
            if e >= n:
                return
            s = max(s + 1, min(s + stride, e))

    def _snap(self, section: str, offs: Sequence[int], s: int, e: int, n: int) -> int:
        slack = self.slack
        if slack == 0:
            return e
        best_rank, best_pos = 3, e
        low = max(s + 1, e - slack)
        high = min(n - 1, e + slack)
        # Walk outwards from the nominal end so the nearest boundary wins ties.
        for dist in range(0, slack + 1):
            for p in (e - dist, e + dist) if dist else (e,):
                if low <= p <= high:
                    rank = _boundary_rank(section[offs[2 * p] : offs[2 * p + 1]])
                    if rank < best_rank:
                        best_rank, best_pos = rank, p
                        if rank == 0:
                            return p
        return best_pos
