"""Stored texts compressed with zlib in blocks, decompressed on demand and cached.

A segment's source texts are laid end to end in UTF-8 and cut into blocks,
each compressed on its own (``zlib``, level ``LEVEL``): a text is found by
its uncompressed offsets, and reading it decompresses only the
blocks that hold it.  A block ends where a text ends: a text opens a new
block when it would not fit whole in the current one's ``TEXT_BLOCK``
bytes, and only a text longer than that spans blocks (cut every
``TEXT_BLOCK`` bytes).  Cutting at fixed offsets made three hits in ten
straddle two blocks and decompress both: on the stdlib corpus the aligned
blocks decompress a fifth fewer bytes and calls per query, for a 20% larger
texts part (12.8 against 10.4 MB; 47 MB raw).
The last ``CACHED`` blocks read are kept, so the hits of one query, which
often share a file, decompress each block once, and a query asked again
decompresses nothing.

Small blocks keep a hit cheap: a 4 KiB block decompresses in 10-30
microseconds, about 8 of them a fixed cost of the call, so 1 KiB blocks do
not save time.  Larger blocks compress better (zlib's window sees more of
the text before): 8 KiB blocks take 7-10 % fewer bytes than 4 KiB
on whole source files (stdlib, site-packages, Debian docs) and faster to
compress, a fifth fewer on the benchmarks' overlapping windows.  When the
segment's checksums vouch for the compressed bytes a read inflates a block
only up to the end of what it needs (``BlockTexts(partial=True)``), so a hit
costs half a block on average, as a whole 4 KiB block did.
"""

from __future__ import annotations

import zlib
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate, islice
from operator import ge
from typing import Any

from .._exceptions import IndexFormatError
from ._deflate import RAW_WBITS, deflate
from ._offset_column import narrowest
from ._store import Blob

__all__ = ["CACHED", "COMPRESS", "LEVEL", "TEXT_BLOCK", "BlockTexts", "blocks_record", "compress_blocks", "write_texts"]

# On: the texts are most of a folder's bytes.  On the stdlib corpus (30k
# chunks) they go from 47.2 to 12.8 MB, for about 0.15 ms a query of 10 hits
# decompressing (see bench/results/h28size.md).
COMPRESS = True
TEXT_BLOCK = 8 * 1024
LEVEL = 1
# Blocks kept decompressed, per segment: at most 16 MiB of 8 KiB blocks.  500
# queries of 10 hits on the stdlib corpus read about 2,000 of them: kept, the
# same queries again (an agent asking again, a proxy's repeated question) cost
# what they did with plain texts; 256 blocks kept added 0.2 ms to each.
CACHED = 2048


class Compressed:
    """What :func:`compress_blocks` produced, complete once its blocks are consumed."""

    __slots__ = ("block_offsets", "starts", "text_offsets", "total")

    def __init__(self) -> None:
        self.text_offsets = array("q", [0])  # each piece's uncompressed offsets (n + 1)
        self.block_offsets = array("q", [0])  # where each block starts in the compressed bytes (blocks + 1)
        self.starts = array("q", [0])  # where each block starts in the uncompressed bytes (blocks + 1)
        self.total = 0


# Pieces joined and cut into blocks at a time: a few megabytes in memory at once,
# and one C-level join and a few passes per window instead of Python steps per piece.
_WINDOW = 4096


def _packer(raw: bool) -> Callable[[bytes | memoryview], bytes]:
    if not raw:
        return lambda data: zlib.compress(data, LEVEL)
    return lambda data: deflate(data, LEVEL)


def compress_blocks(
    pieces: Iterable[bytes | memoryview], block: int, raw: bool = False
) -> tuple[Iterator[bytes], Compressed]:
    """``pieces`` laid end to end, cut into blocks that end where a piece ends
    (a piece longer than ``block`` bytes is cut every ``block`` bytes), each
    compressed: a zlib stream, or with ``raw`` a raw deflate stream (when the
    segment's block checksums cover the bytes: no Adler-32 to compute
    on every read, nor 6 bytes of header and trailer a block).  The blocks are
    produced as they are consumed; the offsets are complete once they are."""
    out = Compressed()
    pack = _packer(raw)

    def blocks() -> Iterator[bytes]:
        offsets, starts = out.text_offsets, out.starts
        it = iter(pieces)
        carry: bytes | memoryview = b""  # the bytes of the block still open, from ``begin``
        begin = pos = 0
        while window := list(islice(it, _WINDOW)):
            window = [p if isinstance(p, bytes) or p.format == "B" else p.cast("B") for p in window]
            lengths = list(map(len, window))
            data = b"".join([carry, *window])
            base = begin
            first = len(starts)
            # Where blocks end: a Python step per piece, but only integer arithmetic.
            for n in lengths:
                if pos > begin and pos + n - begin > block:
                    starts.append(pos)  # the piece opens a block of its own
                    begin = pos
                pos += n
                if pos - begin > block:  # a piece longer than a block: cut every ``block`` bytes
                    cuts = (pos - begin - 1) // block
                    starts.extend(range(begin + block, begin + cuts * block + 1, block))
                    begin += cuts * block
            ends_of = accumulate(lengths, initial=offsets[-1])
            next(ends_of)  # (the last offset again)
            offsets.extend(ends_of)
            view = memoryview(data)
            ends = starts[first:]
            for a, b in zip(starts[first - 1 : -1], ends):
                packed = pack(view[a - base : b - base])
                out.block_offsets.append(out.block_offsets[-1] + len(packed))
                yield packed
            carry = view[begin - base :]
        if pos > begin:
            starts.append(pos)
            packed = pack(carry)
            out.block_offsets.append(out.block_offsets[-1] + len(packed))
            yield packed
        out.total = pos

    return blocks(), out


def write_texts(
    blob: Blob, pieces: Iterable[bytes | memoryview], raw: bool = False
) -> tuple[list[int], array[int], dict[str, Any] | None]:
    """Add the texts to ``blob``: the part's range, each text's offsets (uncompressed
    when compressed), and the body's ``text_blocks`` record (None: not compressed);
    ``raw``: raw deflate blocks (see :func:`compress_blocks`)."""
    if not COMPRESS:
        ref, offsets = blob.run(pieces)
        return ref, offsets, None
    blocks, packed = compress_blocks(pieces, TEXT_BLOCK, raw)
    # One part: a part per block would be a Python step each in the checksums and the writes.
    ref = blob.add(b"".join(blocks))
    return ref, packed.text_offsets, blocks_record(blob, packed.total, packed.block_offsets, packed.starts, raw)


def blocks_record(blob: Blob, total: int, block_offsets: array[int], starts: array[int], raw: bool) -> dict[str, Any]:
    """The body's ``text_blocks``: the uncompressed total and the block tables, added to ``blob``
    as uint32 when they fit (``type``: both count bytes of at most ``total``), else int64;
    ``raw``: the blocks are raw deflate streams, else zlib streams."""
    code = narrowest(max(total, block_offsets[-1] if block_offsets else 0))
    return {
        "bytes": total,
        "offsets": blob.array(array(code, block_offsets)),
        "starts": blob.array(array(code, starts)),
        "type": code,
        "raw": raw,
    }


class BlockTexts:
    """Uncompressed byte ranges of compressed texts; ``read(offset, length)`` reads the compressed part.

    ``starts`` are the blocks' uncompressed starts and the total (blocks + 1).
    """

    __slots__ = ("_cache", "_offsets", "_partial", "_pending", "_read", "_starts", "_total", "_wbits", "where")

    def __init__(
        self,
        read: Callable[[int, int], bytes | memoryview],
        offsets: Sequence[int],
        total: int,
        where: str,
        starts: Sequence[int],
        *,
        before: Callable[[], None] | None = None,
        partial: bool = False,
        raw: bool = False,
    ) -> None:
        """``before`` (a lazily checked segment's block checks of ``offsets`` and
        ``starts``) defers the O(blocks) checks of the block tables to the
        first read, which runs ``before`` first; without it they run now.

        ``partial``: the compressed bytes are vouched for by a checksum of their
        own (the segment's block CRCs, or the whole file hashed at load), so a read
        may inflate a block only up to the end of what it needs (zlib checks its
        own Adler-32 only at a stream's end); otherwise every block is inflated whole.
        ``raw``: the blocks are raw deflate streams, not zlib streams."""
        self._read = read
        self._partial = partial
        self._wbits = RAW_WBITS if raw else zlib.MAX_WBITS
        self._offsets = offsets
        self._starts = starts
        self._total = total
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self.where = where
        self._pending = before
        if before is None:
            self._check(starts)

    def _check(self, starts: Sequence[int]) -> None:
        offsets, total = self._offsets, self._total
        ok = len(starts) == len(offsets) and starts[0] == 0 and starts[len(starts) - 1] == total
        if not ok or any(map(ge, starts[:-1], starts[1:])) or any(map(ge, offsets[:-1], offsets[1:])):
            raise IndexFormatError(f"{self.where}: the text blocks do not cover the texts")

    def __call__(self, a: int, b: int) -> bytes:
        if b <= a:
            return b""
        pending = self._pending
        if pending is not None:  # checked on the first read
            pending()
            self._check(self._starts)
            self._pending = None
        starts = self._starts
        first = bisect_right(starts, a) - 1
        last = first if b <= starts[first + 1] else bisect_right(starts, b - 1) - 1
        need = b - starts[last]  # of the last block: a text's bytes end there
        if first == last:
            data = self._block(first, need)
        else:
            data = b"".join([*map(self._block, range(first, last)), self._block(last, need)])
        base = starts[first]
        return data[a - base : b - base]

    def _block(self, k: int, need: int = -1) -> bytes:
        """Block ``k`` inflated, or (``partial``) at least its first ``need`` bytes."""
        cache = self._cache
        found = cache.get(k)
        if found is not None and ((need >= 0 and len(found) >= need) or len(found) == self._size_of(k)):
            cache.move_to_end(k)
            return found
        start, end = self._offsets[k], self._offsets[k + 1]
        size = self._size_of(k)
        try:
            if self._partial and 0 <= need < size:
                # A prefix: a hit costs the bytes up to its end, half a block on average.
                data = zlib.decompressobj(self._wbits).decompress(self._read(start, end - start), need)
                size = need
            else:  # sized at once: no copy as the output grows
                data = zlib.decompress(self._read(start, end - start), self._wbits, max(size, 1))
        except zlib.error as exc:
            raise IndexFormatError(f"{self.where}: a text block does not decompress ({exc})") from None
        if len(data) != size:
            raise IndexFormatError(f"{self.where}: a text block holds {len(data)} bytes, not {size}")
        cache[k] = data
        if len(cache) > CACHED:
            cache.popitem(last=False)
        return data

    def _size_of(self, k: int) -> int:
        return min(self._starts[k + 1], self._total) - self._starts[k]
