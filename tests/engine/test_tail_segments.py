"""A load's segments after the first are read in place: a term's lists join the index when first read.

Every check compares with one fresh build of the same live sources: the same
hits and scores, term counts and collection statistics, whether a term's
later-segment postings were read by a search, an add, a removal or a whole save.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clanker_rag import Analyzer, KnowledgeBase
from clanker_rag._engine._collection import local_stats
from clanker_rag._engine._vocab import LazyPending
from clanker_rag._storage import _segments
from clanker_rag._storage._segments import Policy

plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)
VOCAB = [f"t{i}" for i in range(10)]


@pytest.fixture
def unmerged(monkeypatch):
    """Cheap commits even for tiny indexes (every commit a segment of its own)."""
    monkeypatch.setattr(_segments, "POLICY", Policy(merge_factor=50, full_share=0.99, full_below=0))


def fresh_build(live: dict[str, str]) -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=4, stride=2, analyzer=plain)
    for source, text in live.items():
        kb.add_text(text, source)
    return kb


def top(kb: KnowledgeBase, q: str, k: int = 50) -> list[tuple[str, int, float]]:
    return [(h.source, h.chunk_index, h.score) for h in kb.search(q, k)]


def segmented(folder: Path) -> dict[str, str]:
    """A first segment and four later ones (adds, a removal of an earlier commit's source,
    terms no earlier segment holds); returns the live sources."""
    live = {f"s{i}": " ".join(VOCAB[j] for j in range(10) if (i * 3 + j * 7) % 5 < 2) for i in range(40)}
    fresh_build(live).save(folder)
    for n in range(4):
        kb = KnowledgeBase.load(folder, analyzer=plain)
        for m in range(3):
            text = f"t{n} t{n + m} late{n} late{n} only{n}x{m} t{(n * m) % 10}"
            kb.add_text(text, f"late{n}-{m}.md")
            live[f"late{n}-{m}.md"] = text
        gone = f"late{n - 1}-1.md" if n else "s5"
        kb.remove(gone)
        live.pop(gone)
        kb.save(merge=False)
    assert KnowledgeBase.load(folder, analyzer=plain).segments == 5
    return live


QUERIES = ["t0", "t1 t2", "late0", "late1 t3", "late3 only3x2 t9", "only1x1", "only0x1", "t4 t5 t6 late2", "zz"]


def test_a_load_reads_no_later_list_and_searches_as_a_fresh_build(tmp_path, unmerged):
    live = segmented(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    pending = kb._index.pending
    assert isinstance(pending, LazyPending) and pending.present() == []
    reference = fresh_build(live)
    for q in QUERIES:
        assert top(kb, q) == top(reference, q), q
        for hit in kb.search(q, 5):
            why = kb.explain(q, hit)
            assert why.score == hit.score == sum(t.contribution for t in why.terms)
    assert pending.holds("late2"), "terms no query named stay in their segments"
    assert not pending.holds("zz")
    # A term only a removed source held (its segment still does) is found with no chunk.
    assert top(kb, "only0x1") == [] == top(reference, "only0x1")
    assert kb.n_terms == reference.n_terms


def test_adds_and_removals_after_a_load_read_the_later_postings_first(tmp_path, unmerged):
    live = segmented(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    kb.add_text("late2 late2 t7 only2x0 brand new", "after.md")  # terms of later segments, unread
    live["after.md"] = "late2 late2 t7 only2x0 brand new"
    kb.remove("late3-0.md")  # a source of the last segment
    live.pop("late3-0.md")
    reference = fresh_build(live)
    for q in [*QUERIES, "brand only2x0", "late2 t7"]:
        assert top(kb, q) == top(reference, q), q
    kb.save(merge=False)  # a commit: the new segment only, no list read whole
    assert kb._index.pending.holds("late1")
    again = KnowledgeBase.load(tmp_path, analyzer=plain)
    for q in [*QUERIES, "brand only2x0", "late2 t7"]:
        assert top(again, q) == top(reference, q), q


def test_statistics_and_a_whole_save_read_every_later_list(tmp_path, unmerged):
    live = segmented(tmp_path)
    reference = fresh_build(live)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    stats, expected = local_stats(kb._index), local_stats(reference._index)
    assert (stats.n_docs, stats.total_length) == (expected.n_docs, expected.total_length)
    assert {t: n for t, n in stats.df.items() if n} == {t: n for t, n in expected.df.items() if n}
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    asked = ["late1", "only3x1", "only0x1", "zz"]
    found = local_stats(kb._index, asked).df  # (a term only removed chunks held counts, with df 0)
    assert {t: n for t, n in found.items() if n} == local_stats(reference._index, asked).df
    kb.optimize()
    assert kb.segments == 1
    merged = KnowledgeBase.load(tmp_path, analyzer=plain)
    for q in QUERIES:
        assert top(merged, q) == top(reference, q), q


def test_a_bulk_add_by_workers_after_a_load_reads_the_later_postings_first(tmp_path, unmerged):
    live = segmented(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    items = [(f"late{i % 4} t{i % 10} only{i % 4}x{i % 3} bulk{i}", f"bulk{i}.md") for i in range(40)]
    kb.add_texts(items, jobs=2)  # counted by workers, added list by list (add_chunks)
    live.update((source, text) for text, source in items)
    reference = fresh_build(live)
    for q in [*QUERIES, "bulk7 late2", "only2x2 t3"]:
        assert top(kb, q) == top(reference, q), q
