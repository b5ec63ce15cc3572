"""Lookup tables saved with an index: a term's impact at any chunk in one step.

Scoring a candidate chunk in full needs each query term's impact at that
chunk.  A list is sorted by chunk id, so a binary search finds it: about 17
comparisons of Python ints at 225k chunks.  A table indexed by chunk id
answers with one C-level subscript, but building one costs a pass over the
list, and cold queries (each term seen for the first time) pay that pass
again and again: at 225k chunks it was a quarter of their time.  So a save
writes tables for its long lists, those holding at least 1/``STORED_SHARE``
of the chunks (and ``STORED_MIN`` postings), and a load reads them in place
from the mapped data file like the rest of the index:

- a *slot table* for a list shorter than ``SLOT_LIMIT``: one uint16 per
  chunk, 1 + the chunk's position in the list (0 where the term is absent),
  so ``impacts[slots[c]]``, with the list's own impacts behind a 0.0 (one
  memcpy of the list when the table is first used), is the impact at chunk
  ``c``, 0.0 where absent: 2 bytes a chunk.  Each is saved compressed on its
  own (a raw deflate stream, zlib level ``LEVEL``) and inflated when first
  used: a table is mostly zeros (its list holds 1/32 to 1/3 of the chunks),
  so at 225k chunks the 410 tables take 18 MB instead of 184, and inflating
  one costs about 0.5 ms;
- a *dense table* for a longer list: one float32 impact per chunk (0.0 where
  absent): 4 bytes a chunk, saved as it is (its floats compress about 3x
  but would inflate in 3.6 ms each, and the 19 of them at 225k chunks serve
  the commonest terms).  In a big segment it is read in place, and a lookup
  verifies just the checksum blocks holding the chunks it asks for (all of
  them once the chunks asked for outnumber the blocks): at two million
  chunks a table spans about 500 blocks, and most searches read a few.

The values are the saved impacts themselves, so a table lookup adds exactly
what a binary search would.  Tables describe the index as saved: after an
add or a remove the statistics change, every impact is recomputed, and the
index stops using them (see ``_engine._lookups``).
"""

from __future__ import annotations

import sys
import zlib
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import pairwise
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, Union

from .._exceptions import IndexFormatError
from ._deflate import RAW_WBITS, deflate

__all__ = [
    "DENSE_SLOT_BYTES",
    "LEVEL",
    "SLOT_LIMIT",
    "STORED_MIN",
    "STORED_SHARE",
    "Built",
    "LookupTables",
    "PackedParts",
    "StoredTables",
    "TableCache",
    "TableParts",
    "build_table",
    "build_tables",
    "check_tables",
    "gather",
    "lookup",
    "pack_tables",
]

# Lists holding at least 1/STORED_SHARE of the chunks get a table: 2 bytes a
# chunk each, whatever the list's length, so the many lists just above the
# floor cost most of the bytes (about 800 tables at 1/64 on either benchmark
# corpus).  With the lists below the floor built at query time into the 16 MB
# budget beside saved tables (``_lookups``), 1/32 costs nothing against 1/64:
# at 225k chunks cold CPU per query 3.50 against 3.56 ms (medians of 9 fresh
# processes each, load 7-9), 499 against 550 MB resident, 545 against 711 MiB
# on disk; at 30k chunks 1.4 % fewer instructions (callgrind, 500 cold
# queries), 71 against 93 MiB.  1/16 cost 27 % of the cold CPU at 225k (37 %
# more instructions at 30k) for 442 MiB (bench/results/h28tables.md); 1/8, 40 %
# (bench/results/h28size.md).
STORED_SHARE = 32
# Short lists are cheap to search and to turn into a table at query time.
STORED_MIN = 256
# uint16 slots number positions 1..65535.
SLOT_LIMIT = 65_535
# zlib level of saved slot tables: level 1 takes 0.66 s for 184 MB of tables at 225k chunks
# (18.3 MB out), level 6 1.5 s (16.4 MB, and inflates slower: 0.8 ms a table against 0.54).
LEVEL = 1
_LITTLE = sys.byteorder == "little"
_ZERO_SLOT = array("f", [0.0])
_ZERO_SLOT16 = array("H", [0])
# What a table built at query time costs: 4 bytes a chunk (dense float32),
# about 90 bytes an entry with its float (a dict).
DENSE_SLOT_BYTES = 4
_DICT_ENTRY_BYTES = 90
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend

Ints = Union["array[int]", "memoryview[int]"]
Floats = Union["array[float]", "memoryview[float]"]
# Checks items a .. b - 1 of a part against its segment's block checksums.
Check = Callable[[int, int], None]


class ItemCheck(Protocol):
    """A part's block checks by item range, and by scattered items."""

    def __call__(self, a: int, b: int) -> None: ...

    def items(self, first: int, count: int, positions: Sequence[int]) -> None: ...


class LookupTables(NamedTuple):
    """The saved tables of an index of ``n_chunks`` chunks (see the module docstring).

    ``dense`` holds ``n_chunks`` impacts for each of ``dense_terms``; slot
    table ``i``, of term ``slot_terms[i]`` (term ids, both ascending), is
    ``slots[slot_spans[i]:slot_spans[i + 1]]`` compressed.  Term ``t``'s list
    is ``impacts[offsets[t]:offsets[t + 1]]`` (the postings' own).
    """

    n_chunks: int
    dense_terms: Ints
    dense: Floats
    slot_terms: Ints
    slots: Ints  # bytes
    impacts: Floats
    offsets: Ints
    slot_spans: Ints
    # A big segment's block checks of dense, slots, the impacts and the list offsets, by item.
    checks: tuple[ItemCheck, Check, Check, Check] | None = None


def _little(values: array[Any]) -> array[Any]:
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        values.byteswap()
    return values


def _pieces(offsets: Ints, n_chunks: int) -> Iterator[tuple[int, int, int]]:
    """``(term id, start, end)`` of each list that gets a table."""
    floor = max(STORED_MIN, -(-n_chunks // STORED_SHARE))
    for tid, (a, b) in enumerate(pairwise(offsets)):
        if b - a >= floor:
            yield tid, a, b


class TableParts(NamedTuple):
    """The tables built: the term ids and, per table, its items (little-endian)."""

    dense_terms: array[int]
    dense: list[array[float]]
    slot_terms: array[int]
    slots: list[array[int]]


def _each_table(offsets: Ints, chunks: Ints, impacts: Floats, n_chunks: int) -> Iterator[tuple[int, bool, array[Any]]]:
    """``(term id, dense, table)`` of each list that gets one, built one at a time (little-endian)."""
    chunk_view, impact_view = memoryview(chunks), memoryview(impacts)
    for tid, a, b in _pieces(offsets, n_chunks):
        docs = chunk_view[a:b]
        if b - a < SLOT_LIMIT:
            # calloc'd zeros, then one C-level store per posting.
            slots = _ZERO_SLOT16 * n_chunks  # repeats in C; array("H", bytes(...)) converts slot by slot
            _consume(map(slots.__setitem__, docs, range(1, b - a + 1)))
            yield tid, False, _little(slots)
        else:
            dense = _ZERO_SLOT * n_chunks
            _consume(map(dense.__setitem__, docs, impact_view[a:b]))
            yield tid, True, _little(dense)


def build_tables(offsets: Ints, chunks: Ints, impacts: Floats, n_chunks: int) -> TableParts:
    """The tables of the lists laid end to end in ``chunks``/``impacts`` (term
    ``t``'s is ``[offsets[t], offsets[t + 1])``) over ``n_chunks`` chunks."""
    parts = TableParts(array("i"), [], array("i"), [])
    for tid, dense, table in _each_table(offsets, chunks, impacts, n_chunks):
        (parts.dense_terms if dense else parts.slot_terms).append(tid)
        (parts.dense if dense else parts.slots).append(table)
    return parts


class PackedParts(NamedTuple):
    """What a save writes: :class:`TableParts` with each slot table compressed."""

    dense_terms: array[int]
    dense: list[array[float]]
    slot_terms: array[int]
    slots: list[bytes]


def pack_tables(offsets: Ints, chunks: Ints, impacts: Floats, n_chunks: int) -> PackedParts:
    """:func:`build_tables`, each slot table compressed as soon as it is built (so only one is
    held uncompressed: together they are 184 MB at 225k chunks)."""
    packed = PackedParts(array("i"), [], array("i"), [])
    for tid, dense, table in _each_table(offsets, chunks, impacts, n_chunks):
        if dense:
            packed.dense_terms.append(tid)
            packed.dense.append(table)
        else:
            packed.slot_terms.append(tid)
            packed.slots.append(deflate(memoryview(table).cast("B"), LEVEL))
    return packed


def check_tables(tables: LookupTables, n_terms: int, where: str) -> None:
    """The O(tables) consistency checks of a loaded index's tables."""
    n = tables.n_chunks
    dt, st, spans = tables.dense_terms, tables.slot_terms, tables.slot_spans
    if (
        len(tables.dense) != len(dt) * n
        or len(spans) != len(st) + 1
        or spans[0] != 0
        or spans[len(st)] != len(tables.slots)
        or any(b <= a for a, b in pairwise(spans))
        or len(tables.offsets) != n_terms + 1
        or any(b <= a for a, b in pairwise(dt))
        or any(b <= a for a, b in pairwise(st))
        or any(not 0 <= t < n_terms for t in [*dt[:1], *dt[-1:], *st[:1], *st[-1:]])  # ascending: the ends suffice
    ):
        raise IndexFormatError(f"{where}: lookup tables do not match the postings")


# (impacts, slots or None, verify or None): the term's impact at chunk c is
# impacts[slots[c]], or impacts[c] for a dense table; a dense table read in place
# from a big segment verifies the blocks holding the chunks it is asked for.
Table = tuple[Floats, Ints | None, Callable[[Sequence[int]], None] | None]


class StoredTables:
    """A loaded index's tables, found by term id; views of the data file."""

    def __init__(self, tables: LookupTables, where: str) -> None:
        self._tables = tables
        self._where = where
        self._dense = dict(zip(tables.dense_terms, range(len(tables.dense_terms))))
        self._slot = dict(zip(tables.slot_terms, range(len(tables.slot_terms))))
        self._views: dict[int, Table] = {}

    def table(self, tid: int, length: int) -> Table | None:
        """The term's table (its list is ``length`` long), or None when none was saved."""
        found = self._views.get(tid)
        if found is not None:
            return found
        t, n = self._tables, self._tables.n_chunks
        checks = t.checks
        i = self._dense.get(tid)
        if i is not None:
            verify = None if checks is None else partial(checks[0].items, i * n, n)
            found = (t.dense[i * n : (i + 1) * n], None, verify)
        else:
            i = self._slot.get(tid)
            if i is None:
                return None
            slots = self._inflate(i)
            found = (self._slot_impacts(tid, length), slots, None)
        self._views[tid] = found
        return found

    def known(self, tid: int) -> Table | None:
        """The term's table when :meth:`table` has already read it, else None (one dict lookup)."""
        return self._views.get(tid)

    def _inflate(self, i: int) -> Ints:
        """Slot table ``i``, inflated."""
        t = self._tables
        a, b, n = t.slot_spans[i], t.slot_spans[i + 1], t.n_chunks
        if t.checks is not None:
            t.checks[1](a, b)
        try:
            raw = zlib.decompress(t.slots[a:b], RAW_WBITS, 2 * n)  # sized at once: no copy as it grows
        except zlib.error as exc:
            raise IndexFormatError(f"{self._where}: lookup table {i} does not inflate ({exc})") from None
        if len(raw) != 2 * n:
            raise IndexFormatError(f"{self._where}: lookup table {i} does not inflate to {n} slots")
        if not _LITTLE:  # pragma: no cover - big-endian hosts
            swapped = array("H", raw)
            swapped.byteswap()
            return swapped
        return memoryview(raw).cast("H")

    def _slot_impacts(self, tid: int, length: int) -> Floats:
        """Term ``tid``'s impacts (``length`` of them, its list's own) copied behind a 0.0."""
        t, checks = self._tables, self._tables.checks
        if checks is not None:
            checks[3](tid, tid + 2)
        a, b = t.offsets[tid], t.offsets[tid + 1]
        if b - a != length:
            raise IndexFormatError(f"{self._where}: a lookup table does not match its posting list")
        if checks is not None:
            checks[2](a, b)
        padded = array("f", _ZERO_SLOT)
        padded.frombytes(memoryview(t.impacts[a:b]).cast("B"))
        return padded


def gather(values: Sequence[Any], positions: Sequence[int]) -> tuple[Any, ...]:
    """``values[p]`` for each of ``positions``, in one C-level call.

    ``map(values.__getitem__, positions)`` calls an array's or a memoryview's
    ``__getitem__`` through a method wrapper, which packs each position into an
    argument tuple: ``operator.itemgetter`` subscripts directly, 2-2.4x faster
    an item (26 against 62 ns over a memoryview of floats), the same values.
    """
    if len(positions) > 1:
        return itemgetter(*positions)(values)  # type: ignore[no-any-return]
    return (values[positions[0]],) if positions else ()


def lookup(table: Table, cands: Sequence[int]) -> Sequence[float]:
    """The impacts at ``cands`` (0.0 where the term is absent)."""
    imps, slots, verify = table
    if verify is not None:
        verify(cands)
    return gather(imps, cands if slots is None else gather(slots, cands))


# A table built at query time: a dense float32 array indexed by chunk id, or a
# {chunk id: impact} dict (0.0 where absent, through ``dict.get``).
Built = Union["array[float]", dict[int, float]]


def build_table(docs: Ints, imps: Floats, n_chunks: int, dense: bool) -> tuple[Built, int]:
    """A list's impacts by chunk id, and the table's size in bytes."""
    if dense:
        # float32 slots, 4 bytes each: a list of floats indexes about twice
        # as fast but costs 8 bytes a slot and 24 a posting, and is three
        # times slower to fill, so far fewer tables fit the budget and cold
        # queries spend their time rebuilding them.
        table = _ZERO_SLOT * n_chunks
        _consume(map(table.__setitem__, docs, imps))
        return table, n_chunks * DENSE_SLOT_BYTES
    return dict(zip(docs.tolist(), imps.tolist())), len(docs) * _DICT_ENTRY_BYTES


class TableCache:
    """Tables built at query time, by term id, least recently used first."""

    def __init__(self) -> None:
        # tid -> (impact generation it was built for, table, its size in bytes)
        self.entries: dict[int, tuple[int, Built, int]] = {}
        self.size = 0

    def get(self, tid: int, gen: int) -> Built | None:
        """The term's table for impact generation ``gen``, or None."""
        cached = self.entries.pop(tid, None)
        if cached is None:
            return None
        if cached[0] != gen:
            self.size -= cached[2]
            return None
        self.entries[tid] = cached  # now the most recently used
        return cached[1]

    def put(self, tid: int, gen: int, table: Built, size: int, budget: int) -> None:
        """Keep ``table``, dropping the least recently used past ``budget`` bytes (one always stays)."""
        entries = self.entries
        entries[tid] = (gen, table, size)
        self.size += size
        try:
            while self.size > budget and len(entries) > 1:
                self.size -= entries.pop(next(iter(entries)))[2]
        except (RuntimeError, KeyError, StopIteration):
            # Another thread searching at the same time changed the cache
            # under us: start it afresh rather than let the accounting drift.
            entries.clear()
            self.size = 0
