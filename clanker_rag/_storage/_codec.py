"""The index's on-disk format: what a save writes and a load reads, as typed values.

:mod:`._store` knows manifests, data files, checksums and atomic writes; this
module knows what goes in them.  :func:`write` lays out a :class:`Snapshot`
(sources, chunk table, postings) and :func:`read` gives one back, for every
format version (1 to 4 are read, 5 is written).

Format 3 is read in place.  The data file is mapped (``mmap``) and the
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
from itertools import accumulate, pairwise, repeat
from operator import gt, le
from pathlib import Path
from typing import Any, NamedTuple, Union, cast

from .._exceptions import IndexFormatError
from . import _segments, _store
from ._impact_tables import LookupTables, check_tables
from ._order_column import WideOrders, read_orders
from ._segments import BlockCheck, PartCheck, SegmentRecord
from ._texts import BlockTexts
from ._tf_column import extend_ints, tf_type

__all__ = [
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
]

# A packed array: an array of our own, or a cast of the mapped data file.
Ints = Union["array[int]", "memoryview[int]"]
Floats = Union["array[float]", "memoryview[float]"]
_LITTLE = sys.byteorder == "little"


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
    list by decreasing impact.  ``maxes`` is each list's largest impact;
    format 1 may lack it and the orders (None: computed on first use).
    """

    terms: Sequence[str] | TermList
    offsets: Ints
    chunks: Ints
    tfs: Ints
    impacts: Floats
    maxes: Floats | None
    order_offsets: Ints | None
    positions: Ints | None
    # Format 3 since 0.9 (absent in older files): see _tables.
    tables: LookupTables | None = None
    # False: a format 4 segment after the first holds no impacts, maxes or
    # orders (its lists are scored with the whole commit's statistics at load).
    scored: bool = True
    # A big segment's block checks, run before a list or an order is first read.
    checks: PostingChecks | None = None
    # Format 6: the orders of lists over 65,536 postings, apart (``positions`` holds the rest, uint16).
    wide_orders: WideOrders | None = None


class PostingChecks(NamedTuple):
    """Block checks of a segment's posting parts, by item (see ``_segments.BlockCheck``)."""

    offsets: PartCheck
    chunks: PartCheck
    tfs: PartCheck
    impacts: PartCheck
    order_offsets: PartCheck
    positions: PartCheck


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


class _Pread:
    """Reads a range of the data file with ``os.pread`` instead of through the mapping.

    A text shown in a hit is a few hundred bytes, but touching it through the
    mapping makes the kernel map the pages around it too (fault-around, 64 KB
    by default): over many hits that is most of the resident set.  The file
    is kept open while this object lives.
    """

    __slots__ = ("__weakref__", "_file", "base")

    def __init__(self, opened: _store.DataFile, base: int) -> None:
        # The descriptor the load mapped the file with (not the path opened
        # again): a save may have replaced and deleted the path since, and
        # this one, like the mapping, keeps reading the file loaded.
        self._file = opened
        self.base = base

    def __call__(self, offset: int, length: int) -> bytes:
        return self.absolute(self.base + offset, length)

    def absolute(self, offset: int, length: int) -> bytes:
        data = os.pread(self._file.fd, length, offset)
        if len(data) != length:
            raise IndexFormatError(f"{self._file.path}: truncated since it was loaded")
        return data


class SourceStore:
    """Source texts and fingerprints still in the data file, decoded on demand
    (UTF-8, back to back, with ``n + 1`` offsets each)."""

    __slots__ = ("_blocks", "_fp_offsets", "_fps", "_offsets", "_pread", "_texts", "_unpack", "chars", "where")

    def __init__(
        self,
        texts: memoryview,
        offsets: Ints,
        fps: memoryview,
        fp_offsets: Ints,
        chars: Ints,
        where: str,
        pread: _Pread | None = None,
        blocks: tuple[BlockCheck, int, int] | None = None,
        unpack: BlockTexts | None = None,
    ) -> None:
        # (block checks, where the texts and the fingerprints start in the file)
        self._blocks = blocks
        self._unpack = unpack  # compressed texts (format 4): ranges decompressed from their blocks
        self._texts = texts
        self._offsets = offsets
        self._fps = fps
        self._fp_offsets = fp_offsets
        self.chars = chars
        self.where = where
        self._pread = pread

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def raw(self, i: int) -> bytes | memoryview:
        return self._bytes(self._offsets[i], self._offsets[i + 1])

    def span(self, i: int, start: int, end: int) -> str:
        """Characters ``start .. end - 1`` of source ``i``'s text.

        A text as long in bytes as in characters is ASCII, so its characters
        are its bytes and only their range is read (and decompressed): a hit
        in a long file costs its chunk, not the file.  Any other text is
        decoded whole.
        """
        a, b = self._offsets[i], self._offsets[i + 1]
        if b - a != self.chars[i] or not 0 <= start <= end <= b - a:
            return self.text(i)[start:end]
        try:
            text = str(self._bytes(a + start, a + end), "utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"{self.where}: a source text is not valid UTF-8 ({exc.reason})") from None
        if len(text) != end - start:
            raise IndexFormatError(f"{self.where}: a source text is not the ASCII its saved length says")
        return text

    def _bytes(self, a: int, b: int) -> bytes | memoryview:
        if self._unpack is not None:
            return self._unpack(a, b)
        blocks, pread = self._blocks, self._pread
        if blocks is not None:
            blocks[0].check(blocks[1] + a, blocks[1] + b, None if pread is None else pread.absolute)
        if pread is not None:
            return pread(a, b - a)
        return self._texts[a:b]

    def text(self, i: int) -> str:
        """Source ``i``'s text, checked against its saved length in characters."""
        try:
            text = str(self.raw(i), "utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"{self.where}: a source text is not valid UTF-8 ({exc.reason})") from None
        if len(text) != self.chars[i]:
            raise IndexFormatError(f"{self.where}: a source text is {len(text)} characters, not {self.chars[i]}")
        return text

    def fingerprint(self, i: int) -> str:
        a, b = self._fp_offsets[i], self._fp_offsets[i + 1]
        if self._blocks is not None:
            self._blocks[0].check(self._blocks[2] + a, self._blocks[2] + b)
        return str(self._fps[a:b], "utf-8", "surrogatepass")


class SourceNames:
    """Source names still in the data file (UTF-8, back to back, with ``n + 1``
    offsets), decoded one by one on demand or all at once.

    A big index has hundreds of thousands of names and a search shows a few:
    decoding them all at load was a tenth of a second and megabytes of
    strings.  A name that is not valid UTF-8 fails when it is decoded.
    """

    __slots__ = ("_blob", "_check", "_offsets", "where")

    def __init__(self, blob: memoryview, offsets: Ints, where: str, check: PartCheck | None = None) -> None:
        self._blob = blob
        self._offsets = offsets
        self.where = where
        self._check = check  # a big segment's block checks of the names, by byte

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> str:
        if not 0 <= i < len(self):
            raise IndexError(f"source {i} does not exist")
        a, b = self._offsets[i], self._offsets[i + 1]
        if self._check is not None:
            self._check(a, b)
        try:
            return str(self._blob[a:b], "utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"{self.where}: not valid UTF-8 ({exc})") from None

    def __iter__(self) -> Iterator[str]:
        if self._check is not None:
            self._check(0, len(self._blob))
        return iter(_strings(self._blob, self._offsets, self.where))


class SourceColumns(NamedTuple):
    """The sources as columns.  A text is a ``str`` or its UTF-8 bytes (a
    view of a loaded data file); a loaded format 3 index gives a :class:`SourceStore`
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
    # Format 4: the segment's block checksums, checked as its parts are first read.
    blocks: BlockCheck | None = None


class NameIndex:
    """A segment's source numbers by name: ``find`` is a binary search that decodes about 18 names."""

    __slots__ = ("_names", "_sorted")

    def __init__(self, names: Sequence[str] | SourceNames, sorted_numbers: Ints) -> None:
        self._names = names
        self._sorted = sorted_numbers

    def __len__(self) -> int:
        return len(self._sorted)

    def __getitem__(self, rank: int) -> str:
        return self._names[self._sorted[rank]]

    def find(self, name: str) -> int | None:
        i = bisect_left(self, name)
        if i < len(self) and self[i] == name:
            return self._sorted[i]
        return None


class Segment(NamedTuple):
    """One segment of an opened index: its contents, the commit's record of it, its names."""

    snap: Snapshot
    record: SegmentRecord | None  # None: a format 1-3 index, one segment without a record
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

    __slots__ = ("_checks", "_fence", "_fences", "_offsets", "_sorted", "_text")

    def __init__(
        self,
        text: memoryview,
        offsets: Ints,
        sorted_ids: Ints,
        fence: int = 1024,
        checks: tuple[PartCheck, PartCheck, PartCheck] | None = None,
    ) -> None:
        self._fence = fence
        self._text = text
        self._offsets = offsets
        self._sorted = sorted_ids
        self._fences: list[str] | None = None
        # A big segment's block checks of the text, offsets and sorted ids, by item.
        self._checks = checks

    def __len__(self) -> int:
        return len(self._sorted)

    def term(self, tid: int) -> str:
        if self._checks is not None:
            self._check_whole()
        offsets = self._offsets
        return str(self._text[offsets[tid] : offsets[tid + 1]], "utf-8", "surrogatepass")

    def __getitem__(self, rank: int) -> str:
        """The ``rank``-th term in sorted order (what :func:`bisect_left` reads)."""
        return self.term(self._sorted[rank])

    def _check_whole(self) -> None:
        # Checked whole on first use (O(terms), once): a search decodes terms all over it.
        assert self._checks is not None
        for check, part in zip(self._checks, (self._text, self._offsets, self._sorted)):
            check(0, len(part))
        self._checks = None

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
        fences = self._fences
        if fences is None:
            fences = self._fences = list(map(self.__getitem__, range(0, n, self._fence)))
        lo = max(bisect_right(fences, term) - 1, 0) * self._fence
        i = bisect_left(self, term, lo, min(lo + self._fence, n))
        if i < n and self[i] == term:
            return self._sorted[i]
        return None


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
        return map(self.__getitem__, range(len(self)))

    def append(self, term: str) -> None:
        self.added.append(term)

    def extend(self, terms: Iterable[str]) -> None:
        self.added.extend(terms)

    def find(self, term: str) -> int | None:
        return self.saved.find(term)


# -- reading -------------------------------------------------------------------


def read(folder: str | Path) -> Opened:
    """Read and check ``folder``'s index (any format version)."""
    path = Path(folder)
    where = str(path / _store.INDEX_FILE if path.is_dir() else path)
    for attempt in range(_READ_ATTEMPTS):
        manifest = _store.read_index(path)
        try:
            if manifest.version >= 4:
                try:
                    return Opened(_read_commit(manifest.body, path if path.is_dir() else path.parent, where),
                                  manifest.revision, manifest.version)  # fmt: skip
                except FileNotFoundError as exc:
                    # A writer replaced the commit and dropped its files between our reads: read the new one.
                    if attempt + 1 < _READ_ATTEMPTS:
                        continue
                    raise IndexFormatError(f"{exc.filename}: the index's data file is missing") from None
            if manifest.version == 3:
                snap = _read_v3(manifest.body, manifest.data, where, manifest.data_file)
            else:
                snap = _read_v2(manifest.body, manifest.data, where)
            _check(snap, where)
            snap = snap._replace(data_file=manifest.data_file)
        except IndexFormatError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise IndexFormatError(f"{where}: malformed index ({type(exc).__name__}: {exc})") from None
        return Opened([Segment(snap, None, None)], manifest.revision, manifest.version)
    raise AssertionError("unreachable")  # pragma: no cover


_READ_ATTEMPTS = 3


def _read_commit(body: dict[str, Any], folder: Path, where: str) -> list[Segment]:
    records = body["segments"]
    if not isinstance(records, list) or not records:
        raise IndexFormatError(f"{where}: the commit names no segment")
    out = []
    for i, value in enumerate(records):
        seg = open_segment(folder, _segments.SegmentRecord.from_json(value, where), where, first=i == 0)
        snap = seg.snap
        if snap.analyzer != body["analyzer"] or snap.bm25 != body["bm25"] or snap.chunking != body["chunking"]:
            raise IndexFormatError(f"{where}: segment {i} was written with other settings than its commit")
        out.append(seg)
    return out


def open_segment(folder: Path, record: SegmentRecord, where: str, *, first: bool = False) -> Segment:
    """Map and check one segment a commit names (FileNotFoundError when it is gone)."""
    opened = _segments.read_segment(folder, record, where)
    seg_where = str(opened.path)
    try:
        snap = _read_v3(opened.body, opened.data, seg_where, opened.file, opened.blocks)
        snap = snap._replace(data_file=opened.file)
        if first and not snap.postings.scored:
            raise IndexFormatError(f"{seg_where}: the first segment of a commit holds no impacts")
        _check(snap, seg_where)
        if len(snap.chunks.source) != record.chunks or len(snap.sources.chars) != record.sources:
            raise IndexFormatError(f"{seg_where}: holds other counts than its commit record")
        src = opened.body["sources"]
        names = NameIndex(snap.sources.names, _view(src["sorted"], opened.data, "i", f"{seg_where}: sources.sorted"))
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


def _strings(blob: memoryview, offsets: Ints, where: str) -> list[str]:
    """The strings laid back to back in ``blob`` at ``offsets`` (one decode when all ASCII)."""
    try:
        if bytes(blob).isascii():
            whole = str(blob, "ascii")
            return list(map(whole.__getitem__, map(slice, offsets[:-1], offsets[1:])))
        return [str(blob[a:b], "utf-8", "surrogatepass") for a, b in pairwise(offsets)]
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexFormatError(f"{where}: not valid UTF-8 ({exc})") from None


def _sources_v3(
    body: dict[str, Any],
    data: memoryview | None,
    where: str,
    opened: _store.DataFile | None,
    blocks: BlockCheck | None = None,
) -> SourceColumns:
    src = body["sources"]
    n = src["count"]
    if blocks is not None:  # the parts read whole at load: O(sources)
        for name in ("name_offsets", "text_offsets", "fingerprint_offsets", "chars", "first_chunks", "sorted"):
            if src.get(name) is not None:
                blocks.check(src[name][0], src[name][0] + src[name][1])
        for ref in (src.get("text_blocks") or {}).values():  # block offsets and starts
            if isinstance(ref, list):
                blocks.check(ref[0], ref[0] + ref[1])

    def column(name: str, typecode: str) -> Any:
        return _view(src[name], data, typecode, f"{where}: sources.{name}")

    def offsets(name: str, size: int) -> Any:
        values = column(name, "q")
        if len(values) != n + 1 or values[0] != 0 or values[n] != size or any(map(gt, values[:-1], values[1:])):
            raise IndexFormatError(f"{where}: sources.{name} do not match their part of the data file")
        return values

    name_blob = _store.data_range(src["names"], data, f"{where}: sources.names")
    fp_blob = _store.data_range(src["fingerprints"], data, f"{where}: sources.fingerprints")
    text_blob = _store.data_range(src["texts"], data, f"{where}: sources.texts")
    pread = _Pread(opened, src["texts"][0]) if opened is not None and hasattr(os, "pread") else None
    packed = src.get("text_blocks")
    unpack = None
    if packed is not None:
        starts = packed.get("starts")  # format 5: blocks end where texts end; format 4: fixed size
        unpack = BlockTexts(
            _compressed_reader(text_blob, src["texts"][0], pread, blocks),
            _view(packed["offsets"], data, "q", f"{where}: sources.text_blocks"),
            packed["bytes"],
            f"{where}: sources.texts",
            size=None if starts is not None else packed["size"],
            starts=None if starts is None else _view(starts, data, "q", f"{where}: sources.text_blocks"),
        )
    names = SourceNames(
        name_blob,
        offsets("name_offsets", len(name_blob)),
        f"{where}: sources.names",
        None if blocks is None else blocks.part(src["names"]),
    )
    chars = column("chars", "q")
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
    )
    firsts = None if src.get("first_chunks") is None else column("first_chunks", "q")
    metadata: list[dict[str, Any] | None] = [None] * n
    for key, meta in src["metadata"].items():
        if not isinstance(meta, dict):
            raise IndexFormatError(f"{where}: a source record has the wrong types")
        metadata[int(key)] = meta
    if len(chars) != n:
        raise IndexFormatError(f"{where}: the source table is inconsistent")
    return SourceColumns(names, store, chars, metadata, store, firsts)


def _compressed_reader(
    blob: memoryview, base: int, pread: _Pread | None, blocks: BlockCheck | None
) -> Callable[[int, int], bytes | memoryview]:
    """Reads ``length`` bytes at ``offset`` of a compressed texts part (by ``pread`` when it can:
    see :class:`_Pread`), its blocks checked first."""

    def read(offset: int, length: int) -> bytes | memoryview:
        if blocks is not None:
            blocks.check(base + offset, base + offset + length, None if pread is None else pread.absolute)
        return blob[offset : offset + length] if pread is None else pread(offset, length)

    return read


def _sources_v2(body: dict[str, Any], data: memoryview | None, where: str) -> SourceColumns:
    names: list[str] = []
    texts: list[str] = []
    metadata: list[dict[str, Any] | None] = []
    fingerprints: list[str] = []
    for rec in body["sources"]:
        text = _store.text(rec["text"], data, f"{where}: sources.text")
        if not isinstance(rec["source"], str) or not isinstance(rec["metadata"], dict):
            raise IndexFormatError(f"{where}: a source record has the wrong types")
        names.append(rec["source"])
        texts.append(text)
        metadata.append(rec["metadata"])
        fingerprints.append(rec["fingerprint"])
    return SourceColumns(names, texts, array("q", map(len, texts)), metadata, fingerprints)


def _chunk_columns(cols: dict[str, Any], read: Callable[[Any, str, str], Any]) -> ChunkColumns:
    """The chunk columns of any format; ``read(value, typecode, name)`` maps (v3) or copies (v1, v2) one."""
    return ChunkColumns(
        read(cols["source"], "i", "chunks.source"),
        read(cols["index"], "i", "chunks.index"),
        read(cols["start"], "q", "chunks.start"),
        read(cols["end"], "q", "chunks.end"),
        read(cols["start_line"], "i", "chunks.start_line"),
        read(cols["end_line"], "i", "chunks.end_line"),
        read(cols["length"], "i", "chunks.length"),
        list(cols["section"]),
    )


def _read_v3(
    body: dict[str, Any],
    data: memoryview | None,
    where: str,
    opened: _store.DataFile | None,
    blocks: BlockCheck | None = None,
) -> Snapshot:
    cols = body["chunks"]

    def view(value: Any, typecode: str, name: str) -> Any:
        return _view(value, data, typecode, f"{where}: {name}")

    post = body["postings"]
    tables = body.get("tables")
    if blocks is not None:  # the parts read whole at load: O(chunks + terms)
        parts = [*(v for k, v in cols.items() if k != "section"), post.get("maxes"), post["offsets"]]
        for ref in [*parts, body.get("orders", {}).get("offsets")]:
            if ref is not None:
                blocks.check(ref[0], ref[0] + ref[1])
        if tables is not None:
            for name in ("dense_terms", "slot_terms"):
                blocks.check(tables[name][0], tables[name][0] + tables[name][1])
    chunks = _chunk_columns(cols, view)
    d = body["dictionary"]
    dictionary = TermDictionary(
        _store.data_range(d["text"], data, f"{where}: dictionary.text"),
        view(d["offsets"], "q", "dictionary.offsets"),
        view(d["sorted"], "i", "dictionary.sorted"),
        checks=None
        if blocks is None
        else (blocks.part(d["text"]), blocks.part(d["offsets"], 8), blocks.part(d["sorted"], 4)),
    )
    dictionary.check(where)
    if post.get("impacts") is None:  # a format 4 segment after the first: term frequencies only
        postings = Postings(
            TermList(dictionary, []),
            view(post["offsets"], "q", "postings.offsets"),
            view(post["chunks"], "i", "postings.chunks"),
            view(post["tfs"], tf_type(post, where), "postings.tfs"),
            array("f"),
            None,
            None,
            None,
            scored=False,
            checks=None
            if blocks is None
            else PostingChecks(
                blocks.part(post["offsets"], 8),
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
            view(post["offsets"], "q", "postings.offsets"),
            view(post["chunks"], "i", "postings.chunks"),
            view(post["tfs"], tf_type(post, where), "postings.tfs"),
            view(post["impacts"], "f", "postings.impacts"),
            view(post["maxes"], "f", "postings.maxes"),
            orders.offsets,
            orders.positions,
            _read_tables(tables, post, body["stats"]["chunks"], view, blocks),
            checks=None
            if blocks is None
            else PostingChecks(
                blocks.part(post["offsets"], 8),
                blocks.part(post["chunks"], 4),
                blocks.part(post["tfs"], array(tf_type(post, where)).itemsize),
                blocks.part(post["impacts"], 4),
                blocks.part(body["orders"]["offsets"], 8),
                blocks.part(orders.ref, orders.positions.itemsize),
            ),
            wide_orders=orders.wide,
        )
    return Snapshot(
        body["analyzer"],
        body["bm25"],
        body["chunking"],
        _sources_v3(body, data, where, opened, blocks),
        chunks,
        postings,
        body["stats"]["total_length"],
        body.get("created_by", ""),
        blocks=blocks,
    )


def _read_tables(
    tables: Any,
    post: dict[str, Any],
    n_chunks: int,
    view: Callable[[Any, str, str], Any],
    blocks: BlockCheck | None,
) -> LookupTables | None:
    if tables is None:  # saved before tables existed
        return None
    old = "slot_impacts" in tables  # formats 3-5 saved each slot table's impacts again
    checks = None
    if blocks is not None:
        checks = (
            blocks.part(tables["dense"], 4),
            blocks.part(tables["slots"], 2),
            blocks.part(tables["slot_impacts"] if old else post["impacts"], 4),
            blocks.part(tables["slot_offsets"] if old else [0, 0], 8),
        )
    return LookupTables(
        n_chunks,
        view(tables["dense_terms"], "i", "tables.dense_terms"),
        view(tables["dense"], "f", "tables.dense"),
        view(tables["slot_terms"], "i", "tables.slot_terms"),
        view(tables["slots"], "H", "tables.slots"),
        view(post["impacts"], "f", "postings.impacts"),
        view(post["offsets"], "q", "postings.offsets"),
        view(tables["slot_impacts"], "f", "tables.slot_impacts") if old else None,
        view(tables["slot_offsets"], "q", "tables.slot_offsets") if old else None,
        checks,
    )


def _read_v2(body: dict[str, Any], data: memoryview | None, where: str) -> Snapshot:
    """Formats 1 and 2: everything is copied out (their lists are not aligned)."""

    def unpack(value: Any, typecode: str, name: str) -> array[Any]:
        return _store.unpack(value, typecode, f"{where}: {name}", data)

    cols = body["chunks"]
    chunks = _chunk_columns(cols, unpack)
    post = body["postings"]
    lengths = unpack(post["lengths"], "i", "postings.lengths")
    terms = list(body["terms"])
    if len(terms) != len(lengths):
        raise IndexFormatError(f"{where}: postings tables have inconsistent lengths")
    offsets = array("q", accumulate(lengths, initial=0))
    maxes = None
    if "maxes" in post:  # absent from early v1 files: computed on first use then
        maxes = unpack(post["maxes"], "f", "postings.maxes")
        if len(maxes) != len(terms):
            raise IndexFormatError(f"{where}: postings.maxes has the wrong length")
    order_offsets = positions = None
    if "orders" in body:  # format 1 kept champion lists instead: orders are then computed on first use
        o_terms = unpack(body["orders"]["terms"], "i", "orders.terms")
        positions = unpack(body["orders"]["positions"], "i", "orders.positions")
        order_lengths = [0] * len(terms)
        for tid in o_terms:
            if not 0 <= tid < len(terms) or order_lengths[tid]:
                raise IndexFormatError(f"{where}: an impact order names a term that does not exist")
            order_lengths[tid] = lengths[tid]
        order_offsets = array("q", accumulate(order_lengths, initial=0))
        if order_offsets[-1] != len(positions):
            raise IndexFormatError(f"{where}: impact orders have the wrong length")
    postings = Postings(
        terms,
        offsets,
        unpack(post["chunks"], "i", "postings.chunks"),
        unpack(post["tfs"], "I", "postings.tfs"),
        unpack(post["impacts"], "f", "postings.impacts"),
        maxes,
        order_offsets,
        positions,
    )
    return Snapshot(
        body["analyzer"],
        body["bm25"],
        body["chunking"],
        _sources_v2(body, data, where),
        chunks,
        postings,
        body["stats"]["total_length"],
        body.get("created_by", ""),
    )


def _check(snap: Snapshot, where: str) -> None:
    """The cross-checks that cost O(chunks + terms), never O(postings)."""
    cols = snap.chunks
    n = len(cols.source)
    if any(len(col) != n for col in cols[1:]):
        raise IndexFormatError(f"{where}: chunk tables have different lengths")
    chars = snap.sources.chars
    if n and (min(cols.source) < 0 or max(cols.source) >= len(chars)):
        raise IndexFormatError(f"{where}: a chunk points at a source that does not exist")
    ends = map(chars.__getitem__, cols.source)
    if n and (min(cols.start) < 0 or any(map(gt, cols.start, cols.end)) or any(map(gt, cols.end, ends))):
        raise IndexFormatError(f"{where}: a chunk lies outside its source text")
    firsts = snap.sources.first_chunks
    if firsts is not None and (
        len(firsts) != len(chars) + 1
        or firsts[0] != 0
        or firsts[len(chars)] != n
        or any(map(gt, firsts[:-1], firsts[1:]))
    ):
        raise IndexFormatError(f"{where}: sources.first_chunks do not match the chunk table")
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
