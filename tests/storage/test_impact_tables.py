"""Lookup tables saved with an index: same scores as binary search, used only while current, checked at load."""

import json
import zlib
from array import array
from contextlib import contextmanager
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clanker_rag._engine._lookups as lookups_module
import clanker_rag._storage._impact_tables as tables_module
from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._engine._pruning import probe
from clanker_rag._storage import _segments, _store
from clanker_rag._storage._codec import read
from clanker_rag._storage._deflate import deflate
from clanker_rag._storage._impact_tables import (
    LookupTables,
    StoredTables,
    build_tables,
    check_tables,
    lookup,
    pack_tables,
)
from tests.engine.test_index_properties import VOCAB, build, corpus, exhaustive, query, ranked


@contextmanager
def tables_for_every_list(slot_limit=tables_module.SLOT_LIMIT):
    """Save a table for every list (not only those of big indexes); lists of
    ``slot_limit`` postings or more get dense tables."""
    names = ("STORED_MIN", "STORED_SHARE", "SLOT_LIMIT")
    old = [getattr(tables_module, name) for name in names]
    for name, value in zip(names, (1, 10**9, slot_limit)):
        setattr(tables_module, name, value)
    try:
        yield
    finally:
        for name, value in zip(names, old):
            setattr(tables_module, name, value)


def no_probes(*args):
    raise AssertionError("a list with a saved table was binary-searched")


@settings(max_examples=60, deadline=None)
@given(corpus, st.lists(query, min_size=1, max_size=5), st.integers(1, 12), st.integers(1, 12))
def test_saved_tables_rank_exactly_as_exhaustive_scoring(tmp_path_factory, texts, queries, k, slot_limit):
    kb = build(texts)
    folder = tmp_path_factory.mktemp("idx")
    with tables_for_every_list(slot_limit):
        kb.save(folder)
    loaded = KnowledgeBase.load(folder)
    assert loaded._index.lookups.saved is not None
    before = [ranked(kb, q, k) for q in queries]
    # Without its saved table, every lookup in a list would binary-search it.
    saved = lookups_module.probe, lookups_module.PROBE_SHARE  # type: ignore[attr-defined]
    lookups_module.probe, lookups_module.PROBE_SHARE = no_probes, 0  # type: ignore[attr-defined]
    try:
        after = [ranked(loaded, q, k) for q in queries]
    finally:
        lookups_module.probe, lookups_module.PROBE_SHARE = saved  # type: ignore[attr-defined]
    # Bit for bit the scores of the index before the save, and of exhaustive scoring.
    assert after == before == [exhaustive(loaded, q, k) for q in queries]
    assert not loaded._index.lookups.cache.entries, "no table should be built where one was saved"


def test_both_kinds_of_table_give_each_impact_and_zero_where_absent():
    # Lists: term 0 in chunks 1, 3 (slots); term 1 in 0, 2, 3 (dense, at limit 3).
    offsets = array("q", [0, 2, 5])
    chunks = array("i", [1, 3, 0, 2, 3])
    impacts = array("f", [0.5, 1.5, 2.0, 0.25, 4.0])
    with tables_for_every_list(slot_limit=3):
        parts = build_tables(offsets, chunks, impacts, 5)
    assert list(parts.slot_terms) == [0] and list(parts.dense_terms) == [1]
    assert list(parts.slots[0]) == [0, 1, 0, 2, 0]
    assert list(parts.dense[0]) == [2.0, 0.0, 0.25, 4.0, 0.0]
    slots = deflate(parts.slots[0].tobytes(), tables_module.LEVEL)
    tables = LookupTables(
        5, parts.dense_terms, array("f", parts.dense[0]), parts.slot_terms, memoryview(slots), impacts, offsets,
        array("q", [0, len(slots)]),
    )  # fmt: skip
    cands = [4, 3, 2, 1, 0]
    check_tables(tables, 2, "here")
    stored = StoredTables(tables, "here")
    for tid, length in ((0, 2), (1, 3)):
        table = stored.table(tid, length)
        assert table is not None
        a, b = offsets[tid], offsets[tid + 1]
        assert list(lookup(table, cands)) == list(probe(chunks[a:b], impacts[a:b], 1.0, cands))
    assert stored.table(2, 7) is None
    with pytest.raises(IndexFormatError, match="does not match its posting list"):
        StoredTables(tables, "here").table(0, 3)


def test_small_indexes_and_short_lists_get_no_tables():
    offsets = array("q", [0, 3, 300])
    chunks = array("i", [0, 1, 2, *range(297)])
    impacts = array("f", [1.0] * 300)
    parts = build_tables(offsets, chunks, impacts, 400)
    # Term 0 is short; term 1 holds 297 of 400 chunks and STORED_MIN postings.
    assert list(parts.slot_terms) == [1] and not parts.dense_terms
    parts = build_tables(offsets, chunks, impacts, 297 * tables_module.STORED_SHARE + 1)
    assert not parts.slot_terms, "a list under 1/STORED_SHARE of the chunks gets no table"


SLOTS = deflate(array("H", [0] * 5).tobytes(), 1)


@pytest.mark.parametrize(
    "change",
    [
        {"n_chunks": 4},
        {"slot_spans": array("q", [0, len(SLOTS) - 1])},
        {"slot_spans": array("q", [0])},
        {"slot_terms": array("i", [5])},
        {"dense": array("f", [0.0] * 4)},
        {"dense_terms": array("i", [1, 1])},
        {"offsets": array("q", [0, 3])},
    ],
)
def test_inconsistent_tables_are_refused(change):
    good = LookupTables(
        5,
        array("i", [1]),
        array("f", [0.0] * 5),
        array("i", [0]),
        memoryview(SLOTS),
        array("f", [1.0, 2.0, 3.0]),
        array("q", [0, 2, 3]),
        array("q", [0, len(SLOTS)]),
    )
    check_tables(good, 2, "here")
    with pytest.raises(IndexFormatError, match="lookup tables"):
        check_tables(good._replace(**change), 2, "here")


def test_tables_stop_serving_once_an_add_changes_the_statistics(tmp_path):
    texts = [" ".join(VOCAB[i % 7 : i % 7 + 5]) for i in range(30)]
    kb = build(texts)
    with tables_for_every_list():
        kb.save(tmp_path)
    loaded = KnowledgeBase.load(tmp_path)
    loaded.add_text("t1 t2 t2 t3", "late")
    fresh = build(texts)
    fresh.add_text("t1 t2 t2 t3", "late")
    for q in ("t1 t2", "t3 t4 t5", "t2"):
        assert ranked(loaded, q, 10) == ranked(fresh, q, 10) == exhaustive(loaded, q, 10)


lists = st.lists(st.lists(st.integers(0, 59), max_size=60).map(lambda c: sorted(set(c))), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(lists, st.integers(1, 70))
def test_packed_slot_tables_inflate_to_the_tables_built(lists, slot_limit):
    offsets = array("q", [0])
    chunks = array("i")
    for docs in lists:
        chunks.extend(docs)
        offsets.append(len(chunks))
    impacts = array("f", [float(i % 13) + 0.5 for i in range(len(chunks))])
    with tables_for_every_list(slot_limit):
        built = build_tables(offsets, chunks, impacts, 60)
        packed = pack_tables(offsets, chunks, impacts, 60)
    assert packed.slot_terms == built.slot_terms and packed.dense_terms == built.dense_terms
    assert [bytes(d) for d in packed.dense] == [bytes(d) for d in built.dense]
    assert [zlib.decompress(p, -15) for p in packed.slots] == [bytes(s) for s in built.slots]
    spans = array("q", accumulate(map(len, packed.slots), initial=0))
    dense = array("f", b"".join(map(bytes, packed.dense)))
    slots = memoryview(b"".join(packed.slots))
    tables = LookupTables(60, packed.dense_terms, dense, packed.slot_terms, slots, impacts, offsets, slot_spans=spans)
    check_tables(tables, len(lists), "here")
    stored = StoredTables(tables, "here")
    cands = list(range(60))
    for tid in range(len(lists)):
        a, b = offsets[tid], offsets[tid + 1]
        table = stored.table(tid, b - a)
        if table is not None:
            assert list(lookup(table, cands)) == list(probe(chunks[a:b], impacts[a:b], 1.0, cands))


def packed_one(payload):
    """Tables of 4 chunks whose one slot table (term 0: chunks 1, 3) is saved as ``payload``."""
    return LookupTables(
        4,
        array("i"),
        array("f"),
        array("i", [0]),
        payload,
        array("f", [0.5, 1.5]),
        array("q", [0, 2]),
        slot_spans=array("q", [0, len(payload)]),
    )


def test_a_packed_slot_table_reads_back():
    good = packed_one(deflate(array("H", [0, 1, 0, 2]).tobytes(), tables_module.LEVEL))
    check_tables(good, 1, "here")
    table = StoredTables(good, "here").table(0, 2)
    assert table is not None and list(lookup(table, [0, 1, 2, 3])) == [0.0, 0.5, 0.0, 1.5]


@pytest.mark.parametrize(
    "payload",
    [
        b"not a zlib stream at all",
        deflate(array("H", [0, 1, 0]).tobytes(), tables_module.LEVEL),  # a slot short
        deflate(array("H", [0, 1, 0, 2, 0]).tobytes(), tables_module.LEVEL),  # a slot over
        deflate(array("H", [0, 1, 0, 2]).tobytes(), tables_module.LEVEL)[:-3],  # cut short
    ],
    ids=["garbage", "short", "long", "truncated"],
)
def test_a_packed_slot_table_that_does_not_inflate_to_its_slots_is_refused_when_first_used(payload):
    tables = packed_one(payload)
    check_tables(tables, 1, "here")  # the O(tables) checks at load cannot see inside a table
    with pytest.raises(IndexFormatError, match="lookup table 0 does not inflate"):
        StoredTables(tables, "here").table(0, 2)


@pytest.mark.parametrize(
    "spans", [array("q", [1, 9]), array("q", [0, 8]), array("q", [0]), array("q", [0, 0])], ids=str
)
def test_packed_slot_spans_that_do_not_fit_their_part_are_refused(spans):
    tables = packed_one(deflate(array("H", [0, 1, 0, 2]).tobytes(), tables_module.LEVEL))
    with pytest.raises(IndexFormatError, match="lookup tables"):
        check_tables(tables._replace(slot_spans=spans), 1, "here")


def test_a_flipped_bit_in_a_saved_slot_table_fails_when_its_term_is_first_searched(tmp_path, monkeypatch):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 64)
    texts = [" ".join(VOCAB[i % 7 : i % 7 + 5]) for i in range(60)]
    with tables_for_every_list():
        build(texts).save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)  # as if big: checked block by block
    seg = read(tmp_path).segments[0].snap
    tables = seg.postings.tables
    assert tables is not None and tables.slot_spans is not None and len(tables.slot_terms) > 2
    i = len(tables.slot_terms) // 2
    term = seg.postings.terms[tables.slot_terms[i]]
    at = (tables.slot_spans[i] + tables.slot_spans[i + 1]) // 2  # a byte inside table i
    (record,) = json.loads((tmp_path / "index.json").read_text())["body"]["segments"]
    (path,) = tmp_path.glob("data-*.bin")
    data = bytearray(path.read_bytes())
    off, length = record["body"]
    data[json.loads(data[off : off + length])["tables"]["slots"][0] + at] ^= 0x01
    path.write_bytes(data)
    kb = KnowledgeBase.load(tmp_path)  # the table is not read at load
    assert kb.search(VOCAB[0])
    with pytest.raises(IndexFormatError, match="checksum"):
        kb.search(term)


def test_a_flipped_bit_in_a_saved_dense_table_fails_only_where_a_lookup_reads_it(tmp_path, monkeypatch):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 64)  # 16 impacts a block
    texts = [" ".join(VOCAB[i % 7 : i % 7 + 5]) for i in range(200)]
    with tables_for_every_list(slot_limit=1):  # every list gets a dense table
        build(texts).save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)  # as if big: checked block by block
    tables = read(tmp_path).segments[0].snap.postings.tables
    assert tables is not None and len(tables.dense_terms) > 1 and tables.n_chunks == 200
    i, n = 1, tables.n_chunks
    tid = tables.dense_terms[i]
    bad = 150  # the chunk whose impact is damaged, in a block of its own beside chunks 0..15
    (record,) = json.loads((tmp_path / "index.json").read_text())["body"]["segments"]
    (path,) = tmp_path.glob("data-*.bin")
    data = bytearray(path.read_bytes())
    off, length = record["body"]
    data[json.loads(data[off : off + length])["tables"]["dense"][0] + 4 * (i * n + bad)] ^= 0x40
    path.write_bytes(data)
    tables = read(tmp_path).segments[0].snap.postings.tables
    assert tables is not None
    stored = StoredTables(tables, "here")
    a, b = tables.offsets[tid], tables.offsets[tid + 1]
    table = stored.table(tid, b - a)  # reading the table verifies none of it yet
    assert table is not None
    clean = [0, 3, 15]
    expected = list(probe(array("i", tables_chunks(tmp_path, a, b)), tables.impacts[a:b], 1.0, clean))
    assert list(lookup(table, clean)) == expected
    with pytest.raises(IndexFormatError, match="checksum"):
        lookup(table, [2, bad])


def tables_chunks(folder, a, b):
    """The chunk ids of postings ``a .. b - 1`` of the index saved in ``folder``."""
    return read(folder).segments[0].snap.postings.chunks[a:b]


@pytest.mark.parametrize("start", [0, 2])  # items within blocks, and items that straddle two
def test_item_checks_verify_the_blocks_that_hold_the_items_read(start):
    clean = bytes(range(256))  # 16 blocks of 16 bytes
    damaged = bytearray(clean)
    damaged[85] ^= 0x01  # in block 5: bytes 80 .. 95
    blocks = _segments.BlockCheck(memoryview(bytes(damaged)), _segments.block_crcs([clean], 16), 16, 256, "here")
    part = blocks.part([start, 240], 4)  # 60 items of 4 bytes from byte ``start``
    part.items(0, 60, [0, 1, 18, 30, 59])  # blocks 0, 4, 7, 8, 14 (and 15 when straddling)
    part.items(10, 50, [8])  # item 18 again, through an offset
    below = (80 - start) // 4 - 1  # the last item wholly before block 5 (the next one reaches into it)
    part.items(0, 60, [below])
    with pytest.raises(IndexFormatError, match="checksum mismatch in block 5"):
        part.items(0, 60, [3, below + 1])
    with pytest.raises(IndexFormatError, match="checksum mismatch in block 5"):
        part(0, 60)  # a range check still reads every block
    with pytest.raises(IndexFormatError, match="checksum mismatch in block 5"):
        # As many items as the range has blocks: the whole range is verified at once.
        part.items(0, 60, [0] * 16)
