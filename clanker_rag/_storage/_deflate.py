"""Raw deflate streams (RFC 1951) for the parts of a segment its block checksums cover.

A zlib stream adds a 2-byte header and an Adler-32 that inflating computes
over every byte it gives back: a sixth of inflating a slot table, and of a
text block.  Where the segment's block CRCs already vouch for the stream's
bytes (slot tables, and text blocks) the stream is saved
raw, and read with ``zlib.decompress(..., RAW_WBITS)``.
"""

from __future__ import annotations

import zlib

__all__ = ["RAW_WBITS", "deflate"]

# zlib's wbits for a raw deflate stream: a 32 KiB window, no header, no trailer.
RAW_WBITS = -15


def deflate(data: bytes | memoryview, level: int) -> bytes:
    """``data`` as one raw deflate stream at zlib ``level``."""
    packer = zlib.compressobj(level, zlib.DEFLATED, RAW_WBITS)
    return packer.compress(data) + packer.flush()
