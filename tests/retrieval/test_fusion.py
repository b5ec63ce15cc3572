import itertools
import logging
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import ConfigError, Hit, KnowledgeBase
from clanker_rag._retrieval._fusion import (
    MultiQueryRetriever,
    expand_neighbors,
    fuse_hits,
    hit_key,
    reciprocal_rank_fusion,
)

# -- reciprocal-rank fusion ------------------------------------------------------


def test_rrf_scores_by_hand():
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]], k=60)
    got = dict(fused)
    assert math.isclose(got["a"], 1 / 61 + 1 / 62)
    assert math.isclose(got["b"], 1 / 62)
    assert math.isclose(got["c"], 1 / 63 + 1 / 61)
    assert math.isclose(got["d"], 1 / 63)
    assert [item for item, _ in fused] == ["a", "c", "b", "d"]


def test_rrf_weights_and_small_k():
    # With k=0 rank 1 is worth 1, rank 2 a half: weight 3 on the second list
    # makes its top item win over the first list's.
    fused = reciprocal_rank_fusion([["x", "y"], ["y", "x"]], k=0, weights=[1.0, 3.0])
    assert fused[0][0] == "y"
    assert math.isclose(fused[0][1], 1 / 2 + 3 / 1)
    assert math.isclose(fused[1][1], 1 / 1 + 3 / 2)


def test_rrf_ties_keep_first_seen_order_and_duplicates_count_once():
    fused = reciprocal_rank_fusion([["p", "q"], ["q", "p"]])
    assert [item for item, _ in fused] == ["p", "q"]  # equal scores
    assert math.isclose(fused[0][1], fused[1][1])
    fused = reciprocal_rank_fusion([["a", "a", "b"]], k=60)
    assert dict(fused) == pytest.approx({"a": 1 / 61, "b": 1 / 63})


def test_rrf_key_keeps_first_occurrence():
    lists = [[("doc1", "from list 1")], [("doc1", "from list 2"), ("doc2", "x")]]
    fused = reciprocal_rank_fusion(lists, key=lambda item: item[0])
    assert fused[0][0] == ("doc1", "from list 1")
    assert math.isclose(fused[0][1], 1 / 61 + 1 / 61)


def test_rrf_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="weights"):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])
    with pytest.raises(ConfigError, match="k="):
        reciprocal_rank_fusion([["a"]], k=-1)
    with pytest.raises(ConfigError, match=r"k=inf is out of range: expected a finite number >= 0"):
        reciprocal_rank_fusion([["a"]], k=float("inf"))
    with pytest.raises(ConfigError, match=r"weights\[1\]=nan is out of range: expected a finite number >= 0"):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0, float("nan")])
    with pytest.raises(ConfigError, match=r"weights\[0\]=True"):
        reciprocal_rank_fusion([["a"]], weights=[True])
    assert reciprocal_rank_fusion([]) == []


def test_fuse_hits_matches_by_span_and_sets_fused_score():
    a1 = Hit("alpha", "a.md", 9.0, start=0, end=5)
    a1_again = Hit("alpha", "a.md", 0.7, start=0, end=5)
    b = Hit("beta", "b.md", 3.0, start=0, end=4)
    a_other_span = Hit("alpha", "a.md", 1.0, start=10, end=15)
    out = fuse_hits([[b, a1], [a1_again, a_other_span]], rrf_k=60)
    assert [(h.source, h.start) for h in out] == [("a.md", 0), ("b.md", 0), ("a.md", 10)]
    assert math.isclose(out[0].score, 1 / 62 + 1 / 61)
    assert hit_key(Hit("t", "s", 0.0)) == ("s", "t")  # no span: identified by text


# -- multi-query ---------------------------------------------------------------

PETS = {
    "cats.md": "Cats are small carnivorous mammals that hunt mice at night.",
    "dogs.md": "Dogs are loyal companions and bark at strangers.",
    "birds.md": "Parrots can imitate human speech.",
}


def pets_kb() -> KnowledgeBase:
    kb = KnowledgeBase()
    for source, text in PETS.items():
        kb.add_text(text, source)
    return kb


def test_multi_query_rewrite_finds_what_the_original_misses():
    kb = pets_kb()
    assert kb.search("feline predators") == []  # no word in common with any document
    mq = MultiQueryRetriever(kb, lambda q: ["cats hunting mice"])
    hits = mq.search("feline predators", 3)
    assert [h.source for h in hits] == ["cats.md"]


def test_multi_query_fuses_lists_by_rrf():
    class Fixed:
        def __init__(self) -> None:
            self.seen: list[tuple[str, int]] = []

        def search(self, query, k=10):
            self.seen.append((query, k))
            ranked = {"q": ["a", "b", "c"], "r1": ["c", "b"], "r2": ["c"]}[query]
            return [Hit(s, s, 1.0) for s in ranked[:k]]

    base = Fixed()
    mq = MultiQueryRetriever(base, lambda q: ["r1", "R1 ", "r2", "q"], depth=5)
    hits = mq.search("q", 2)
    # c: 1/63 + 1/61 + 1/61; b: 1/62 + 1/62; a: 1/61
    assert [h.source for h in hits] == ["c", "b"]
    assert math.isclose(hits[0].score, 1 / 63 + 2 / 61)
    # duplicates of a query (case, spacing) are searched once
    assert base.seen == [("q", 5), ("r1", 5), ("r2", 5)]


def test_multi_query_survives_a_failing_rewrite(caplog):
    kb = pets_kb()

    def broken(query: str) -> list[str]:
        raise RuntimeError("LLM server down")

    mq = MultiQueryRetriever(kb, broken)
    with caplog.at_level(logging.WARNING, logger="clanker_rag._retrieval._fusion"):
        hits = mq.search("dogs bark", 2)
    assert [h.source for h in hits] == ["dogs.md"]
    assert "LLM server down" in caplog.text


def test_multi_query_accepts_a_single_string_and_can_drop_the_original():
    mq = MultiQueryRetriever(pets_kb(), lambda q: "parrots speech", include_original=False)
    assert mq.queries("dogs") == ["parrots speech"]
    assert [h.source for h in mq.search("dogs", 3)] == ["birds.md"]
    with pytest.raises(ConfigError):
        MultiQueryRetriever(object(), lambda q: [])  # type: ignore[arg-type]


# -- small-to-big ----------------------------------------------------------------

WORDS = " ".join(f"w{i}" for i in range(30))
OTHER = " ".join(f"z{i}" for i in range(12))


def small_kb() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=8, stride=4)
    kb.add_text(WORDS, "a.txt")
    kb.add_text(OTHER, "b.txt")
    return kb


def chunk(kb: KnowledgeBase, source: str, index: int, score: float = 1.0) -> Hit:
    hit = next(c for c in kb.chunks(source) if c.chunk_index == index)
    return Hit(
        hit.text,
        hit.source,
        score,
        hit.metadata,
        hit.chunk_index,
        hit.start,
        hit.end,
        hit.start_line,
        hit.end_line,
        hit.section,
        hit.chunk_id,
    )


def test_neighbours_merge_into_one_exact_slice():
    kb = small_kb()
    chunks = list(kb.chunks("a.txt"))
    assert len(chunks) >= 6
    out = expand_neighbors(kb, [chunk(kb, "a.txt", 3, 5.0)], window=1, budget_chars=None)
    assert len(out) == 1
    assert (out[0].start, out[0].end) == (chunks[2].start, chunks[4].end)
    assert out[0].text == WORDS[chunks[2].start : chunks[4].end]
    assert out[0].text.startswith("w8 ") and out[0].text.endswith(" w23")
    assert out[0].chunk_index == 3 and out[0].score == 5.0


def test_overlapping_hits_of_one_document_are_deduplicated():
    kb = small_kb()
    chunks = list(kb.chunks("a.txt"))
    hits = [chunk(kb, "b.txt", 0, 9.0), chunk(kb, "a.txt", 1, 7.0), chunk(kb, "a.txt", 3, 8.0)]
    out = expand_neighbors(kb, hits, window=1, budget_chars=None)
    assert [h.source for h in out] == ["b.txt", "a.txt"]
    merged = out[1]
    # chunk 1 widened to 0..2, chunk 3 to 2..4: one passage, no repeated text
    assert (merged.start, merged.end) == (0, chunks[4].end)
    assert merged.text == WORDS[: chunks[4].end]
    assert merged.text.count("w9 ") == 1
    assert merged.chunk_index == 1  # the better-ranked hit names the passage
    assert merged.score == 8.0


def test_window_zero_only_merges_overlapping_hits():
    kb = small_kb()
    chunks = list(kb.chunks("a.txt"))
    out = expand_neighbors(kb, [chunk(kb, "a.txt", 1), chunk(kb, "a.txt", 2), chunk(kb, "a.txt", 5)], window=0)
    assert [(h.start, h.end) for h in out] == [(chunks[1].start, chunks[2].end), (chunks[5].start, chunks[5].end)]


def test_budget_limits_expansion():
    kb = small_kb()
    chunks = list(kb.chunks("a.txt"))
    hit = chunk(kb, "a.txt", 3)
    size = hit.end - hit.start
    left = hit.end - chunks[2].start  # hit widened by its left neighbour
    both = chunks[4].end - chunks[2].start
    assert size < left < both
    assert expand_neighbors(kb, [hit], window=1, budget_chars=left - 1)[0].text == hit.text
    out = expand_neighbors(kb, [hit], window=1, budget_chars=left)
    assert (out[0].start, out[0].end) == (chunks[2].start, hit.end)
    out = expand_neighbors(kb, [hit], window=2, budget_chars=both)
    assert (out[0].start, out[0].end) == (chunks[2].start, chunks[4].end)


def test_budget_drops_lower_ranked_hits_but_keeps_the_first():
    kb = small_kb()
    first, second = chunk(kb, "a.txt", 0), chunk(kb, "b.txt", 0)
    out = expand_neighbors(kb, [first, second], window=1, budget_chars=len(first.text))
    assert [h.text for h in out] == [first.text]
    assert expand_neighbors(kb, [first, second], window=0, budget_chars=1) == [first]


def test_foreign_hits_pass_through():
    kb = small_kb()
    foreign = Hit("from elsewhere", "web://x", 2.0)
    out = expand_neighbors(kb, [foreign, chunk(kb, "b.txt", 0)], window=1, budget_chars=None)
    assert out[0] is foreign
    assert out[1].text == OTHER  # b.txt is short: the window reaches all of it


def test_bad_arguments():
    kb = small_kb()
    with pytest.raises(ConfigError):
        expand_neighbors(kb, [], window=-1)
    with pytest.raises(ConfigError):
        expand_neighbors(kb, [], budget_chars=-5)
    assert expand_neighbors(kb, []) == []


@settings(max_examples=80, deadline=None)
@given(
    picks=st.lists(st.tuples(st.sampled_from(["a.txt", "b.txt"]), st.integers(0, 10)), min_size=1, max_size=6),
    window=st.integers(0, 3),
    budget=st.one_of(st.none(), st.integers(0, 200)),
)
def test_expansion_invariants(picks, window, budget):
    kb = small_kb()
    by_source = {s: list(kb.chunks(s)) for s in ("a.txt", "b.txt")}
    hits = [chunk(kb, s, i % len(by_source[s])) for s, i in picks]
    out = expand_neighbors(kb, hits, window=window, budget_chars=budget)
    assert out, "the first hit is always returned"
    for h in out:
        assert h.text == (kb.source_text(h.source) or "")[h.start : h.end]
    for s in ("a.txt", "b.txt"):
        spans = sorted((h.start, h.end) for h in out if h.source == s)
        for (_, e1), (s2, _) in itertools.pairwise(spans):
            assert e1 < s2, "passages of one document must not overlap or touch"
    total = sum(len(h.text) for h in out)
    if budget is not None and len(out) > 1:
        assert total <= budget
    if budget is not None and len(out) == 1:
        assert total <= max(budget, len(hits[0].text))
    if budget is None:
        for hit in hits:
            assert any(h.source == hit.source and h.start <= hit.start and hit.end <= h.end for h in out)
        assert out[0].chunk_index == hits[0].chunk_index and out[0].source == hits[0].source
