"""Stored texts in zlib blocks: any byte range reads back exactly, however it was cached."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import IndexFormatError
from clanker_rag._storage import _texts
from clanker_rag._storage._texts import BlockTexts, compress_blocks


def packed(
    pieces: list[bytes], block: int, partial: bool = False, raw: bool = False
) -> tuple[BlockTexts, list[int], list[bytes]]:
    """The pieces compressed in blocks of about ``block`` bytes: a reader, their offsets and the blocks
    (``partial``: the reader inflates a block only as far as a read needs; ``raw``: raw deflate blocks)."""
    blocks, done = compress_blocks(pieces, block, raw)
    out = list(blocks)
    blob = b"".join(out)

    def read(offset: int, length: int) -> bytes:
        return blob[offset : offset + length]

    texts = BlockTexts(read, done.block_offsets, done.total, "t", starts=done.starts, partial=partial, raw=raw)
    return texts, list(done.text_offsets), out


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=12),
    st.sampled_from([1, 3, 8, 32, 4096]),
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 500)), max_size=20),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
)
def test_any_range_reads_back_exactly_whatever_the_cache_holds(pieces, block, ranges, cached, partial, raw):
    was = _texts.CACHED
    _texts.CACHED = cached  # a tiny cache: partial and whole blocks evicted and read again
    try:
        texts, offsets, blocks = packed(pieces, block, partial, raw)
        # Raw deflate streams (no zlib header or Adler-32) or zlib streams, as asked.
        assert b"".join(zlib.decompress(b, -15 if raw else 15) for b in blocks) == b"".join(pieces)
        whole = b"".join(pieces)
        for i, piece in enumerate(pieces):
            assert texts(offsets[i], offsets[i + 1]) == piece
        for a, b in ranges:
            a, b = min(a, len(whole)), min(b, len(whole))
            assert texts(a, b) == whole[a:b]
        # Short prefixes first, then the whole: a partly inflated block is inflated further.
        for end in range(len(whole) + 1):
            assert texts(0, end) == whole[:end]
    finally:
        _texts.CACHED = was


@settings(max_examples=80, deadline=None)
@given(st.lists(st.binary(max_size=70), max_size=12), st.sampled_from([1, 8, 32, 64]))
def test_blocks_end_where_texts_end_unless_a_text_is_longer_than_a_block(pieces, block):
    blocks, done = compress_blocks(pieces, block)
    out = [zlib.decompress(b) for b in blocks]
    starts, offsets = list(done.starts), set(done.text_offsets)
    assert b"".join(out) == b"".join(pieces) and len(starts) == len(out) + 1
    for data, a, b in zip(out, starts, starts[1:]):
        assert len(data) == b - a <= max(block, 1)
        # A block is cut inside a text only at multiples of the block size from that text's start.
        if b not in offsets:
            (owner,) = [i for i in range(len(pieces)) if done.text_offsets[i] < b < done.text_offsets[i + 1]]
            assert (b - done.text_offsets[owner]) % block == 0 and len(pieces[owner]) > block
        # A text that fits in a block is never cut: it starts a block when it would not fit.
    for i, piece in enumerate(pieces):
        a, b = done.text_offsets[i], done.text_offsets[i + 1]
        if 0 < len(piece) <= block:
            assert sum(1 for s in starts[1:-1] if a < s < b) == 0


def test_a_damaged_block_is_a_format_error_not_a_wrong_text():
    texts, offsets, blocks = packed([b"hello world " * 20], 64)
    blob = bytearray(b"".join(blocks))
    blob[len(blocks[0]) - 3] ^= 0xFF  # the first block's checksum

    reader = BlockTexts(
        lambda o, n: bytes(blob[o : o + n]), offsets_of(blocks), 240, "t", starts=[0, 64, 128, 192, 240]
    )
    with pytest.raises(IndexFormatError, match="does not decompress"):
        reader(0, 64)
    with pytest.raises(IndexFormatError, match="do not cover"):
        BlockTexts(lambda o, n: b"", [0, 1], 240, "t", starts=[0, 100])
    assert texts(0, offsets[1]) == b"hello world " * 20


def offsets_of(blocks: list[bytes]) -> list[int]:
    out = [0]
    for block in blocks:
        out.append(out[-1] + len(block))
    return out
