"""Reranking by term proximity: the query's adjacent words written together lift a passage."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import ConfigError, Hit, KnowledgeBase
from clanker_rag._answer._ask import answer_controller
from clanker_rag._retrieval._proximity import ProximityRetriever, ordered_pairs, pair_counts
from clanker_rag._types import HitLike


def test_ordered_pairs_are_adjacent_different_terms_once_in_order() -> None:
    assert ordered_pairs(["a", "b", "a", "b", "b", "c"]) == [("a", "b"), ("b", "a"), ("b", "c")]
    assert ordered_pairs(["x"]) == []


def test_pair_counts_follow_order_and_gap() -> None:
    terms = ["test", "client", "x", "test", "y", "z", "client", "client", "test"]
    assert pair_counts([("test", "client")], terms, gap=1) == {("test", "client"): 1}
    assert pair_counts([("test", "client")], terms, gap=3) == {("test", "client"): 2}
    # Order matters: "client test" counts once (the last two), never as "test client".
    assert pair_counts([("client", "test")], terms, gap=1) == {("client", "test"): 1}
    assert pair_counts([("test", "nowhere")], terms, gap=5) == {}


def corpus() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    # Five terms each, "result" and "backend" once: BM25 ties them and keeps the first added first.
    # "result" and "backend" are 4 terms apart, then 2, then 1 (stop words do not count).
    kb.add_text("The result is stored on disk and kept in the backend.", "apart.md")
    kb.add_text("The disk is stored and the result kept in the backend.", "near.md")
    kb.add_text("The disk is stored and kept in the result backend.", "together.md")
    for i in range(6):
        kb.add_text(f"Unrelated filler text number {i} about queues and workers.", f"filler{i}.md")
    return kb


QUERY = "Which result backend is used?"


def test_passages_writing_the_pair_within_the_gap_come_first() -> None:
    kb = corpus()
    plain = kb.search(QUERY, 3)
    assert [h.source for h in plain] == ["apart.md", "near.md", "together.md"]
    assert plain[0].score == pytest.approx(plain[2].score)
    reranked = ProximityRetriever(kb, weight=0.4, keep_order=False).search(QUERY, 3)
    # Both within the gap gain alike and keep their order; the hits keep their BM25 scores.
    assert [h.source for h in reranked] == ["near.md", "together.md", "apart.md"]
    assert sorted(reranked, key=lambda h: h.source) == sorted(plain, key=lambda h: h.source)
    adjacent = ProximityRetriever(kb, weight=0.4, gap=1, keep_order=False).search(QUERY, 3)
    assert [h.source for h in adjacent] == ["together.md", "apart.md", "near.md"]


def test_by_default_the_reranking_picks_the_hits_and_bm25_orders_them() -> None:
    kb = corpus()
    assert [h.source for h in kb.search(QUERY, 2)] == ["apart.md", "near.md"]
    assert [h.source for h in ProximityRetriever(kb, weight=0.4).search(QUERY, 2)] == ["near.md", "together.md"]
    assert [h.source for h in ProximityRetriever(kb, weight=0.4, gap=1).search(QUERY, 2)] == ["apart.md", "together.md"]
    assert ProximityRetriever(kb, weight=0.4).search(QUERY, 3) == kb.search(QUERY, 3)


def test_the_bonus_is_the_mean_idf_of_the_pair_times_a_saturated_count() -> None:
    kb = corpus()
    proximity = ProximityRetriever(kb, weight=0.5)
    stats = kb.collection_stats(["result", "backend"])
    idf = {t: kb.bm25.idf(stats.n_docs, stats.df[t]) for t in ("result", "backend")}
    hit = Hit("result backend, then result backend again", "x.md", 1.0)
    k1 = kb.bm25.k1
    expected = 0.5 * (idf["result"] + idf["backend"]) / 2 * 2 * (k1 + 1) / (2 + k1)
    assert math.isclose(proximity.bonus(hit, [("result", "backend")], idf), expected)


def test_a_section_heading_counts_but_never_joins_the_text() -> None:
    kb = corpus()
    proximity = ProximityRetriever(kb, weight=1.0)
    idf = {"result": 1.0, "backend": 1.0}
    pair = [("result", "backend")]
    assert proximity.bonus(Hit("backend only", "a", 1.0, section="Result Backend"), pair, idf) > 0
    # "... Result" ending the heading and "backend" starting the text are not a phrase.
    assert proximity.bonus(Hit("backend only", "a", 1.0, section="Storing the result"), pair, idf) == 0


def test_weight_zero_and_a_retriever_without_statistics_keep_the_inner_order() -> None:
    kb = corpus()
    query = QUERY
    assert ProximityRetriever(kb, weight=0).search(query, 3) == kb.search(query, 3)

    class Plain:
        def search(self, query: str, k: int = 10) -> list[Hit]:
            return kb.search(query, k)

    assert ProximityRetriever(Plain(), weight=0.4).search(query, 3) == kb.search(query, 3)


@pytest.mark.parametrize("weight", [-0.1, 10.5, float("nan"), True, "0.4"])
def test_a_weight_outside_its_range_is_refused_with_the_value(weight: object) -> None:
    with pytest.raises(ConfigError, match="weight="):
        ProximityRetriever(corpus(), weight=weight)  # type: ignore[arg-type]


@pytest.mark.parametrize("option", [{"depth": 0}, {"gap": 0}, {"depth": True}])
def test_depth_and_gap_must_be_positive(option: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ProximityRetriever(corpus(), **option)  # type: ignore[arg-type]


WORDS = st.sampled_from(["alpha", "beta", "gamma", "delta", "queue", "worker", "result", "backend"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(WORDS, min_size=1, max_size=12), min_size=1, max_size=12),
    st.lists(WORDS, min_size=1, max_size=5),
    st.integers(1, 6),
    st.floats(0, 3),
    st.booleans(),
)
def test_reranking_returns_the_best_inner_candidates(
    texts: list[list[str]], query_words: list[str], k: int, weight: float, keep_order: bool
) -> None:
    kb = KnowledgeBase(chunk_size=None)
    for i, words in enumerate(texts):
        kb.add_text(" ".join(words), f"d{i}")
    query = " ".join(query_words)
    proximity = ProximityRetriever(kb, weight=weight, depth=5, keep_order=keep_order)
    got = proximity.search(query, k)
    candidates: list[HitLike] = list(kb.search(query, max(k, 5)))
    assert len(got) == min(k, len(candidates))
    assert len({h.source for h in got}) == len(got)
    assert all(h in candidates for h in got)  # the candidates themselves, scores untouched
    # Best first by BM25 score plus bonus, ties in BM25's order.
    pairs = [(a, b) for a, b in ordered_pairs(list(kb.analyzer(query)))]
    stats = kb.collection_stats(set(kb.analyzer(query)))
    idf = {t: kb.bm25.idf(stats.n_docs, df) for t, df in stats.df.items() if df > 0}
    pairs = [(a, b) for a, b in pairs if a in idf and b in idf]
    total = [h.score + (proximity.bonus(h, pairs, idf) if pairs else 0.0) for h in got]
    if keep_order:
        # The inner retriever's order among the hits kept.
        assert [candidates.index(h) for h in got] == sorted(candidates.index(h) for h in got)
    else:
        assert all(a >= b - 1e-9 for a, b in itertools.pairwise(total))
    # A hit left out never beats one kept.
    if len(got) == k and pairs:
        left = [h for h in candidates if h not in got]
        assert all(h.score + proximity.bonus(h, pairs, idf) <= min(total) + 1e-9 for h in left)


def test_ask_reads_search_s_own_ranking() -> None:
    # ask's blocks come from the passages search ranks first (issue: a reranking only ask applied
    # could show a passage search ranks below its first), cut to their windows.
    kb = corpus()
    ctl = answer_controller(kb, QUERY)
    assert getattr(ctl.retriever, "retriever", None) is kb
