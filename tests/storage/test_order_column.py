"""Impact orders saved narrow (format 6): uint16 for short lists, int32 apart for long ones, read back exactly."""

import json
import random
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clanker_rag._storage._order_column as column
from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._engine._scoring import impact_order
from clanker_rag._storage._codec import read
from clanker_rag._storage._store import Blob
from tests.engine.test_index_properties import VOCAB, build, corpus, exhaustive, query, ranked


def laid_out(lengths, seed=0):
    """Random orders of lists ``lengths`` long, laid end to end (int32), and their offsets."""
    rng = random.Random(seed)
    positions, offsets = array("i"), array("q", [0])
    for n in lengths:
        order = list(range(n))
        rng.shuffle(order)
        positions.extend(order)
        offsets.append(offsets[-1] + n)
    return positions, offsets


def saved(positions, offsets):
    blob = Blob()
    body = column.order_parts(blob, positions, offsets)
    data = memoryview(b"".join(bytes(part) for part in blob.parts))

    def view(ref, code, name):
        return data[ref[0] : ref[0] + ref[1]].cast(code)

    return column.read_orders(body, view, "here")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=12), st.integers(0, 12), st.integers(0, 99))
def test_each_order_reads_back_from_its_part_and_widens_to_what_was_saved(lengths, limit, seed):
    positions, offsets = laid_out(lengths, seed)
    old = column.SHORT_LIMIT
    column.SHORT_LIMIT = limit
    try:
        orders = saved(positions, offsets)
    finally:
        column.SHORT_LIMIT = old
    wide = orders.wide
    assert wide is not None and orders.positions.format == "H"
    assert wide.terms == [t for t, n in enumerate(lengths) if n > limit]
    assert len(orders.positions) == sum(n for n in lengths if n <= limit)
    for tid, n in enumerate(lengths):
        apart, start = wide.locate(tid, offsets[tid])
        assert apart == (n > limit)
        part = wide.positions if apart else orders.positions
        assert list(part[start : start + n]) == list(positions[offsets[tid] : offsets[tid + 1]])
    assert column.widened(orders.positions, offsets, wide) == positions


def test_a_position_past_uint16_is_refused_not_truncated():
    positions, offsets = laid_out([3])
    positions[1] = 70_000
    with pytest.raises(IndexFormatError, match="past its list's end"):
        saved(positions, offsets)


def test_wide_terms_that_do_not_match_the_offsets_are_refused():
    positions, offsets = laid_out([3, 70_000, 2])
    orders = saved(positions, offsets)
    assert orders.wide is not None and orders.wide.terms == [1]
    for terms, message in (([0], "short enough"), ([1, 1], "ascending"), ([5], "ascending")):
        with pytest.raises(IndexFormatError, match=message):
            column.read_wide(array("i", terms), orders.wide.positions, offsets, "here")
    with pytest.raises(IndexFormatError, match="wrong length"):
        column.read_wide(array("i", [1]), orders.wide.positions[1:], offsets, "here")


def saved_orders(kb):
    """Each ordered term's packed order of a loaded index, by term."""
    index = kb._index
    packed = index.orders.packed
    assert packed is not None
    terms = index.terms
    return {terms[t]: list(packed.read(t, n)) for t, n in enumerate(packed.lengths()) if n}


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(corpus, st.lists(query, min_size=1, max_size=4), st.integers(30, 42), st.integers(1, 8))
def test_orders_saved_narrow_rank_exactly_after_load_resave_and_commit(tmp_path_factory, texts, queries, limit, k):
    texts = [*texts, *([" ".join(VOCAB[:6])] * 36)]  # some lists long enough to be ordered
    kb = build(texts)
    folder = tmp_path_factory.mktemp("idx")
    old = column.SHORT_LIMIT
    column.SHORT_LIMIT = limit
    try:
        kb.save(folder / "a")
        loaded = KnowledgeBase.load(folder / "a")
        want = {}
        for tid, term in enumerate(loaded._index.terms):
            imps = loaded._index.impacts(tid)[0]
            if len(imps) > 32:
                want[term] = list(impact_order(imps))
        assert want and saved_orders(loaded) == want
        packed = loaded._index.orders.packed
        assert packed is not None and packed.wide is not None
        assert bool(packed.wide.terms) == any(len(order) > limit for order in want.values())
        assert [ranked(loaded, q, k) for q in queries] == [exhaustive(loaded, q, k) for q in queries]
        loaded.save(folder / "b")  # a whole save of a loaded index widens its orders and narrows them again
        assert saved_orders(KnowledgeBase.load(folder / "b")) == want
        loaded.add_text("t1 t2 t2 t3 " * 3, "late")
        loaded.save(folder / "b")  # a commit: a new segment beside the saved orders
        fresh = build(texts)
        fresh.add_text("t1 t2 t2 t3 " * 3, "late")
        again = KnowledgeBase.load(folder / "b")
        assert [ranked(again, q, k) for q in queries] == [ranked(fresh, q, k) for q in queries]
    finally:
        column.SHORT_LIMIT = old


def test_a_saved_index_keeps_short_orders_as_uint16(tmp_path):
    build([" ".join(VOCAB[:4])] * 40).save(tmp_path)
    (segment,) = json.loads((tmp_path / "index.json").read_text())["body"]["segments"]
    postings = read(tmp_path).segments[0].snap.postings
    assert isinstance(postings.positions, memoryview) and postings.positions.format == "H"
    assert postings.wide_orders is not None and postings.wide_orders.terms == []
    assert Path(tmp_path, segment["file"]).stat().st_size == segment["size"]
