"""The index's on-disk format: what a save writes and a load reads, as typed values.

:mod:`._store` knows manifests, data files, checksums and atomic writes; this
module knows what goes in them.  :mod:`._writer` lays out a :class:`Snapshot`
(sources, chunk table, postings) as a segment and :func:`read` gives the
segments of a commit back, in the current format only (an older folder is
refused by ``_store.read_index``; ``clanker-rag upgrade`` converts it).

A segment is read in place.  Its data file is mapped (``mmap``) and the
postings, impacts, impact orders and per-term offsets are ``memoryview`` casts
of it, never decoded into Python objects: loading costs the manifest and a
few small copies, whatever the index size, and two processes that load the
same index share its pages.  Source texts stay in the data file until a hit
needs them.  The vocabulary is a :class:`TermDictionary`: the terms laid end
to end in UTF-8 with fixed-width offsets, plus their ids in sorted order, so
a term is found by binary search instead of a dict of every term built at
load.  Every part starts on an 8-byte boundary, so any cast is aligned.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, groupby, repeat
from operator import gt, le
from pathlib import Path
from typing import Any, NamedTuple, Union, cast

from .._exceptions import IndexFormatError
from . import _segments, _store
from ._impact_tables import LookupTables, check_tables
from ._offset_column import column_type, offset_type
from ._order_column import WideOrders, read_orders
from ._segments import BlockCheck, PartCheck, SegmentRecord
from ._stored import NameIndex, Offsets, Pread, SourceNames, SourceStore, compressed_reader, strings
from ._texts import BlockTexts
from ._tf_column import TfColumn, Tfs, extend_ints, tf_type

__all__ = [
    "ChunkBounds",
    "ChunkColumns",
    "Floats",
    "Ints",
    "NameIndex",
    "Opened",
    "PostingChecks",
    "Postings",
    "Segment",
    "Snapshot",
    "SourceColumns",
    "SourceNames",
    "SourceStore",
    "TermDictionary",
    "TermList",
    "copy_array",
    "open_segment",
    "read",
    "section_runs",
    "sections",
    "source_run",
]

# A packed array: an array of our own, or a cast of the mapped data file.
Ints = Union["array[int]", "memoryview[int]"]
Floats = Union["array[float]", "memoryview[float]"]
_LITTLE = sys.byteorder == "little"
# Reads of a big segment's term dictionary checked one by one before it is checked whole: at least
# this many, and READS_PER_BLOCK for each block it spans (see TermDictionary._checked_term).
CHECKED_READS = 4096
READS_PER_BLOCK = 4
# A batch of term look-ups at least 1/BULK_SHARE of a dictionary's size decodes it whole instead.
BULK_SHARE = 64


def copy_array(typecode: str, values: Ints | Floats) -> array[Any]:
    """A mutable copy of ``values`` (one memcpy when they are as wide as ``typecode``)."""
    out: array[Any] = array(typecode)
    extend_ints(out, values)
    return out


class Postings(NamedTuple):
    """Every posting list laid end to end, by term id.

    Term ``t`` owns ``chunks/tfs/impacts[offsets[t]:offsets[t + 1]]`` (chunk
    ids ascending) and, when its list is longer than ``ORDER_MIN``, the
    positions ``positions[order_offsets[t]:order_offsets[t + 1]]`` of that
    list by decreasing impact.  ``maxes`` is each list's largest impact
    (None with the orders in a segment that holds no impacts).
    """

    terms: Sequence[str] | TermList
    offsets: Ints
    chunks: Ints
    tfs: Tfs  # or a TfColumn: saved as uint8 with the counts of 255 or more apart
    impacts: Floats
    maxes: Floats | None
    order_offsets: Ints | None
    positions: Ints | None
    # A scored segment's saved lookup tables (see _impact_tables); None for a snapshot held in memory.
    tables: LookupTables | None = None
    # False: a segment after the first of its commit holds no impacts, maxes or
    # orders (its lists are scored with the whole commit's statistics at load).
    scored: bool = True
    # A big segment's block checks, run before a list or an order is first read.
    checks: PostingChecks | None = None
    # The orders of lists over 65,536 postings, apart (a loaded ``positions`` holds the rest, uint16).
    wide_orders: WideOrders | None = None


class PostingChecks(NamedTuple):
    """Block checks of a segment's posting parts, by item (see ``_segments.BlockCheck``)."""

    offsets: PartCheck
    chunks: PartCheck
    tfs: PartCheck
    impacts: PartCheck
    order_offsets: PartCheck
    positions: PartCheck
    maxes: PartCheck | None = None


class ChunkColumns(NamedTuple):
    """The chunk table as columns indexed by chunk id; ``source`` indexes :attr:`Snapshot.sources`."""

    source: Ints
    ordinal: Ints  # the chunk's number within its source
    start: Ints
    end: Ints
    start_line: Ints
    end_line: Ints
    length: Ints
    section: list[str | None]


class SourceColumns(NamedTuple):
    """The sources as columns.  A text is a ``str`` or its UTF-8 bytes (a
    view of a loaded data file); a loaded segment gives a :class:`SourceStore`
    for the texts and fingerprints, and :class:`SourceNames` for the names."""

    names: Sequence[str] | SourceNames
    texts: Sequence[str | bytes | memoryview] | SourceStore
    chars: Ints
    metadata: list[dict[str, Any] | None]  # None: no metadata
    fingerprints: Sequence[str] | SourceStore
    # Source i's chunks are ids first_chunks[i]..first_chunks[i + 1] - 1,
    # when every source's chunks are one run in source order (as saves lay
    # them out); None otherwise, or when the format does not say.
    first_chunks: Ints | None = None
    # The same offsets, checked as they are read (a loaded segment's; see _stored.Offsets).
    chunk_runs: Offsets | None = None


def source_run(src: SourceColumns, number: int) -> tuple[int, int]:
    """Source ``number``'s run of chunk ids, ``[first, last)`` (checked first, when loaded)."""
    if src.chunk_runs is not None:
        return src.chunk_runs.pair(number)
    firsts = src.first_chunks
    assert firsts is not None
    return firsts[number], firsts[number + 1]


def first_chunks(chunk_sources: Ints, n_sources: int) -> array[int] | None:
    """Where each source's run of chunks starts (``n + 1`` offsets), or None
    when the chunks of some source are not one run in source order."""
    if not all(map(le, chunk_sources[:-1], chunk_sources[1:])):
        return None
    return array("q", map(bisect_left, repeat(chunk_sources), range(n_sources + 1)))


class Snapshot(NamedTuple):
    """Everything an index folder holds, as a save writes it and a load reads it."""

    analyzer: dict[str, Any]
    bm25: dict[str, Any]
    chunking: dict[str, Any]
    sources: SourceColumns
    chunks: ChunkColumns
    postings: Postings
    total_length: int
    created_by: str = ""
    # The data file a load mapped, held open (None for a snapshot to save).
    data_file: _store.DataFile | None = None
    # A big segment's block checksums, checked as its parts are first read.
    blocks: BlockCheck | None = None
    # A loaded snapshot's chunk-bound checks (run before the bounds are first read).
    bounds: ChunkBounds | None = None
    # Chunk columns (by ChunkColumns name) whose blocks are checked when first read, not at load.
    unchecked_columns: dict[str, PartCheck] | None = None


class Segment(NamedTuple):
    """One segment of an opened index: its contents, the commit's record of it, its names."""

    snap: Snapshot
    record: SegmentRecord
    names: NameIndex | None


class Opened(NamedTuple):
    """An index as a load reads it: its segments in chunk order, the revision, the format version."""

    segments: list[Segment]
    revision: str
    version: int


class TermDictionary:
    """The saved vocabulary: term strings by id, and their ids in sorted order.

    ``find`` is a binary search over the sorted ids: no dict of every term
    is built at load, the caller keeps the few terms it looks up.  The
    first search decodes every ``fence``-th term into a list, so each search
    bisects that list in C and then decodes about 10 terms, not 20.  At
    600k terms a fence of 64 made that first search take 15-19 ms (a one-shot
    CLI search pays it); 1024 takes 1 ms, and 2,140 searches cost 45 ms in all
    against 48 ms with 64 and 67 ms with none.
    """

    __slots__ = ("_budget", "_checks", "_fence", "_fences", "_offsets", "_probed", "_sorted", "_text", "where")

    def __init__(
        self,
        text: memoryview,
        offsets: Ints,
        sorted_ids: Ints,
        fence: int = 1024,
        checks: tuple[PartCheck, PartCheck, PartCheck] | None = None,
        where: str = "index",
    ) -> None:
        self._fence = fence
        self._text = text
        self._offsets = offsets
        self._sorted = sorted_ids
        self._fences: list[str] | None = None
        # Checked reads' terms by rank: binary searches for different terms probe the same ranks
        # first (the middle, the quarters, ...), so a commit's hundreds of lookups share their top
        # levels instead of decoding and checking them again (dropped once checked whole).
        self._probed: dict[int, str] = {}
        # A big segment's block checks of the text, offsets and sorted ids, by item.
        self._checks = checks
        self._budget = CHECKED_READS
        if checks is not None:  # (a dictionary without block checks has no blocks to count)
            spanned = len(text) + len(offsets) * offsets.itemsize + len(sorted_ids) * sorted_ids.itemsize
            self._budget = max(CHECKED_READS, spanned // _segments.BLOCK_SIZE * READS_PER_BLOCK)
        self.where = where

    def __len__(self) -> int:
        return len(self._sorted)

    def term(self, tid: int) -> str:
        if self._checks is not None:
            return self._checked_term(tid)
        offsets = self._offsets
        return str(self._text[offsets[tid] : offsets[tid + 1]], "utf-8", "surrogatepass")

    def __getitem__(self, rank: int) -> str:
        """The ``rank``-th term in sorted order (what :func:`bisect_left` reads)."""
        checks = self._checks
        if checks is None:
            return self.term(self._sorted[rank])
        term = self._probed.get(rank)
        if term is None:
            checks[2](rank, rank + 1)
            term = self.term(self._sorted[rank])
            if self._checks is not None:  # (not checked whole by that read)
                self._probed[rank] = term
        return term

    def _checked_term(self, tid: int) -> str:
        """Term ``tid``, its blocks checked first: a commit looks up a note's hundred terms,
        whose binary searches read under half the dictionary's blocks (at 584k terms, 99 of
        229 for 54 terms), while the fences a search bisects lie in every block.  After
        ``self._budget`` such reads the dictionary is checked whole and read unchecked.  A read
        verifies at most one block not verified before, so reading checked never hashes more
        than the whole check would; what the budget bounds is the checked reads' own cost (a
        few microseconds each against about 12 for hashing a block), paid until it adds up to
        about what checking every block would (ski rental), so that a commit into a big index
        looks up its new terms without hashing the whole dictionary."""
        assert self._checks is not None
        self._budget -= 1
        if self._budget < 0:
            self._check_whole()
            return self.term(tid)
        text_check, offsets_check, _ = self._checks
        text, offsets = self._text, self._offsets
        if not 0 <= tid < len(self._sorted):
            raise IndexFormatError(f"{self.where}: the term dictionary names a term that does not exist")
        offsets_check(tid, tid + 2)
        a, b = offsets[tid], offsets[tid + 1]
        if not 0 <= a <= b <= len(text):
            raise IndexFormatError(f"{self.where}: the term dictionary's offsets do not match its text")
        text_check(a, b)
        return str(text[a:b], "utf-8", "surrogatepass")

    def _check_whole(self) -> None:
        # Checked whole (O(terms), once): a search decodes terms all over it.
        assert self._checks is not None
        for check, part in zip(self._checks, (self._text, self._offsets, self._sorted)):
            check(0, len(part))
        self._checks = None
        self._probed = {}

    def check(self, where: str) -> None:
        """The O(1) checks: offsets and ids agree in number and reach the text's end.

        Sortedness is not checked at load (it would decode every term): the
        checksum vouches for it, and an unsorted dictionary can only miss
        terms, never misplace a posting.
        """
        n = len(self._sorted)
        if len(self._offsets) != n + 1 or (n and (self._offsets[0] != 0 or self._offsets[n] != len(self._text))):
            raise IndexFormatError(f"{where}: the term dictionary's offsets do not match its text")

    def find(self, term: str) -> int | None:
        """The id of ``term``, or None."""
        n = len(self._sorted)
        if self._checks is not None:  # each read checked: no fences (see _checked_term)
            i = bisect_left(self, term)
            return self._sorted[i] if i < n and self[i] == term else None
        fences = self._fences
        if fences is None:
            fences = self._fences = list(map(self.__getitem__, range(0, n, self._fence)))
        lo = max(bisect_right(fences, term) - 1, 0) * self._fence
        i = bisect_left(self, term, lo, min(lo + self._fence, n))
        if i < n and self[i] == term:
            return self._sorted[i]
        return None

    def find_all(self, terms: Sequence[str]) -> list[int | None]:
        """The ids of ``terms`` (None: not saved), as :meth:`find` gives them one by one.

        A big batch (a tail segment's terms replayed at load: the 227k terms
        of a 20,000-source tail took 15 s CPU to find one by one) decodes the
        whole dictionary once instead and looks them up in a dict of it, both
        in C-level passes; the dict is dropped afterwards.
        """
        n = len(self._sorted)
        if len(terms) * BULK_SHARE < n:
            return list(map(self.find, terms))
        ids = dict(zip(self.all(), range(n)))
        if len(ids) != n:
            raise IndexFormatError(f"{self.where}: the term dictionary names a term twice")
        return list(map(ids.get, terms))

    def all(self) -> list[str]:
        """Every term by id, decoded in a few C-level passes (the dictionary checked whole first)."""
        if self._checks is not None:
            self._check_whole()
        return strings(self._text, self._offsets, self.where)


@dataclass(eq=False)
class TermList:
    """Term strings by id: a loaded :class:`TermDictionary`'s, then terms added since."""

    saved: TermDictionary
    added: list[str]

    def __len__(self) -> int:
        return len(self.saved) + len(self.added)

    def __getitem__(self, tid: int) -> str:
        n = len(self.saved)
        return self.saved.term(tid) if 0 <= tid < n else self.added[tid - n]

    def __iter__(self) -> Iterator[str]:
        # Every term: decoded together (a tail segment's, replayed at load, are tens of thousands).
        return chain(self.saved.all(), self.added)

    def append(self, term: str) -> None:
        self.added.append(term)

    def extend(self, terms: Iterable[str]) -> None:
        self.added.extend(terms)

    def find(self, term: str) -> int | None:
        return self.saved.find(term)

    def find_all(self, terms: Sequence[str]) -> list[int | None]:
        return self.saved.find_all(terms)


# -- reading -------------------------------------------------------------------


def read(folder: str | Path, *, private: bool = False) -> Opened:
    """Read and check ``folder``'s index (an older format is refused: see ``_store.read_index``);
    ``private``: its data files read into memory, not mapped (see ``_store.map_file``)."""
    path = Path(folder)
    where = str(path / _store.INDEX_FILE if path.is_dir() else path)
    for attempt in range(_READ_ATTEMPTS):
        manifest = _store.read_index(path)
        try:
            segments = _read_commit(manifest.body, path if path.is_dir() else path.parent, where, private)
        except FileNotFoundError as exc:
            # A writer replaced the commit and dropped its files between our reads: read the new one.
            if attempt + 1 < _READ_ATTEMPTS:
                continue
            raise IndexFormatError(f"{exc.filename}: the index's data file is missing") from None
        except IndexFormatError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise IndexFormatError(f"{where}: malformed index ({type(exc).__name__}: {exc})") from None
        return Opened(segments, manifest.revision, _store.FORMAT_VERSION)
    raise AssertionError("unreachable")  # pragma: no cover


# Each retry means a writer committed (and deleted the files of the commit we had read) while this
# reader was opening it, a few milliseconds; eight in a row needs eight commits in that window.
_READ_ATTEMPTS = 8


def _read_commit(body: dict[str, Any], folder: Path, where: str, private: bool = False) -> list[Segment]:
    records = body["segments"]
    if not isinstance(records, list) or not records:
        raise IndexFormatError(f"{where}: the commit names no segment")
    parsed = [_segments.SegmentRecord.from_json(value, where) for value in records]
    files = [rec.file for rec in parsed]
    if len(set(files)) != len(files):
        twice = next(name for name in files if files.count(name) > 1)
        raise IndexFormatError(f"{where}: the commit names data file {twice} twice: edited or damaged, not loaded")
    out = []
    for i, record in enumerate(parsed):
        seg = open_segment(folder, record, where, first=i == 0, lazy=i == 0, private=private)
        snap = seg.snap
        if snap.analyzer != body["analyzer"] or snap.bm25 != body["bm25"] or snap.chunking != body["chunking"]:
            raise IndexFormatError(f"{where}: segment {i} was written with other settings than its commit")
        out.append(seg)
    _check_sources_once(out, where)
    return out


# A tail name is looked up in the first segment by binary search (about 20 names decoded, 30-80 us)
# while that costs less than checking the first segment's sorted names' blocks whole for the
# C-level lookups of NameIndex.numbers_of (a few microseconds a name once checked).
_SEARCH_SHARE = 300


def _check_sources_once(segments: Sequence[Segment], where: str) -> None:
    """Refuse a commit in which a live source lies in two segments (or twice in one tail segment).

    Every save marks a source deleted in the segment that held it before it writes the source
    again, so this never happens in a commit a save wrote; a hand-edited, re-signed one would
    return each of its hits twice, and a later removal would leave a copy.  The tail's live names
    (decoded anyway when the load replays it) are looked up in the first segment, whose own names
    stay undecoded: one by one while the tail is small, else together, as bytes in C-level passes
    (``NameIndex.numbers_of``)."""
    if len(segments) < 2:
        return
    seen: set[str] = set()
    for seg in segments[1:]:
        gone = set(seg.record.deleted)
        for number, name in enumerate(seg.snap.sources.names):
            if number in gone:
                continue
            if name in seen:
                raise _twice(where, name)
            seen.add(name)
    first = segments[0]
    gone = set(first.record.deleted)
    names = first.names
    if names is None or not seen:
        return
    if len(seen) * _SEARCH_SHARE < len(names):
        hits = ((name, names.find(name)) for name in seen)
        twice = next((name for name, number in hits if number is not None and number not in gone), None)
    else:
        both = names.numbers_of(seen)
        twice = next(iter(sorted(name for name, number in both.items() if number not in gone)), None)
    if twice is not None:
        raise _twice(where, twice)


def _twice(where: str, name: str) -> IndexFormatError:
    return IndexFormatError(f"{where}: source {name!r} is live in two segments: the commit was edited or damaged")


def open_segment(
    folder: Path, record: SegmentRecord, where: str, *, first: bool = False, lazy: bool = False, private: bool = False
) -> Segment:
    """Map and check one segment a commit names (FileNotFoundError when it is gone).

    ``lazy`` (the first segment of a load, read by a knowledge base that checks
    each part before it first reads it) leaves the O(sources + chunks) checks
    for first use: see ``_check`` and ``_stored``."""
    opened = _segments.read_segment(folder, record, where, private=private)
    seg_where = str(opened.path)
    try:
        snap = _read_snapshot(opened.body, opened.data, seg_where, opened.file, opened.blocks, lazy)
        snap = snap._replace(data_file=opened.file)
        if first and not snap.postings.scored:
            raise IndexFormatError(f"{seg_where}: the first segment of a commit holds no impacts")
        snap = _check(snap, seg_where, lazy=lazy)
        if len(snap.chunks.source) != record.chunks or len(snap.sources.chars) != record.sources:
            raise IndexFormatError(f"{seg_where}: holds other counts than its commit record")
        src = opened.body["sources"]
        names = NameIndex(
            snap.sources.names,
            _view(src["sorted"], opened.data, "i", f"{seg_where}: sources.sorted"),
            f"{seg_where}: sources.sorted",
            None if opened.blocks is None else opened.blocks.part(src["sorted"], 4),
        )
    except IndexFormatError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise IndexFormatError(f"{seg_where}: malformed segment ({type(exc).__name__}: {exc})") from None
    if len(names) != record.sources or (record.deleted and snap.sources.first_chunks is None):
        raise IndexFormatError(f"{seg_where}: the source table does not match its commit record")
    return Segment(snap, record, names)


def _view(ref: Any, data: memoryview | None, typecode: str, where: str) -> Any:
    """A typed view of a range of the mapped data file (a copy on big-endian hosts)."""
    raw = _store.data_range(ref, data, where)
    size = array(typecode).itemsize
    if len(raw) % size or ref[0] % size:
        raise IndexFormatError(f"{where}: {len(raw)} bytes at {ref[0]} is not an aligned run of {size}-byte items")
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        return _store.unpack(ref, typecode, where, data)
    return cast(Any, raw).cast(typecode)


def _read_sources(
    body: dict[str, Any],
    data: memoryview | None,
    where: str,
    opened: _store.DataFile | None,
    blocks: BlockCheck | None,
    n_chunks: int,
    lazy: bool,
) -> SourceColumns:
    """A segment's sources; ``lazy``: their O(sources) checks wait for first use
    (see :mod:`._stored`), else they run now."""
    src = body["sources"]
    n = src["count"]
    types = body["types"]

    def code(name: str) -> str:  # uint32 when the values fit, else int64
        return column_type(types, f"sources.{name}", where)

    def column(name: str, typecode: str) -> Any:
        return _view(src[name], data, typecode, f"{where}: sources.{name}")

    def part(name: str, itemsize: int) -> PartCheck | None:
        return None if blocks is None else blocks.part(src[name], itemsize)

    def offsets(name: str, size: int, within: str = "") -> Offsets:
        where_ = f"{where}: sources.{name}" + within
        typecode = code(name)
        return Offsets(column(name, typecode), n, size, where_, part(name, array(typecode).itemsize), eager=not lazy)

    name_blob = _store.data_range(src["names"], data, f"{where}: sources.names")
    fp_blob = _store.data_range(src["fingerprints"], data, f"{where}: sources.fingerprints")
    text_blob = _store.data_range(src["texts"], data, f"{where}: sources.texts")
    pread = Pread(opened, src["texts"][0]) if opened is not None and hasattr(os, "pread") else None
    packed = src.get("text_blocks")
    unpack = None
    if packed is not None:
        starts = packed["starts"]
        tables = [packed["offsets"], starts]

        def block_tables() -> None:  # the block offsets and starts, checked before they are read
            if blocks is not None:
                for ref in tables:
                    blocks.check(ref[0], ref[0] + ref[1])

        if not lazy:
            block_tables()
        block_type = column_type(packed, "type", f"{where}: sources.text_blocks")
        unpack = BlockTexts(
            compressed_reader(text_blob, src["texts"][0], pread, blocks),
            _view(packed["offsets"], data, block_type, f"{where}: sources.text_blocks"),
            packed["bytes"],
            f"{where}: sources.texts",
            _view(starts, data, block_type, f"{where}: sources.text_blocks"),
            before=block_tables if lazy else None,
            # Inflated only as far as a read needs when a checksum vouches for the blocks.
            partial=blocks is not None or (data is not None and len(data) <= _store.VERIFY_AT_LOAD),
            raw=packed["raw"] is True,
        )
    names = SourceNames(
        name_blob,
        offsets("name_offsets", len(name_blob)),
        f"{where}: sources.names",
        None if blocks is None else blocks.part(src["names"]),
    )
    chars = column("chars", code("chars"))
    chars_check = part("chars", chars.itemsize)
    store = SourceStore(
        text_blob,
        offsets("text_offsets", len(text_blob) if packed is None else packed["bytes"]),
        fp_blob,
        offsets("fingerprint_offsets", len(fp_blob)),
        chars,
        f"{where}: sources",
        pread,
        None if blocks is None else (blocks, src["texts"][0], src["fingerprints"][0]),
        unpack,
        chars_check if lazy else None,
    )
    if not lazy and chars_check is not None:
        chars_check(0, len(chars))
    firsts = runs = None
    if src.get("first_chunks") is not None:
        runs = offsets("first_chunks", n_chunks, " (runs of chunks)")
        firsts = runs.values
    metadata: list[dict[str, Any] | None] = [None] * n
    for key, meta in src["metadata"].items():
        if not isinstance(meta, dict):
            raise IndexFormatError(f"{where}: a source record has the wrong types")
        metadata[int(key)] = meta
    if len(chars) != n:
        raise IndexFormatError(f"{where}: the source table is inconsistent")
    return SourceColumns(names, store, chars, metadata, store, firsts, runs)


def _chunk_columns(cols: dict[str, Any], view: Callable[[Any, str, str], Any], types: Any, where: str) -> ChunkColumns:
    """A segment's chunk columns, ``view(ref, typecode, name)`` mapping each; ``types``: the body's
    (the bounds as uint32 when they fit)."""
    source = view(cols["source"], "i", "chunks.source")
    return ChunkColumns(
        source,
        view(cols["index"], "i", "chunks.index"),
        view(cols["start"], column_type(types, "chunks.start", where), "chunks.start"),
        view(cols["end"], column_type(types, "chunks.end", where), "chunks.end"),
        view(cols["start_line"], "i", "chunks.start_line"),
        view(cols["end_line"], "i", "chunks.end_line"),
        view(cols["length"], "i", "chunks.length"),
        sections(cols["section"], len(source), where),
    )


def section_runs(labels: Sequence[str | None]) -> list[list[Any]]:
    """Chunk sections as runs ``[label, count]``: neighbouring chunks share their section (most
    often none), so a big segment's body stays small and a load decodes no JSON per chunk."""
    return [[label, sum(1 for _ in run)] for label, run in groupby(labels)]


def sections(saved: object, n: int, where: str) -> list[str | None]:
    """The section of each of a segment's ``n`` chunks, from their runs (see :func:`section_runs`),
    or from a label per chunk (how a segment saved them before runs: read as they are)."""
    if not isinstance(saved, list):
        raise IndexFormatError(f"{where}: the chunk sections do not match the chunks")
    if len(saved) == n and (not saved or not isinstance(saved[0], list)):
        return saved
    labels: list[str | None] = []
    for run in saved:
        if not (
            isinstance(run, list)
            and len(run) == 2
            and isinstance(run[0], (str, type(None)))
            and isinstance(run[1], int)
            and 0 < run[1] <= n - len(labels)
        ):
            raise IndexFormatError(f"{where}: the chunk sections do not match the chunks")
        labels += [run[0]] * run[1]
    if len(labels) != n:
        raise IndexFormatError(f"{where}: the chunk sections do not match the chunks")
    return labels


def _read_snapshot(
    body: dict[str, Any],
    data: memoryview | None,
    where: str,
    opened: _store.DataFile | None,
    blocks: BlockCheck | None = None,
    lazy: bool = False,
) -> Snapshot:
    """A segment read in place; ``lazy``: the sources' checks wait for first use."""
    cols = body["chunks"]

    def view(value: Any, typecode: str, name: str) -> Any:
        return _view(value, data, typecode, f"{where}: {name}")

    post = body["postings"]
    tables = body.get("tables")
    # A lazily checked segment's chunk columns but the lengths (which a load copies) are checked
    # when first read (see ChunkBounds); the lengths are read whole at load.
    later = {k: v for k, v in cols.items() if k not in ("section", "length")} if lazy and blocks is not None else {}
    scored = post.get("impacts") is not None
    if blocks is not None:  # the parts read whole at load: O(chunks), and a later segment's offsets
        parts = [*(v for k, v in cols.items() if k != "section" and k not in later)]
        if not scored:
            parts.append(post["offsets"])
        for ref in parts:
            blocks.check(ref[0], ref[0] + ref[1])
        # A scored segment's per-term parts (list and order offsets, largest impacts) are
        # checked as they are read (PackedLists, PackedOrders, the index's maxima): a load
        # reads nothing per term.  Here only their ends, which the cross-checks read.
        for ref in (post.get("maxes"), post["offsets"], body.get("orders", {}).get("offsets")):
            if ref is not None and ref[1]:
                blocks.check(ref[0], ref[0] + min(8, ref[1]))
                blocks.check(ref[0] + max(0, ref[1] - 8), ref[0] + ref[1])
        if tables is not None:
            for name in ("dense_terms", "slot_terms", "slot_spans"):
                blocks.check(tables[name][0], tables[name][0] + tables[name][1])
    chunks = _chunk_columns(cols, view, body["types"], where)
    d = body["dictionary"]
    dictionary = TermDictionary(
        _store.data_range(d["text"], data, f"{where}: dictionary.text"),
        view(d["offsets"], offset_type(d, where), "dictionary.offsets"),
        view(d["sorted"], "i", "dictionary.sorted"),
        checks=None
        if blocks is None
        else (blocks.part(d["text"]), blocks.part(d["offsets"], _size(d, where)), blocks.part(d["sorted"], 4)),
        where=f"{where}: dictionary",
    )
    dictionary.check(where)
    if not scored:  # a segment after the first of its commit: term frequencies only
        postings = Postings(
            TermList(dictionary, []),
            view(post["offsets"], offset_type(post, where), "postings.offsets"),
            view(post["chunks"], "i", "postings.chunks"),
            _tfs(post, view, blocks, where),
            array("f"),
            None,
            None,
            None,
            scored=False,
            checks=None
            if blocks is None
            else PostingChecks(
                blocks.part(post["offsets"], _size(post, where)),
                blocks.part(post["chunks"], 4),
                blocks.part(post["tfs"], array(tf_type(post, where)).itemsize),
                blocks.part([0, 0]),
                blocks.part([0, 0]),
                blocks.part([0, 0]),
            ),
        )
    else:
        orders = read_orders(body["orders"], view, where, None if blocks is None else blocks.part)
        postings = Postings(
            TermList(dictionary, []),
            view(post["offsets"], offset_type(post, where), "postings.offsets"),
            view(post["chunks"], "i", "postings.chunks"),
            _tfs(post, view, blocks, where),
            view(post["impacts"], "f", "postings.impacts"),
            view(post["maxes"], "f", "postings.maxes"),
            orders.offsets,
            orders.positions,
            _read_tables(tables, post, body["stats"]["chunks"], view, blocks, where),
            checks=None
            if blocks is None
            else PostingChecks(
                blocks.part(post["offsets"], _size(post, where)),
                blocks.part(post["chunks"], 4),
                blocks.part(post["tfs"], array(tf_type(post, where)).itemsize),
                blocks.part(post["impacts"], 4),
                blocks.part(body["orders"]["offsets"], _size(body["orders"], where)),
                blocks.part(orders.ref, orders.positions.itemsize),
                blocks.part(post["maxes"], 4),
            ),
            wide_orders=orders.wide,
        )
    return Snapshot(
        body["analyzer"],
        body["bm25"],
        body["chunking"],
        _read_sources(body, data, where, opened, blocks, len(chunks.source), lazy),
        chunks,
        postings,
        body["stats"]["total_length"],
        body.get("created_by", ""),
        blocks=blocks,
        unchecked_columns={_COLUMNS[k]: blocks.part(v) for k, v in later.items()} if blocks is not None else None,
    )


# The chunk columns' names in a segment body, and in ChunkColumns.
_COLUMNS = {
    "source": "source", "index": "ordinal", "start": "start", "end": "end", "start_line": "start_line",
    "end_line": "end_line", "length": "length",
}  # fmt: skip


def _tfs(post: dict[str, Any], view: Callable[[Any, str, str], Any], blocks: BlockCheck | None, where: str) -> Tfs:
    """A segment's term frequencies: a view of the column, or with its overflow table."""
    narrow = view(post["tfs"], tf_type(post, where), "postings.tfs")
    over = post.get("tf_overflow")
    if over is None:
        return cast(Tfs, narrow)
    if blocks is not None:  # O(overflows): checked at load
        for ref in (over["positions"], over["values"]):
            blocks.check(ref[0], ref[0] + ref[1])
    column = TfColumn(
        narrow,
        view(over["positions"], "q", "postings.tf_overflow.positions"),
        view(over["values"], "I", "postings.tf_overflow.values"),
        f"{where}: postings.tfs",
        None if blocks is None else blocks.part(post["tfs"], 1),
    )
    column.check_table()
    return column


def _size(section: dict[str, Any], where: str) -> int:
    """The item size of a section's saved ``offsets``."""
    return array(offset_type(section, where)).itemsize


def _read_tables(
    tables: Any,
    post: dict[str, Any],
    n_chunks: int,
    view: Callable[[Any, str, str], Any],
    blocks: BlockCheck | None,
    where: str,
) -> LookupTables:
    checks = None
    if blocks is not None:
        checks = (
            blocks.part(tables["dense"], 4),
            blocks.part(tables["slots"], 1),
            blocks.part(post["impacts"], 4),
            blocks.part(post["offsets"], _size(post, where)),
        )
    return LookupTables(
        n_chunks,
        view(tables["dense_terms"], "i", "tables.dense_terms"),
        view(tables["dense"], "f", "tables.dense"),
        view(tables["slot_terms"], "i", "tables.slot_terms"),
        view(tables["slots"], "B", "tables.slots"),
        view(post["impacts"], "f", "postings.impacts"),
        view(post["offsets"], offset_type(post, where), "postings.offsets"),
        view(tables["slot_spans"], "q", "tables.slot_spans"),
        checks,
    )


def _check(snap: Snapshot, where: str, *, lazy: bool = False) -> Snapshot:
    """The cross-checks that cost O(chunks + terms), never O(postings); returns ``snap``.

    ``lazy`` leaves the O(sources + chunks) ones for first use: the chunk bounds
    to ``snap.bounds`` (run before the chunk table's bounds are first read),
    the statistics to the index (checked when its total length is first read),
    the sources' offsets to the columns that read them (see ``_stored``).
    """
    cols = snap.chunks
    n = len(cols.source)
    if any(len(col) != n for col in cols[1:]):
        raise IndexFormatError(f"{where}: chunk tables have different lengths")
    chars = snap.sources.chars
    firsts = snap.sources.first_chunks
    if firsts is not None and len(firsts) != len(chars) + 1:
        raise IndexFormatError(f"{where}: sources.first_chunks do not match the chunk table")
    if (
        snap.sources.chunk_runs is None
        and firsts is not None
        and (firsts[0] != 0 or firsts[len(chars)] != n or any(map(gt, firsts[:-1], firsts[1:])))
    ):
        raise IndexFormatError(f"{where}: sources.first_chunks do not match the chunk table")
    bounds = ChunkBounds(cols, snap.sources, where, snap.unchecked_columns)
    if not lazy:
        bounds()
        if sum(cols.length) != snap.total_length:
            raise IndexFormatError(f"{where}: statistics do not match the chunk table")
    post = snap.postings
    n_terms = len(post.terms)
    offsets = post.offsets
    if (
        len(offsets) != n_terms + 1
        or offsets[0] != 0
        or not len(post.chunks) == len(post.tfs) == offsets[n_terms]
        or (post.scored and len(post.impacts) != offsets[n_terms])
        or (post.maxes is not None and len(post.maxes) != n_terms)
    ):
        raise IndexFormatError(f"{where}: postings tables have inconsistent lengths")
    if post.order_offsets is not None and post.positions is not None:
        oo = post.order_offsets
        wide = 0 if post.wide_orders is None else len(post.wide_orders.positions)
        if len(oo) != n_terms + 1 or oo[0] != 0 or oo[n_terms] != len(post.positions) + wide:
            raise IndexFormatError(f"{where}: impact orders have the wrong length")
    if post.tables is not None:
        if post.tables.n_chunks != n:
            raise IndexFormatError(f"{where}: lookup tables are for another number of chunks")
        check_tables(post.tables, n_terms, where)
    return snap._replace(bounds=bounds)


class ChunkBounds:
    """The chunk table's checks that cost O(chunks): the blocks of the columns not
    checked at load (a lazily checked segment's), and in Python, that every
    chunk's source exists and its text range lies inside that source's text.
    Each runs once, before what it vouches for is first read."""

    __slots__ = ("_cols", "_done", "_rows", "_sources", "_unchecked", "where")

    def __init__(
        self, cols: ChunkColumns, sources: SourceColumns, where: str, unchecked: dict[str, PartCheck] | None
    ) -> None:
        self._cols = cols
        self._sources = sources
        self._unchecked = dict(unchecked or {})
        self._done = False
        # (check by byte, item size) of each unchecked column, for one chunk's row.
        self._rows = [(check, getattr(cols, name).itemsize) for name, check in self._unchecked.items()]
        self.where = where

    def columns(self, *names: str) -> list[Ints]:
        """The columns ``names`` (of :class:`ChunkColumns`), their blocks checked."""
        for name in names:
            check = self._unchecked.pop(name, None)
            if check is not None:
                check(0, len(getattr(self._cols, name)) * getattr(self._cols, name).itemsize)
        return [getattr(self._cols, name) for name in names]

    def row(self, cid: int) -> tuple[int, int, int, int, int]:
        """Chunk ``cid``'s ordinal, start, end, start_line and end_line, read in place with the
        checks :meth:`__call__` runs on every chunk run on this one: its items' blocks, its
        source, its range inside that source's text.  A search shows a few chunks: it pays
        O(1) for each, not O(chunks) on its first hit."""
        cols = self._cols
        for check, size in self._rows:
            check(cid * size, (cid + 1) * size)
        start, end = cols.start[cid], cols.end[cid]
        if not self._done:
            source = cols.source[cid]
            chars = self._sources.chars
            if not 0 <= source < len(chars):
                raise IndexFormatError(f"{self.where}: a chunk points at a source that does not exist")
            texts = self._sources.texts
            limit = texts.char_count(source) if isinstance(texts, SourceStore) else chars[source]
            if not 0 <= start <= end <= limit:
                raise IndexFormatError(f"{self.where}: a chunk lies outside its source text")
        return cols.ordinal[cid], start, end, cols.start_line[cid], cols.end_line[cid]

    def __call__(self) -> None:
        if self._done:
            return
        where = self.where
        source, start, end = self.columns("source", "start", "end")
        texts = self._sources.texts
        if isinstance(texts, SourceStore):
            texts.check_chars()  # the lengths, block-checked
        chars = self._sources.chars
        n = len(source)
        if n and (min(source) < 0 or max(source) >= len(chars)):
            raise IndexFormatError(f"{where}: a chunk points at a source that does not exist")
        ends = map(chars.__getitem__, source)
        if n and (min(start) < 0 or any(map(gt, start, end)) or any(map(gt, end, ends))):
            raise IndexFormatError(f"{where}: a chunk lies outside its source text")
        self._done = True
