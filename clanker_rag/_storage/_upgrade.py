"""``clanker-rag upgrade DIR``: an index folder of an older on-disk format rewritten in the current one.

A load reads only the current format (:mod:`._codec`) and refuses any older
one with a message naming the ``upgrade`` command.  This module is the only
code that decodes the older layouts, and only that command imports it
(``tests/storage/test_upgrade.py`` checks both).

The older layouts, as this module reads them:

- **1**: everything inside ``index.json``: ``body.sources`` is a list of
  records with the texts inline, ``body.terms`` the vocabulary, and every
  array base64 (``postings.lengths``, ``chunks``, ``tfs``, ``impacts``,
  ``maxes`` when saved, the chunk columns);
- **2**: the same body, its arrays and texts ``[offset, length]`` ranges of
  one data file (``body.data``), and ``body.orders``: the impact orders of
  the terms in ``orders.terms``, int32, laid end to end;
- **3**: one data file laid out as a segment is today (columns, term
  dictionary, ``postings.offsets``) but every offset, count and bound
  int64, term frequencies uint32 and the orders int32 (``orders.offsets``,
  ``orders.positions``), its body inside ``index.json``;
- **4-7**: the commit point and segment files of today, the segment bodies
  saved with some of 3's columns: 4 also keeps its texts in zlib blocks of
  a fixed ``size``; 4 and 5 keep int32 orders; 5 and 6 (and 3) store lookup
  tables a load no longer reads; 5-7 name the term frequencies' type
  (``tf_type``), 7 the offsets' (``offsets_type``).  Compressed texts are
  zlib streams.

The upgrade copies every saved value into memory (an older folder is small
beside what a save copies anyway) and writes each segment again with
:mod:`._writer`, in order, keeping each one's deletion marks: the impacts,
maxima and impact orders are the saved ones, the lookup tables are made from
those impacts as every save makes them, so a search of the upgraded folder
scores and ranks exactly as the old one did.  It is a commit like any save,
under the folder's writer lock: the new segment files first, then the commit
point renamed over ``index.json``, then the old files removed; a process
killed at any moment leaves the old index or the new one.
"""

from __future__ import annotations

import binascii
import hashlib
import sys
import zlib
from array import array
from collections.abc import Callable
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any, NamedTuple

from .._exceptions import IndexFormatError
from . import _codec, _segments, _store, _writer
from ._codec import ChunkColumns, Postings, Snapshot, SourceColumns
from ._lock import IndexLock
from ._order_column import read_wide, widened
from ._segments import SegmentRecord

__all__ = ["Upgraded", "upgrade"]


class Upgraded(NamedTuple):
    """What :func:`upgrade` found and did."""

    before: int  # the folder's format version before
    after: int  # after (the current one)
    segments: int  # the segments written (0: the folder was current already)
    sources: int
    chunks: int


def upgrade(folder: str | Path, *, timeout: float = 30.0) -> Upgraded:
    """Rewrite the index in ``folder`` in the current format, in place and atomically.

    A folder already current is left as it is (``segments == 0``).  Waits up
    to ``timeout`` seconds for a writer of the folder to finish.
    """
    folder = Path(folder)
    target = folder / _store.INDEX_FILE
    if not target.is_file():
        raise IndexFormatError(f"{target}: no index here (file not found)")
    with _store.writing(folder), IndexLock(folder, timeout=timeout):
        body, _, version = _store.read_manifest(target)
        where = str(target)
        try:
            if version == _store.FORMAT_VERSION:
                return _counted(version, 0, [SegmentRecord.from_json(value, where) for value in body["segments"]])
            settings = {key: body[key] for key in ("analyzer", "bm25", "chunking")}
            settings["created_by"] = body.get("created_by", "")
            old = _old_segments(body, version, folder, where)
        except IndexFormatError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, zlib.error) as exc:
            raise IndexFormatError(f"{where}: malformed index ({type(exc).__name__}: {exc})") from None
        records = []
        for i, (snap, deleted, deleted_chunks) in enumerate(old):
            record = _writer.write_segment(folder, snap, scored=i == 0)
            records.append(record._replace(deleted=deleted, deleted_chunks=deleted_chunks))
        # Each new segment read back by the current reader before the commit point names it.
        for i, record in enumerate(records):
            _codec.open_segment(folder, record, where, first=i == 0)
        _writer.commit(folder, settings, records)
    return _counted(version, len(records), records)


def _counted(version: int, written: int, records: list[SegmentRecord]) -> Upgraded:
    sources = sum(r.sources - len(r.deleted) for r in records)
    return Upgraded(version, _store.FORMAT_VERSION, written, sources, sum(r.live_chunks for r in records))


def _old_segments(
    body: dict[str, Any], version: int, folder: Path, where: str
) -> list[tuple[Snapshot, tuple[int, ...], int]]:
    """The snapshots an older folder holds, in chunk order, with each one's deletion marks."""
    if version <= 2:
        return [(_read_v1_v2(body, _data_file(body, folder, where), where), (), 0)]
    if version == 3:
        return [(_read_columns(body, _data_file(body, folder, where), where), (), 0)]
    out = []
    records = body["segments"]
    if not isinstance(records, list) or not records:
        raise IndexFormatError(f"{where}: the commit names no segment")
    for value in records:
        record = SegmentRecord.from_json(value, where)
        opened = _segments.read_segment(folder, record, where)
        if hashlib.sha256(opened.data).hexdigest() != record.sha256:  # (a big one is not hashed at load)
            raise IndexFormatError(
                f"{opened.path}: checksum mismatch: the data file was modified or damaged after saving"
            )
        snap = _read_columns(opened.body, opened.data, str(opened.path))
        out.append((snap, record.deleted, record.deleted_chunks))
    return out


def _data_file(body: dict[str, Any], folder: Path, where: str) -> memoryview | None:
    """The data file of a format 2 or 3 folder, hashed against its record (None: format 1)."""
    record = body.get("data")
    if record is None:
        return None
    if not isinstance(record, dict) or not _store.DATA_NAME.fullmatch(str(record.get("file"))):
        raise IndexFormatError(f"{where}: the data file record is malformed")
    path = folder / record["file"]
    try:
        data, _ = _store.map_file(path)
    except FileNotFoundError:
        raise IndexFormatError(f"{path}: the index's data file is missing") from None
    if len(data) != record.get("size") or hashlib.sha256(data).hexdigest() != record.get("sha256"):
        raise IndexFormatError(f"{path}: checksum mismatch: the data file was modified or damaged after saving")
    return data


def _unpack(value: Any, typecode: str, where: str, data: memoryview | None) -> array[Any]:
    """An array saved as base64 (format 1) or as a range of the data file, copied."""
    raw: bytes | memoryview
    if isinstance(value, str):
        try:
            raw = binascii.a2b_base64(value)
        except (ValueError, TypeError, binascii.Error) as exc:
            raise IndexFormatError(f"{where}: not valid base64 ({exc})") from None
    else:
        raw = _store.data_range(value, data, where)
    values: array[Any] = array(typecode)
    if len(raw) % values.itemsize:
        raise IndexFormatError(f"{where}: {len(raw)} bytes is not a whole number of {values.itemsize}-byte items")
    values.frombytes(raw)
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        values.byteswap()
    return values


def _chunks(cols: dict[str, Any], read: Callable[[Any, str, str], array[Any]], types: dict[str, Any]) -> ChunkColumns:
    return ChunkColumns(
        read(cols["source"], "i", "chunks.source"),
        read(cols["index"], "i", "chunks.index"),
        read(cols["start"], types.get("chunks.start", "q"), "chunks.start"),
        read(cols["end"], types.get("chunks.end", "q"), "chunks.end"),
        read(cols["start_line"], "i", "chunks.start_line"),
        read(cols["end_line"], "i", "chunks.end_line"),
        read(cols["length"], "i", "chunks.length"),
        list(cols["section"]),
    )


def _read_v1_v2(body: dict[str, Any], data: memoryview | None, where: str) -> Snapshot:
    """Formats 1 and 2 (see the module docstring)."""

    def read(value: Any, typecode: str, name: str) -> array[Any]:
        return _unpack(value, typecode, f"{where}: {name}", data)

    post = body["postings"]
    lengths = read(post["lengths"], "i", "postings.lengths")
    terms = list(body["terms"])
    if len(terms) != len(lengths) or not all(isinstance(t, str) for t in terms):
        raise IndexFormatError(f"{where}: postings tables have inconsistent lengths")
    offsets = array("q", accumulate(lengths, initial=0))
    impacts = read(post["impacts"], "f", "postings.impacts")
    if "maxes" in post:
        maxes = read(post["maxes"], "f", "postings.maxes")
    else:  # format 1 may lack them: each list's largest impact
        maxes = array("f", (max(impacts[a:b], default=0.0) for a, b in pairwise(offsets)))
    order_lengths = [0] * len(terms)
    positions = array("i")
    if "orders" in body:  # the terms that have one (format 1 saved none)
        for tid in read(body["orders"]["terms"], "i", "orders.terms"):
            if not 0 <= tid < len(terms) or order_lengths[tid]:
                raise IndexFormatError(f"{where}: an impact order names a term that does not exist")
            order_lengths[tid] = lengths[tid]
        positions = read(body["orders"]["positions"], "i", "orders.positions")
    order_offsets = array("q", accumulate(order_lengths, initial=0))
    if order_offsets[-1] != len(positions):
        raise IndexFormatError(f"{where}: impact orders have the wrong length")
    names: list[str] = []
    texts: list[str] = []
    metadata: list[dict[str, Any] | None] = []
    fingerprints: list[str] = []
    for rec in body["sources"]:
        text = rec["text"]
        if not isinstance(text, str):
            text = str(_store.data_range(text, data, f"{where}: sources.text"), "utf-8", "surrogatepass")
        if not isinstance(rec["source"], str) or not isinstance(rec["metadata"], dict):
            raise IndexFormatError(f"{where}: a source record has the wrong types")
        names.append(rec["source"])
        texts.append(text)
        metadata.append(rec["metadata"] or None)
        fingerprints.append(str(rec["fingerprint"]))
    return Snapshot(
        body["analyzer"],
        body["bm25"],
        body["chunking"],
        SourceColumns(names, texts, array("q", map(len, texts)), metadata, fingerprints),
        _chunks(body["chunks"], read, {}),
        Postings(
            terms,
            offsets,
            read(post["chunks"], "i", "postings.chunks"),
            read(post["tfs"], "I", "postings.tfs"),
            impacts,
            maxes,
            order_offsets,
            positions,
        ),
        body["stats"]["total_length"],
        body.get("created_by", ""),
    )


def _read_columns(body: dict[str, Any], data: memoryview | None, where: str) -> Snapshot:
    """A format 3 index or a format 4-7 segment (see the module docstring), copied."""

    def read(ref: Any, typecode: str, name: str) -> array[Any]:
        return _unpack(ref, typecode, f"{where}: {name}", data)

    def blob(ref: Any, name: str) -> memoryview:
        return _store.data_range(ref, data, f"{where}: {name}")

    types = body.get("types") or {}
    src = body["sources"]

    def pieces(part: str, offsets_key: str) -> list[bytes]:
        raw = bytes(blob(src[part], f"sources.{part}"))
        return _split(raw, read(src[offsets_key], types.get(f"sources.{offsets_key}", "q"), f"sources.{offsets_key}"))

    names = [str(b, "utf-8", "surrogatepass") for b in pieces("names", "name_offsets")]
    fingerprints = [str(b, "utf-8", "surrogatepass") for b in pieces("fingerprints", "fingerprint_offsets")]
    packed = src.get("text_blocks")
    if packed is None:
        texts = pieces("texts", "text_offsets")
    else:
        texts = _split(
            _inflated(blob(src["texts"], "sources.texts"), packed, read, where),
            read(src["text_offsets"], types.get("sources.text_offsets", "q"), "sources.text_offsets"),
        )
    n = src["count"]
    metadata: list[dict[str, Any] | None] = [None] * n
    for key, meta in src["metadata"].items():
        if not isinstance(meta, dict):
            raise IndexFormatError(f"{where}: a source record has the wrong types")
        metadata[int(key)] = meta
    chars = read(src["chars"], types.get("sources.chars", "q"), "sources.chars")
    if not len(names) == len(texts) == len(fingerprints) == len(chars) == n:
        raise IndexFormatError(f"{where}: the source table is inconsistent")
    d = body["dictionary"]
    term_offsets = read(d["offsets"], d.get("offsets_type", "q"), "dictionary.offsets")
    terms = [str(b, "utf-8", "surrogatepass") for b in _split(bytes(blob(d["text"], "dictionary.text")), term_offsets)]
    post = body["postings"]
    offsets = read(post["offsets"], post.get("offsets_type", "q"), "postings.offsets")
    chunks = read(post["chunks"], "i", "postings.chunks")
    tfs = read(post["tfs"], post.get("tf_type", "I"), "postings.tfs")
    if post.get("impacts") is None:  # a segment after the first of its commit: term frequencies only
        postings = Postings(terms, offsets, chunks, tfs, array("f"), None, None, None, scored=False)
    else:
        orders = body["orders"]
        order_offsets = read(orders["offsets"], orders.get("offsets_type", "q"), "orders.offsets")
        if "short" in orders:  # formats 6 and 7: as saved today
            wide_terms = read(orders["wide_terms"], "i", "orders.wide_terms")
            wide = read_wide(wide_terms, read(orders["wide"], "i", "orders.wide"), order_offsets, where)
            positions = widened(read(orders["short"], "H", "orders.short"), order_offsets, wide)
        else:
            positions = read(orders["positions"], "i", "orders.positions")
        if len(order_offsets) != len(offsets) or order_offsets[-1] != len(positions):
            raise IndexFormatError(f"{where}: impact orders have the wrong length")
        postings = Postings(
            terms,
            offsets,
            chunks,
            tfs,
            read(post["impacts"], "f", "postings.impacts"),
            read(post["maxes"], "f", "postings.maxes"),
            order_offsets,
            positions,
        )
    if len(offsets) != len(terms) + 1 or offsets[-1] != len(chunks) or len(tfs) != len(chunks):
        raise IndexFormatError(f"{where}: postings tables have inconsistent lengths")
    return Snapshot(
        body["analyzer"],
        body["bm25"],
        body["chunking"],
        SourceColumns(names, texts, chars, metadata, fingerprints),
        _chunks(body["chunks"], read, types),
        postings,
        body["stats"]["total_length"],
        body.get("created_by", ""),
    )


def _split(raw: bytes, offsets: array[int]) -> list[bytes]:
    if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(raw) or any(map(int.__gt__, offsets, offsets[1:])):
        raise IndexFormatError("the offsets of a saved run of strings do not match it")
    return [raw[a:b] for a, b in pairwise(offsets)]


def _inflated(
    part: memoryview, packed: dict[str, Any], read: Callable[[Any, str, str], array[Any]], where: str
) -> bytes:
    """Every text of a segment, its zlib blocks inflated and joined (fixed-size blocks in format 4,
    blocks ending with a text in 5-7: either way back to back, so joined they are the texts)."""
    block_offsets = read(packed["offsets"], packed.get("type", "q"), "sources.text_blocks")
    wbits = -zlib.MAX_WBITS if packed.get("raw") is True else zlib.MAX_WBITS
    out = b"".join(zlib.decompress(part[a:b], wbits) for a, b in pairwise(block_offsets))
    if len(out) != packed["bytes"]:
        raise IndexFormatError(f"{where}: the text blocks hold {len(out)} bytes, not {packed['bytes']}")
    return out
