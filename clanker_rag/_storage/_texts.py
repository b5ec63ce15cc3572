"""Stored texts compressed with zlib in blocks, decompressed on demand and cached.

A segment's source texts are laid end to end and cut into ``TEXT_BLOCK``
bytes of UTF-8, each block compressed on its own (``zlib``, level
``LEVEL``): a text is found by its uncompressed offsets, as before, and
reading it decompresses only the blocks that hold it.  Small blocks keep a
hit cheap (a 4 KiB block decompresses in about ten microseconds; 16 KiB
blocks cost 15% of the stdlib corpus's query time) while still compressing
source code and prose well; the last ``CACHED`` blocks read are kept, so the
hits of one query, which often share a file, decompress each block once.
"""

from __future__ import annotations

import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Union

from .._exceptions import IndexFormatError

__all__ = ["CACHED", "COMPRESS", "LEVEL", "TEXT_BLOCK", "BlockTexts", "compress_blocks"]

# Off by default: on the stdlib corpus compression takes the folder from 139.6 to
# 105 MB but costs about a fifth of the single-segment queries/s (each hit
# decompresses its block: 0.6 ms a query of 10 hits at 30k chunks) and an
# eighth more build time; the reader takes either.
COMPRESS = False
TEXT_BLOCK = 4 * 1024
LEVEL = 6
CACHED = 256

Ints = Union["array[int]", "memoryview[int]"]


def compress_blocks(
    pieces: Iterable[bytes | memoryview], block: int
) -> tuple[Iterator[bytes], array[int], array[int], list[int]]:
    """``pieces`` laid end to end, cut into ``block``-byte blocks, each compressed:
    ``(compressed blocks, where each block starts in them (n + 1), each piece's
    uncompressed offsets (n + 1), [uncompressed total])``.  The blocks are
    produced as they are consumed; the offsets are complete once they are."""
    text_offsets = array("q", [0])
    block_offsets = array("q", [0])
    total = [0]

    def blocks() -> Iterator[bytes]:
        buf = bytearray()
        for piece in pieces:
            buf += piece
            text_offsets.append(text_offsets[-1] + len(memoryview(piece).cast("B")))
            while len(buf) >= block:
                out = zlib.compress(bytes(buf[:block]), LEVEL)
                del buf[:block]
                block_offsets.append(block_offsets[-1] + len(out))
                yield out
        if buf:
            out = zlib.compress(bytes(buf), LEVEL)
            block_offsets.append(block_offsets[-1] + len(out))
            yield out
        total[0] = text_offsets[-1]

    return blocks(), block_offsets, text_offsets, total


class BlockTexts:
    """Uncompressed byte ranges of compressed texts; ``read(offset, length)`` reads the compressed part."""

    __slots__ = ("_cache", "_offsets", "_read", "_size", "_total", "where")

    def __init__(
        self, read: Callable[[int, int], bytes | memoryview], offsets: Ints, size: int, total: int, where: str
    ) -> None:
        if size <= 0 or len(offsets) != -(-total // size) + 1:
            raise IndexFormatError(f"{where}: the text blocks do not cover the texts")
        self._read = read
        self._offsets = offsets
        self._size = size
        self._total = total
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self.where = where

    def __call__(self, a: int, b: int) -> bytes:
        if b <= a:
            return b""
        size = self._size
        first, last = a // size, (b - 1) // size
        data = self._block(first) if first == last else b"".join(map(self._block, range(first, last + 1)))
        base = first * size
        return data[a - base : b - base]

    def _block(self, k: int) -> bytes:
        cache = self._cache
        found = cache.get(k)
        if found is not None:
            cache.move_to_end(k)
            return found
        start, end = self._offsets[k], self._offsets[k + 1]
        try:
            data = zlib.decompress(self._read(start, end - start))
        except zlib.error as exc:
            raise IndexFormatError(f"{self.where}: a text block does not decompress ({exc})") from None
        if len(data) != min(self._size, self._total - k * self._size):
            raise IndexFormatError(f"{self.where}: a text block holds {len(data)} bytes, not {self._size}")
        cache[k] = data
        if len(cache) > CACHED:
            cache.popitem(last=False)
        return data
