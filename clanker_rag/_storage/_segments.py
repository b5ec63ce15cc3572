"""Segments and commit points: a save writes what changed, never what stayed.

An index folder holds immutable *segment* files and one *commit point*,
``index.json``, that names the live ones.  A segment (``data-<digest>.bin``)
is written once and never changed: its parts (texts, chunk table, postings,
see :mod:`._codec`), then a table of CRC-32s of its 64 KiB blocks, then its
own JSON body, all named by the digest of the whole file.  The commit point
lists the segments in chunk order with each one's size, sha256, where its
body lies and the digest of that body, and the source numbers deleted from
it since it was written.  A cheap commit therefore writes one new segment
(the chunks added since the last commit, if any) and a new commit point
with the new deletion marks; the segments already on disk are untouched.

Old files go as soon as the commit point that replaces theirs is in place
(Lucene's keep-only-the-last-commit policy): a save deletes every segment
the commit it writes does not name, so the folder holds one index, never
two (a whole rewrite, ``optimize`` or an ingest's last save after its
checkpoints, would otherwise double it until the next commit).  A reader in
another process that has opened a commit keeps reading it (its mappings and
descriptors hold the files open, and POSIX keeps an unlinked open file); one
that read the previous ``index.json`` a moment before the switch finds a file
gone and reads ``index.json`` again (``_codec.read``).

The merge policy (:func:`plan_merges`) is log-structured over adjacent
segments (so chunk order, and with it the tie order of equal scores, is
kept): ``MERGE_FACTOR`` neighbouring tail segments of one size level merge
into one, and when the segments after the first, together with every deleted
chunk, pass ``FULL_SHARE`` of the live chunks (or the index is under
``FULL_BELOW`` chunks) the save writes the whole index as one segment
instead: the expensive merge is geometric, so its cost per added chunk stays
bounded.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, floordiv, mul
from pathlib import Path
from typing import Any, NamedTuple

from .._exceptions import IndexFormatError
from . import _store

__all__ = [
    "BLOCK_SIZE",
    "COMMIT_VERSION",
    "BlockCheck",
    "MergePlan",
    "PartCheck",
    "Policy",
    "SegmentRecord",
    "plan_merges",
    "read_segment",
    "write_commit",
    "write_segment",
]

COMMIT_VERSION = 8
# Checked blocks: a flipped bit anywhere in a block fails its CRC when the block is first read.
# A read checks whole blocks: a hit's text, a chunk's row or a short list checks 16 KiB, not
# 64.  At 225k chunks 500 cold queries CRC 222 MB instead of 294 (131 against 203 ms of CPU,
# load 10); the folder grows by the 4 bytes a block (65 kB).
BLOCK_SIZE = 16 * 1024


@dataclass(frozen=True, slots=True)
class Policy:
    """When a save merges (see the module docstring)."""

    merge_factor: int = 10
    full_share: float = 0.125
    full_below: int = 1000


POLICY = Policy()


class SegmentRecord(NamedTuple):
    """A segment as a commit point names it."""

    file: str
    size: int
    sha256: str
    body: tuple[int, int]  # where the segment's JSON body lies in its file
    body_sha256: str
    chunks: int
    sources: int
    deleted: tuple[int, ...] = ()  # source numbers deleted since it was written, ascending
    deleted_chunks: int = 0

    @property
    def live_chunks(self) -> int:
        return self.chunks - self.deleted_chunks

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "size": self.size,
            "sha256": self.sha256,
            "body": list(self.body),
            "body_sha256": self.body_sha256,
            "chunks": self.chunks,
            "sources": self.sources,
            "deleted": list(self.deleted),
            "deleted_chunks": self.deleted_chunks,
        }

    @classmethod
    def from_json(cls, value: Any, where: str) -> SegmentRecord:
        try:
            rec = cls(
                value["file"],
                value["size"],
                value["sha256"],
                (value["body"][0], value["body"][1]),
                value["body_sha256"],
                value["chunks"],
                value["sources"],
                tuple(value["deleted"]),
                value["deleted_chunks"],
            )
        except (KeyError, TypeError, IndexError):
            raise IndexFormatError(f"{where}: a segment record is malformed") from None
        ints = (rec.size, *rec.body, rec.chunks, rec.sources, rec.deleted_chunks, *rec.deleted)
        if (
            not isinstance(rec.file, str)
            or not _store.DATA_NAME.fullmatch(rec.file)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ints)
            or any(b <= a for a, b in zip(rec.deleted, rec.deleted[1:]))
            or (rec.deleted and rec.deleted[-1] >= rec.sources)
            or rec.deleted_chunks > rec.chunks
        ):
            raise IndexFormatError(f"{where}: a segment record is malformed")
        return rec


def write_segment(folder: Path, body: dict[str, Any], blob: _store.Blob) -> SegmentRecord:
    """Write ``blob`` and ``body`` as one immutable segment file (fsynced); returns its record."""
    if BLOCK_SIZE:  # 0 writes none (what a segment without them reads like, for tests)
        crcs = block_crcs(blob.parts, BLOCK_SIZE)
        covered = blob.size
        crc_bytes = crcs.tobytes() if _store.LITTLE else _swapped(crcs)
        body = {
            **body,
            "blocks": {
                "size": BLOCK_SIZE,
                "covered": covered,
                "crc32": blob.add(crc_bytes),
                "crc_sha256": hashlib.sha256(crc_bytes).hexdigest(),
            },
        }
    text = json.dumps(body, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")
    at = blob.add(text)
    h = hashlib.sha256()
    for part in blob.parts:
        h.update(part)
    digest = h.hexdigest()
    name = f"data-{digest[:32]}.bin"
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / name).is_file() or (folder / name).stat().st_size != blob.size:
        _store.write_atomic(folder / name, blob.parts)
    n_sources = body["sources"]["count"]
    return SegmentRecord(
        name, blob.size, digest, (at[0], at[1]), hashlib.sha256(text).hexdigest(), body["stats"]["chunks"], n_sources
    )


def _swapped(values: array[int]) -> bytes:  # pragma: no cover - big-endian hosts
    copy = array("I", values)
    copy.byteswap()
    return copy.tobytes()


def block_crcs(parts: Iterable[bytes | memoryview], size: int) -> array[int]:
    """CRC-32 of each ``size``-byte block of the concatenated ``parts`` (the last may be short)."""
    crcs: array[int] = array("I")
    crc = 0
    filled = 0
    for part in parts:
        view = memoryview(part).cast("B")
        while len(view):
            take = min(size - filled, len(view))
            crc = zlib.crc32(view[:take], crc)
            filled += take
            view = view[take:]
            if filled == size:
                crcs.append(crc)
                crc = filled = 0
    if filled:
        crcs.append(crc)
    return crcs


class BlockCheck:
    """Verifies a mapped segment's blocks against their CRC-32s, each the first time it is read.

    ``check(start, stop)`` costs one C-level search of a byte flag per block
    once the blocks are verified, so it can guard every read of a posting
    list, an order, a table or a text.
    """

    __slots__ = ("_crcs", "_data", "_done", "_size", "where")

    def __init__(self, data: memoryview, crcs: Sequence[int], size: int, covered: int, where: str) -> None:
        if size <= 0 or len(crcs) != -(-covered // size) or covered > len(data):
            raise IndexFormatError(f"{where}: the block checksums do not cover the data file")
        self._data = data[:covered]
        self._crcs = crcs
        self._size = size
        self._done = bytearray(len(crcs))
        self.where = where

    def check(self, start: int, stop: int, read: Callable[[int, int], bytes] | None = None) -> None:
        """Verify the blocks holding bytes ``start .. stop - 1`` (raises IndexFormatError);
        ``read(offset, length)`` reads a block instead of the mapping (a text read by ``pread``)."""
        if stop <= start:
            return
        size = self._size
        first, last = start // size, (stop - 1) // size + 1
        done = self._done
        i = done.find(0, first, last)
        while i >= 0:
            end = min((i + 1) * size, len(self._data))
            block = self._data[i * size : end] if read is None else read(i * size, end - i * size)
            if zlib.crc32(block) != self._crcs[i]:
                raise IndexFormatError(
                    f"{self.where}: checksum mismatch in block {i} (bytes {i * size}..{i * size + len(block) - 1}): "
                    "the data file was damaged after saving"
                )
            done[i] = 1
            i = done.find(0, i + 1, last)

    def check_all(self) -> None:
        self.check(0, len(self._data))

    def part(self, ref: Sequence[int], itemsize: int = 1) -> PartCheck:
        """The checks of the part at ``ref`` (``[offset, length]``), by item."""
        return PartCheck(self, ref[0], itemsize)


class PartCheck:
    """Checks items ``a .. b - 1`` of one part of a segment before they are read."""

    __slots__ = ("_blocks", "_size", "_start")

    def __init__(self, blocks: BlockCheck, start: int, itemsize: int) -> None:
        self._blocks = blocks
        self._start = start
        self._size = itemsize

    def __call__(self, a: int, b: int) -> None:
        blocks = self._blocks
        start, stop = self._start + a * self._size, self._start + b * self._size
        # Blocks verified before, the usual case (a hit reads a dozen items), cost one
        # C-level search of their flags here, without a second Python call.
        size = blocks._size
        if stop > start and blocks._done.find(0, start // size, (stop - 1) // size + 1) >= 0:
            blocks.check(start, stop)

    def items(self, first: int, count: int, positions: Sequence[int]) -> None:
        """Verify the blocks holding items ``first + p`` for each of ``positions``, all below ``count``.

        A table indexed by chunk id is read at a few scattered items a search, and the
        blocks no search reads need not be verified (nor paged in): at two million chunks,
        a table spans about 500 blocks, of which 500 cold queries read fewer than half.
        Items that outnumber the blocks fall in most of them: then the whole range is
        verified in one pass, and later reads skip the per-item work.
        """
        blocks, isz = self._blocks, self._size
        size, done = blocks._size, blocks._done
        start = self._start + first * isz
        first_block, end_block = start // size, (start + count * isz - 1) // size + 1
        if count <= 0 or done.find(0, first_block, end_block) < 0:
            return  # every block of the range was verified before
        if len(positions) >= end_block - first_block:
            self(first, first + count)
            return
        if start % isz or size % isz:  # an item may straddle two blocks: item by item
            for p in positions:
                self(first + p, first + p + 1)
            return
        for b in set(map(floordiv, map(add, map(mul, positions, repeat(isz)), repeat(start)), repeat(size))):
            if not done[b]:
                blocks.check(b * size, b * size + 1)


class OpenedSegment(NamedTuple):
    body: dict[str, Any]
    data: memoryview
    path: Path
    blocks: BlockCheck | None
    file: _store.DataFile  # held open: texts are read through it, never by opening the path again


def read_segment(folder: Path, record: SegmentRecord, where: str, *, private: bool = False) -> OpenedSegment:
    """Map one segment of a commit and check it (its body always; the whole file when small);
    ``private``: read it into memory instead (see ``_store.map_file``)."""
    path = folder / record.file
    # FileNotFoundError propagates: the caller reads the commit again.
    data, opened = _store.map_file(path, private=private)
    if len(data) != record.size:
        raise IndexFormatError(f"{path}: truncated ({len(data)} of {record.size} bytes)")
    if len(data) <= _store.VERIFY_AT_LOAD and hashlib.sha256(data).hexdigest() != record.sha256:
        raise IndexFormatError(f"{path}: checksum mismatch: the data file was modified or damaged after saving")
    off, length = record.body
    if off + length > len(data):
        raise IndexFormatError(f"{path}: the segment body lies outside the file")
    raw = data[off : off + length]
    if hashlib.sha256(raw).hexdigest() != record.body_sha256:
        raise IndexFormatError(f"{path}: checksum mismatch in the segment body")
    try:
        body = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{path}: the segment body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise IndexFormatError(f"{path}: the segment body is not an object")
    blocks = None
    spec = body.get("blocks")
    if isinstance(spec, dict) and len(data) > _store.VERIFY_AT_LOAD:
        # A small file was hashed whole just now; a big one is checked block by block as it is read.
        crc_raw = _store.data_range(spec.get("crc32"), data, f"{path}: blocks.crc32")
        if hashlib.sha256(crc_raw).hexdigest() != spec.get("crc_sha256"):
            raise IndexFormatError(f"{path}: checksum mismatch in the block checksums")
        crcs: Any = _store.unpack(spec["crc32"], "I", f"{path}: blocks.crc32", data)
        blocks = BlockCheck(data, crcs, spec.get("size", 0), spec.get("covered", -1), str(path))
    return OpenedSegment(body, data, path, blocks, opened)


def write_commit(folder: Path, body: dict[str, Any], segments: Sequence[SegmentRecord]) -> str:
    """Write the commit point naming ``segments``; the data files it does not name go afterwards."""
    full = {**body, "segments": [rec.to_json() for rec in segments]}
    named = {rec.file for rec in segments}
    return _store.write_index(folder, full, keep=named)


class MergePlan(NamedTuple):
    """What a save writes: the whole index as one segment (``full``), or runs of segments to merge."""

    full: bool
    runs: list[tuple[int, int]]  # [first, last) ranges of segment positions, each merged into one


def _level(chunks: int, factor: int) -> int:
    """floor(log_factor(chunks)), in integers (a float logarithm misplaces exact powers)."""
    level = 0
    while chunks >= factor:
        chunks //= factor
        level += 1
    return level


def plan_merges(live: Sequence[int], dead: int, policy: Policy | None = None) -> MergePlan:
    """Which merges a save runs, given each segment's live chunks (first segment first) and
    the chunks deleted but still on disk (see the module docstring); ``policy``: :data:`POLICY`."""
    if policy is None:
        policy = POLICY
    total = sum(live)
    if len(live) <= 1:
        return MergePlan(len(live) == 1 and dead > 0 and dead > total * policy.full_share, [])
    if total < policy.full_below or sum(live[1:]) + dead > total * policy.full_share:
        return MergePlan(True, [])
    # Log-structured: merge the newest run of merge_factor tail segments on one level, repeatedly.
    sizes = list(live)
    spans = [(i, i + 1) for i in range(len(sizes))]
    runs: list[tuple[int, int]] = []
    factor = policy.merge_factor
    while len(sizes) > factor:
        tail = sizes[-factor:]
        level = _level(tail[-1], factor)
        if any(_level(s, factor) != level for s in tail) or len(sizes) - factor < 1:
            break
        first, last = spans[-factor][0], spans[-1][1]
        runs = [r for r in runs if not (first <= r[0] and r[1] <= last)]
        runs.append((first, last))
        sizes[-factor:] = [sum(tail)]
        spans[-factor:] = [(first, last)]
    return MergePlan(False, runs)
