"""Removed chunks held in the lists and swept when each list is read equal the same chunks removed at once.

``InvertedIndex.hold`` leaves a removed chunk's postings in the lists; each
list drops the chunks held since it was last swept when it is next folded
(binary search for a few beside a long list, else a pass over the chunk
lengths: both ways are run here), and ``drop_held`` sweeps the rest by the
terms it is given, or every list when those miss a posting.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._engine import _held
from clanker_rag._engine._index import InvertedIndex
from clanker_rag._engine._scoring import BM25

N_TERMS = 6


def built(chunks: list[dict[int, int]]) -> InvertedIndex:
    index = InvertedIndex(BM25())
    tids = index.ids_of([f"t{i}" for i in range(N_TERMS)])
    for cid, counts in enumerate(chunks):
        index.add(cid, {tids[t]: tf for t, tf in counts.items()})
    index.refresh()  # packed lists, as a load has them
    return index


def lists(index: InvertedIndex) -> list[tuple[list[int], list[int]]]:
    return [(list(index.fold(tid)), list(index.tfs_of(tid))) for tid in range(N_TERMS)]


chunk = st.dictionaries(st.integers(0, N_TERMS - 1), st.integers(1, 4), min_size=1, max_size=N_TERMS)
step = st.one_of(
    st.tuples(st.just("remove"), st.integers(0, 59)), st.tuples(st.just("read"), st.integers(0, N_TERMS - 1))
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    st.lists(chunk, min_size=1, max_size=60),
    st.lists(step, max_size=40),
    st.sampled_from([1, 32, 10**9]),
    st.booleans(),
)
def test_lists_swept_on_read_equal_removal_at_once(chunks, steps, share, settle):
    saved, _held.SCAN_SHARE = _held.SCAN_SHARE, share  # 10**9: always a pass; 1: binary search for short lists too
    try:
        check_swept(chunks, steps, settle)
    finally:
        _held.SCAN_SHARE = saved


def check_swept(chunks: list[dict[int, int]], steps: list[tuple[str, int]], settle: bool) -> None:
    lazy, eager = built(chunks), built(chunks)
    terms = {cid: [f"t{t}" for t in counts] for cid, counts in enumerate(chunks)}
    gone: set[int] = set()
    for kind, arg in steps:
        if kind == "remove":
            cid = arg % len(chunks)
            if cid in gone:
                continue
            gone.add(cid)
            lazy.hold(cid)
            lazy.forget(cid)
            assert eager.remove(cid, terms[cid]) == eager.dl[cid]
            eager.forget(cid)
        else:  # one list read: it holds no removed chunk from then on
            docs = list(lazy.fold(arg))
            assert docs == list(eager.fold(arg)) and not gone.intersection(docs)
    if settle:
        assert lazy.drop_held(terms.__getitem__) == []
        assert len(lazy.held) == 0
    assert lists(lazy) == lists(eager)
    assert [lazy.df(f"t{i}") for i in range(N_TERMS)] == [eager.df(f"t{i}") for i in range(N_TERMS)]
    weights = {tid: 1.0 for tid in range(N_TERMS)}
    assert lazy.top_k(weights, 10) == eager.top_k(weights, 10)
    assert lazy.score_all(weights) == eager.score_all(weights)


@settings(max_examples=60, deadline=None)
@given(st.lists(chunk, min_size=2, max_size=30), st.data())
def test_terms_that_miss_a_posting_sweep_every_list(chunks, data):
    index, eager = built(chunks), built(chunks)
    cid = data.draw(st.integers(0, len(chunks) - 1))
    held_terms = [f"t{t}" for t in chunks[cid]]
    missed = data.draw(st.sampled_from(held_terms))
    index.hold(cid)
    index.forget(cid)
    eager.remove(cid, held_terms)
    eager.forget(cid)
    # The analyser gives one term fewer than was indexed: its list is swept all the same.
    assert index.drop_held(lambda c: [t for t in held_terms if t != missed]) == [cid]
    assert lists(index) == lists(eager)
