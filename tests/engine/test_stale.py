"""Packed impacts under changed statistics (``_stale``): the bounds hold, and searches stay exact."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import Analyzer, KnowledgeBase
from clanker_rag._engine import _index, _search, _stale
from clanker_rag._engine._scoring import BM25, norm_values, term_impacts

VOCAB = [f"t{i}" for i in range(12)]
plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)
variants = st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"])


@contextmanager
def patched(*places: tuple[Any, str, Any]) -> Iterator[None]:
    """Module constants set for a block (hypothesis runs many examples in one test call)."""
    old = [getattr(module, name) for module, name, _ in places]
    for module, name, value in places:
        setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name, _), value in zip(places, old):
            setattr(module, name, value)


def impact(bm: BM25, n: int, total: int, df: int, tf: int, dl: int) -> float:
    avgdl = total / n
    norm = list(norm_values(bm, avgdl, [dl]))
    return term_impacts(bm, bm.idf(n, df), [tf], norm, [0], [dl], avgdl)[0]


stats = st.tuples(st.integers(1, 5000), st.integers(1, 200), st.floats(0.2, 20.0))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    variants,
    st.floats(0.0, 3.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 2.0),
    stats,
    stats,
    st.lists(st.tuples(st.integers(1, 60), st.integers(1, 3000)), min_size=1, max_size=8),
)
def test_exact_impacts_lie_within_the_scale_bounds(variant, k1, b, delta, then, now, postings):
    bm = BM25(variant, k1, b, delta)
    (n0, df0, mean0), (n, df, mean) = then, now
    df0, df = min(df0, n0), min(df, n)
    total0, total = max(1, round(n0 * mean0)), max(1, round(n * mean))
    with patched((_stale, "LOOSE", math.inf)):
        bounds = _stale.scale_bounds(bm, (n, total, df), (n0, total0, df0))
    if bounds is None:  # only a non-positive idf (or statistic) is refused without LOOSE
        assert min(bm.idf(n, df), bm.idf(n0, df0)) <= 0.0
        return
    lo, hi, idf = bounds
    assert 0.0 < lo <= hi and idf == bm.idf(n, df)
    for tf, dl in postings:
        saved, exact = impact(bm, n0, total0, df0, tf, dl), impact(bm, n, total, df, tf, dl)
        assert lo * saved <= exact <= hi * saved


def test_bounds_far_apart_are_refused():
    bm = BM25()
    assert _stale.scale_bounds(bm, (100, 1000, 5), (100, 1010, 5)) is not None
    # Average length doubled: the bounds would be 2x apart, past LOOSE.
    assert _stale.scale_bounds(bm, (100, 2000, 5), (100, 1000, 5)) is None


def fresh(live: dict[str, str], variant: str) -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None, analyzer=plain, variant=variant)
    for source, text in live.items():
        kb.add_text(text, source)
    return kb


def ranked(kb: KnowledgeBase, q: str, k: int) -> list[tuple[str, float]]:
    return [(h.source, h.score) for h in kb.search(q, k)]


def test_a_stale_search_scores_candidates_without_recomputing_the_lists():
    # RECOMPUTE_SHARE 0: never trade the candidates' exact scoring for a recomputed list.
    with patched((_index, "ORDER_MIN", 2), (_search, "SEED", 1), (_stale, "RECOMPUTE_SHARE", 0)):
        live = {f"s{i}": " ".join(VOCAB[j] for j in range(12) if (i * 5 + j * 7) % 4 < 2) for i in range(80)}
        kb = fresh(live, "lucene")
        kb._index.refresh()
        kb.remove("s3")
        kb.add_text("t0 t1 t2 t2 late", "late")
        live.pop("s3")
        live["late"] = "t0 t1 t2 t2 late"
        reference = fresh(live, "lucene")
        for q in ["t0 t1", "t2 t5 t7", "t3 t4 t8 t9", "late t2"]:
            assert ranked(kb, q, 2) == ranked(reference, q, 2)
        index = kb._index
        stale = [t for t in index.stale_terms.values() if isinstance(t, _stale.StaleTerm)]
        assert stale, "the packed impacts served the searches"
        # Their impacts were never recomputed: still the packed generation's.
        assert all(index.imp_gen[index.vocab[t]] != index.gen for t in ("t3", "t4", "t8", "t9"))
        assert any(term.added for term in stale) and any(term.dead for term in stale)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 81), min_size=1, max_size=40), st.integers(0, 5), st.sampled_from([1.0, 0.5]))
def test_a_bound_on_the_largest_candidate_changes_no_value(cands, slack, w):
    # full_scores finds the largest candidate once and hands it to every term's bound and lookup.
    with patched((_index, "ORDER_MIN", 2), (_stale, "RECOMPUTE_SHARE", 0)):
        live = {f"s{i}": " ".join(VOCAB[j] for j in range(12) if (i * 5 + j * 7) % 4 < 2) for i in range(80)}
        kb = fresh(live, "lucene")
        kb._index.refresh()
        kb.remove("s3")
        kb.add_text("t0 t1 t2 t2 late", "late")
        kb.add_text("t2 t5", "later")
        index = kb._index
        for term in ("t0", "t2", "t5"):
            tid = index.vocab[term]
            assert index.scales(tid) != (1.0, 1.0)  # served stale
            stale = index._stale_of(tid)
            assert stale is not None
            # The packed impact at a packed chunk, the exact one at a chunk added since.
            docs, imps = list(stale.base.docs), list(stale.base.imps)
            packed = [imps[docs.index(c)] if c in docs else 0.0 for c in cands]
            saved = [v if c < stale.first_new else stale.added.get(c, 0.0) for c, v in zip(cands, packed)]
            for highest in (max(cands), max(cands) + slack):
                assert list(index.bound(tid, w, cands, highest)) == list(index.bound(tid, w, cands))
                assert list(index.bound(tid, w, cands, highest)) == [v * w for v in saved]
                assert list(index.lookup(tid, w, cands, highest)) == list(index.lookup(tid, w, cands))
