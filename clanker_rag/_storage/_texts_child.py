"""A save's stored texts compressed in a forked child while this process writes the rest.

Compressing the texts is the largest single step of saving a fresh build
(about a third of the save at 75k chunks) and needs nothing else of the
segment, so when the caller says a core is idle a child forked at the start
of the save compresses them (:func:`._texts.compress_blocks`, the same
blocks) into an anonymous shared mapping while this process lays out the
chunks, postings and tables; the texts part is then added to the data file
where the one-process path adds it, so the file is the same byte for byte.
When the child cannot start or fails, this process compresses them itself.
The child writes nothing but the mapping: a kill at any moment leaves no file.
"""

from __future__ import annotations

import mmap
import os
import threading
from array import array
from collections.abc import Iterable, Sequence
from operator import is_
from typing import Any

from .._forking import Child, start_child
from . import _segments, _texts
from ._store import Blob
from ._texts import blocks_record, compress_blocks, write_texts

__all__ = ["Texts", "start_texts"]

Piece = str | bytes | memoryview
_HEAD = 3  # int64s before the arrays: blocks, uncompressed bytes, compressed bytes


def _utf8(value: Piece) -> bytes | memoryview:
    # surrogatepass: a text decoded with surrogateescape round-trips too.
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value


class Texts:
    """The texts of a segment being written: compressed by a child, or here when added."""

    def __init__(self, pieces: Iterable[Piece], block: int) -> None:
        self._pieces = pieces
        self._block = block
        # Raw deflate blocks when the segment's block checksums will cover them (see _texts).
        self._raw = _segments.BLOCK_SIZE > 0
        self._child: Child | None = None
        self._start = 0  # where the child put the compressed bytes in the mapping
        self._count = 0  # how many texts the child compresses

    def holds(self, pieces: Sequence[Piece]) -> bool:
        """Whether these are exactly the texts being compressed (the same objects, in order)."""
        mine = self._pieces
        return isinstance(mine, Sequence) and len(mine) == len(pieces) and all(map(is_, mine, pieces))

    def add_to(self, blob: Blob) -> tuple[list[int], array[int], dict[str, Any] | None]:
        """What :func:`._texts.write_texts` adds and returns, from the child's work when it did it."""
        got = self._collect(blob) if self._child is not None else None
        return got if got is not None else write_texts(blob, map(_utf8, self._pieces), self._raw)

    def abandon(self) -> None:
        """Stop the child (the save failed or was interrupted) and reap it."""
        if self._child is not None:
            self._child.abandon()
            self._child = None

    def _collect(self, blob: Blob) -> tuple[list[int], array[int], dict[str, Any]] | None:
        child, self._child = self._child, None
        assert child is not None
        ok = child.succeeded()  # (interrupted while waiting: the child goes too)
        try:
            if not ok:
                return None
            with memoryview(child.shared) as view:
                head = array("q")
                head.frombytes(view[: 8 * _HEAD])
                n_blocks, total, size = head
                at = 8 * _HEAD
                columns = []
                for count in (self._count + 1, n_blocks + 1, n_blocks + 1):
                    column = array("q")
                    column.frombytes(view[at : at + 8 * count])
                    columns.append(column)
                    at += 8 * count
                ref = blob.add(bytes(view[self._start : self._start + size]))
            text_offsets, starts, block_offsets = columns
            record = blocks_record(blob, total, block_offsets, starts, self._raw)
            return ref, text_offsets, record
        finally:
            child.close()


def start_texts(pieces: Iterable[Piece], *, fork: bool) -> Texts:
    """The texts of a segment about to be written (read once), compressed in a forked child
    when ``fork`` (the caller's word that forking is safe and a core is idle) and they are
    a sequence."""
    texts = Texts(pieces, _texts.TEXT_BLOCK)
    safe = hasattr(os, "fork") and threading.active_count() == 1
    if fork and safe and _texts.COMPRESS and isinstance(pieces, Sequence):
        _fork(texts, pieces)
    return texts


def _layout(pieces: Sequence[Piece], block: int) -> tuple[int, int]:
    """Where the child's compressed bytes start in its mapping, and its size: room for the
    head and the columns with the most blocks there can be (UTF-8 takes at most 4 bytes a
    character), then the bytes (zlib never grows a block by more than a little)."""
    raw = sum(len(p) if isinstance(p, bytes) else (4 * len(p) if isinstance(p, str) else p.nbytes) for p in pieces)
    blocks = len(pieces) + raw // max(block, 1) + 1
    start = 8 * (_HEAD + len(pieces) + 1 + 2 * (blocks + 1))
    return start, start + raw + raw // 256 + 64 * blocks


def _fork(texts: Texts, pieces: Sequence[Piece]) -> None:
    block = texts._block
    start, size = _layout(pieces, block)
    # The child needs no file: closed, the index folder's lock (an inherited flock)
    # goes with this process even when it is killed before the child ends.
    raw = texts._raw
    child = start_child(size, lambda shared: _child(shared, pieces, block, start, raw), close_files=True)
    if child is not None:
        texts._child, texts._start, texts._count = child, start, len(pieces)


def _child(shared: mmap.mmap, pieces: Sequence[Piece], block: int, start: int, raw: bool) -> int:  # pragma: no cover
    # (Runs in the child.)  The compressed bytes from ``start``, then the head and the columns.
    blocks, done = compress_blocks(map(_utf8, pieces), block, raw)
    with memoryview(shared) as view:
        at = start
        for packed in blocks:
            view[at : at + len(packed)] = packed
            at += len(packed)
        n_blocks = len(done.starts) - 1
        head = array("q", [n_blocks, done.total, at - start])
        pos = 0
        for column in (head, done.text_offsets, done.starts, done.block_offsets):
            data = memoryview(column).cast("B")
            if pos + len(data) > start:
                return 1
            view[pos : pos + len(data)] = data
            pos += len(data)
            data.release()
    return 0
