"""Section packing: the spans readers cut a text into, sized to the chunk budget.

Readers find where a document's parts start (headings, definitions,
records); the helpers here turn those starts into contiguous spans and split
a part longer than the chunk budget at paragraph starts, then line starts,
never inside an atomic span such as a fenced code block.  Word counts come
from :class:`WordCounts`, built once per document.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate, repeat
from operator import add, itemgetter

from ._base import Section

__all__ = [
    "WordCounts",
    "fits",
    "heading_sections",
    "line_starts",
    "outside",
    "pack",
    "release_counts",
    "spans",
    "word_counts",
]

_WORD = re.compile(r"\w+")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)*")
# ASCII byte -> 1 for a word character (what \w matches), 0 otherwise.
_WORD_BYTES = bytes(1 if chr(b).isalnum() or b == 0x5F else 0 for b in range(128)) + bytes(128)
_WORD_START = b"\x02"
_WORD_INSIDE = b"\x01"


class WordCounts:
    """Word counts of any span of one text, from work done once per text.

    Sectioning asks about many overlapping spans of the same text; counting
    each afresh made big files cost many passes over the same characters.

    Counts come from a mask with one byte per character: 2 where a word
    starts, 1 for the rest of a word, 0 between words.  The words in a span
    are then the 2s in it, plus one if it starts on a 1 (inside a word), and
    ``bytes.count`` finds those in C without making any word objects.
    """

    __slots__ = ("_mask", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        # "replace" turns each non-ASCII character into one b"?", so offsets
        # in the mask stay character offsets.
        raw = text.encode("ascii", "replace")
        words = raw.translate(_WORD_BYTES)
        if not text.isascii():
            # Even non-ASCII files are mostly ASCII: only the b"?" bytes need a
            # look, and the word regex itself says which are word characters.
            fixed = bytearray(words)
            q = raw.find(b"?")
            while q >= 0:
                if _WORD.match(text, q) is not None:
                    fixed[q] = 1
                q = raw.find(b"?", q + 1)
            words = bytes(fixed)
        # Bytewise "word here and not just before", on one big integer: read
        # little-endian, a left shift by 8 bits moves each byte one character
        # later, and no byte of the sum exceeds 2, so nothing carries over.
        bits = int.from_bytes(words, "little")
        starts = bits & ~(bits << 8)
        self._mask = (bits + starts).to_bytes(len(words), "little")

    def count(self, start: int, end: int) -> int:
        """``len(_WORD.findall(text, start, end))``: the words the span overlaps."""
        # Both terms are 0 for an empty or reversed span.
        return self._mask.count(_WORD_START, start, end) + self._mask.startswith(_WORD_INSIDE, start, end)

    def counts(self, starts: list[int], ends: list[int]) -> list[int]:
        """``[count(s, e) for s, e in zip(starts, ends)]``, looped in C.

        Each span is scanned whole, which is what a caller wants for spans
        that tile a stretch of text (its lines, its sections).
        """
        mask = self._mask
        return list(
            map(
                add,
                map(mask.count, repeat(_WORD_START), starts, ends),
                map(mask.startswith, repeat(_WORD_INSIDE), starts, ends),
            )
        )


_counts: WordCounts | None = None


def word_counts(text: str) -> WordCounts:
    """The word counts of ``text``, kept while its sections are worked out."""
    # One document is sectioned at a time; parse_text drops the counts after.
    global _counts
    counts = _counts
    if counts is None or counts.text is not text:
        counts = _counts = WordCounts(text)
    return counts


def fits(text: str, start: int, end: int, budget: int | None) -> bool:
    if budget is None:
        return True
    if end - start <= 2 * budget:
        return True
    counts = word_counts(text)
    # A span has at least the words of its head, and code and prose run well
    # over one word per 8 characters: counting a head that long settles most
    # big spans (a whole class) without scanning all of them.
    head = start + 8 * budget
    if head < end and counts.count(start, head) > budget:
        return False
    return counts.count(start, end) <= budget


def outside(positions: list[int], atomic: Sequence[tuple[int, int]]) -> list[int]:
    """The ``positions`` not strictly inside any ``atomic`` span."""
    if not atomic:
        return positions
    ordered = sorted(atomic)
    lows = [a for a, _ in ordered]
    # reach[k]: the furthest end among the first k + 1 spans, so a position
    # is inside one of the spans that open before it iff it is below that.
    reach = list(accumulate((b for _, b in ordered), max))
    out = []
    for pos in positions:
        k = bisect_left(lows, pos)
        if k == 0 or reach[k - 1] <= pos:
            out.append(pos)
    return out


def _paragraph_starts(
    text: str, start: int, end: int, atomic: Sequence[tuple[int, int]], *, code: bool = False
) -> list[int]:
    """Offsets in ``(start, end)`` where a paragraph starts, never inside ``atomic`` spans."""
    cuts = []
    for m in _BLANK_LINES.finditer(text, start, end):
        pos = m.end()
        if pos >= end:
            break
        # An indented paragraph continues the one above (literal blocks,
        # list continuations, directive bodies): keep them together.
        if not code and text[pos : pos + 1] in (" ", "\t"):
            continue
        cuts.append(pos)
    return outside(cuts, atomic)


def pack(
    text: str,
    start: int,
    end: int,
    label: str | None,
    budget: int | None,
    atomic: Sequence[tuple[int, int]] = (),
    *,
    code: bool = False,
) -> list[Section]:
    """Split ``[start, end)`` at paragraph starts so each piece fits ``budget`` tokens.

    A block between two paragraph starts that is too big on its own (a long
    list, a function without blank lines) is cut at line starts instead,
    except inside ``atomic`` spans (fenced code), which the chunker windows if
    it must.  ``code`` lets indented paragraphs start a piece.
    """
    if fits(text, start, end, budget):
        return [(start, end, label)]
    assert budget is not None
    counts = word_counts(text)
    cuts = _paragraph_starts(text, start, end, atomic, code=code)
    lows, highs = [start, *cuts], [*cuts, end]
    # Each paragraph with its word count, then each line of the ones too big.
    bounds: list[int] = []
    sizes: list[int] = []
    for prev, cut, n in zip(lows, highs, counts.counts(lows, highs), strict=True):
        if cut - prev > 2 * budget and n > budget:
            lines = outside(line_starts(text, prev, cut), atomic)
            if lines:
                sizes.extend(counts.counts([prev, *lines], [*lines, cut]))
                bounds.extend(lines)
                bounds.append(cut)
                continue
        sizes.append(n)
        bounds.append(cut)
    out: list[Section] = []
    piece_start = start
    prev = start
    total = 0
    for cut, n in zip(bounds, sizes, strict=True):
        if total and total + n > budget:
            out.append((piece_start, prev, label))
            piece_start = prev
            total = 0
        total += n
        prev = cut
    out.append((piece_start, end, label))
    return out


def line_starts(text: str, start: int, end: int) -> list[int]:
    """Offsets strictly inside ``(start, end)`` that begin a line."""
    # Line lengths from str.split and a running sum keep the loop in C; a
    # function without blank lines can run to thousands of lines.
    lines = text[start:end].split("\n")
    starts = list(accumulate(map(add, map(len, lines[:-1]), repeat(1)), initial=start))
    if starts[-1] >= end:
        starts.pop()
    return starts[1:]


def spans(starts: list[tuple[int, str | None]], length: int) -> list[tuple[int, int, str | None]]:
    """Turn sorted ``(offset, label)`` boundaries into contiguous spans over the text."""
    if not starts or starts[0][0] != 0:
        starts = [(0, None), *starts]
    ends = list(map(itemgetter(0), starts))
    ends[:-1] = ends[1:]
    ends[-1] = length
    return [(pos, end, label) for (pos, label), end in zip(starts, ends, strict=True) if end > pos]


def release_counts() -> None:
    """Drop the last document's word counts (do not keep it alive)."""
    global _counts
    _counts = None


def heading_sections(
    text: str, heads: list[tuple[int, int, str]], atomic: list[tuple[int, int]], budget: int | None
) -> list[Section]:
    """Spans under a heading path ("Guide > Install"), each packed to the budget.

    ``heads`` are ``(offset, level, title)``; a heading closes every open one
    of its level or deeper.
    """
    stack: list[tuple[int, str]] = []
    starts: list[tuple[int, str | None]] = []
    for pos, level, title in heads:
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        starts.append((pos, " > ".join(t for _, t in stack if t) or None))
    out: list[Section] = []
    for s, e, label in spans(starts, len(text)):
        out.extend(pack(text, s, e, label, budget, atomic))
    return out
