"""Committed chunks that are removed leave the statistics at once and their postings when each list is next read.

A load of a commit with deletion marks, and a ``remove`` of a committed
source, take the chunks out of the statistics and the chunk table but leave
their postings until a read of a list that holds them (a search reads only
its terms' lists), or a whole save, drops them: a process that loads,
removes and commits never analyses a text nor copies a list.  These tests
hold that to one fresh build of the same content, scores bit for bit,
whatever runs between the removal and the read."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import clanker_rag._engine._writing as writing_module
from clanker_rag import Analyzer, IndexFormatError, KnowledgeBase
from clanker_rag._engine._held import Held
from clanker_rag._engine._index import InvertedIndex
from clanker_rag._storage import _segments
from clanker_rag._storage._segments import Policy

VOCAB = [f"t{i}" for i in range(10)]
plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)
QUERIES = ["t0", "t1 t2", "t3 t3 t4", "t5 t6 t7 t8", "t9 t0 t1", "zz"]


@pytest.fixture
def cheap(monkeypatch):
    """Commits even for tiny indexes (no full merge)."""
    monkeypatch.setattr(_segments, "POLICY", Policy(merge_factor=2, full_share=10.0, full_below=0))


def ranked(kb: KnowledgeBase, q: str) -> list[tuple[str, int, float, str]]:
    return [(h.source, h.chunk_index, h.score, h.text) for h in kb.search(q, 100)]


def fresh_build(live: dict[str, str]) -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=4, stride=2, analyzer=plain)
    for source, text in live.items():
        kb.add_text(text, source)
    return kb


def base(n: int = 12) -> dict[str, str]:
    return {f"s{i}": " ".join(VOCAB[i % 6 : i % 6 + 5] * (1 + i % 3)) for i in range(n)}


def test_load_remove_and_commit_touch_no_posting_list(tmp_path: Path, cheap, monkeypatch) -> None:
    live = base(20)
    fresh_build(live).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    kb.remove("s3")
    kb.save()
    assert kb.segments == 1
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    # From here on, a change to a posting list fails: the load (which meets a deletion mark),
    # the removal of a committed source and the commit must need none.
    with monkeypatch.context() as patched:

        def refuse(*args: object) -> None:
            raise AssertionError("a posting list was changed")

        patched.setattr(InvertedIndex, "remove", refuse)
        patched.setattr(InvertedIndex, "purge", refuse)
        patched.setattr(InvertedIndex, "_sweep", refuse)
        patched.setattr(InvertedIndex, "drop_held", refuse)
        kb = KnowledgeBase.load(tmp_path, analyzer=plain)
        assert kb.remove("s5") > 0
        kb.add_text("t1 t2 t9", "note")
        kb.save()
        del live["s3"], live["s5"]
        live["note"] = "t1 t2 t9"
        assert len(kb) == len(fresh_build(live)) and "s5" not in kb and "s3" not in kb
    again = KnowledgeBase.load(tmp_path, analyzer=plain)
    fresh = fresh_build(live)
    for q in QUERIES:
        assert ranked(kb, q) == ranked(fresh, q)
        assert ranked(again, q) == ranked(fresh, q)


def test_a_search_interrupted_while_sweeping_a_list_still_answers_exactly(tmp_path: Path, cheap, monkeypatch) -> None:
    live = base()
    fresh_build(live).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    kb.remove("s2")
    del live["s2"]
    real = Held.swept_of

    def interrupted(self: Held, tid: int, cids: object, tfs: object) -> None:
        if cids:  # the worst moment: the list changed, its counts not yet
            raise KeyboardInterrupt
        real(self, tid, cids, tfs)  # type: ignore[arg-type]

    with monkeypatch.context() as patched:
        patched.setattr(Held, "swept_of", interrupted)
        with pytest.raises(KeyboardInterrupt):
            kb.search("t2 t3")
    fresh = fresh_build(live)
    for q in QUERIES:
        assert ranked(kb, q) == ranked(fresh, q)
    kb.save(tmp_path / "whole")  # the counts fell short: every list is swept, and nothing is lost
    again = KnowledgeBase.load(tmp_path / "whole", analyzer=plain)
    for q in QUERIES:
        assert ranked(again, q) == ranked(fresh, q)


def test_a_save_interrupted_while_dropping_postings_leaves_the_index_unsaveable(
    tmp_path: Path, cheap, monkeypatch
) -> None:
    fresh_build(base()).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    kb.remove("s2")

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(InvertedIndex, "_pack", interrupted)
        with pytest.raises(KeyboardInterrupt):
            kb.save(tmp_path / "whole")  # a whole save repacks every list without the waiting postings
    with pytest.raises(IndexFormatError, match="stopped midway"):
        kb.save()


def test_an_analyser_that_changed_since_indexing_still_removes_every_posting(tmp_path: Path, cheap, caplog) -> None:
    mode = {"now": "same"}

    def analyse(text: str) -> list[str]:
        words = text.split()
        if mode["now"] == "more":
            return [*words, "drift"]
        return words[1:] if mode["now"] == "fewer" else words

    kb = KnowledgeBase(chunk_size=None, analyzer=analyse)
    for source, body in {"a": "alpha beta", "b": "beta gamma", "c": "gamma alpha"}.items():
        kb.add_text(body, source)
    kb.save(tmp_path)
    for now in ("more", "fewer"):
        mode["now"] = "same"
        kb = KnowledgeBase.load(tmp_path, analyzer=analyse)
        kb.remove("a")
        # A search analyses no removed text: each list it reads drops the removed chunks.
        mode["now"] = now
        assert sorted(h.source for h in kb.search("x alpha beta", 10)) == ["b", "c"]
        # A whole save drops the rest as it repacks every list: it analyses no removed text,
        # so what the analyser gives now does not matter (nothing to purge).
        kb = KnowledgeBase.load(tmp_path, analyzer=analyse)
        kb.remove("a")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="clanker_rag"):
            kb.save(tmp_path / now)
        assert "purging by full scan" not in caplog.text
        mode["now"] = "same"
        for index in (kb, KnowledgeBase.load(tmp_path / now, analyzer=analyse)):
            assert sorted(h.source for h in index.search("alpha beta", 10)) == ["b", "c"]
            assert index._index.df("alpha") == 1 and index._index.df("beta") == 1


def test_looking_up_one_source_of_a_loaded_index_makes_no_other(tmp_path: Path) -> None:
    live = base(40)
    fresh_build(live).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    loaded = kb._corpus.sources.loaded
    assert loaded is not None
    assert kb.source_metadata("s7") == {} and kb.source_text("s7") == live["s7"]
    assert "s8" in kb and "nope" not in kb and 5 not in kb
    assert [h.text for h in kb.chunks("s9")] == [h.text for h in fresh_build(live).chunks("s9")]
    assert kb.source_metadata("nope") is None and kb.source_text("nope") is None and list(kb.chunks("nope")) == []
    assert loaded.made == 3


def test_a_writer_that_never_searches_holds_a_bounded_backlog(tmp_path: Path, cheap, monkeypatch) -> None:
    live = base(20)
    fresh_build(live).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    calls: list[int] = []
    real = InvertedIndex.drop_held

    def counted(self: InvertedIndex, terms_of: object) -> list[int]:
        calls.append(len(self.held))
        return real(self, terms_of)  # type: ignore[arg-type]

    monkeypatch.setattr(InvertedIndex, "drop_held", counted)
    monkeypatch.setattr(writing_module, "_WAITING_MAX", 3)
    for i in range(6):
        assert kb.remove(f"s{i}") > 0
        # Past the bound the backlog is dropped at once, before any search asks for it.
        assert len(kb._index.held) <= 3
    assert calls and max(calls) > 3
    for i in range(6):
        del live[f"s{i}"]
    fresh = fresh_build(live)
    for q in QUERIES:
        assert ranked(kb, q) == ranked(fresh, q)


def test_a_swept_list_saved_narrow_takes_a_large_frequency_after(tmp_path: Path, cheap) -> None:
    def whole(live: dict[str, str]) -> KnowledgeBase:  # one chunk a source
        kb = KnowledgeBase(chunk_size=None, analyzer=plain)
        for source, body in live.items():
            kb.add_text(body, source)
        return kb

    live = base(20)
    whole(live).save(tmp_path)  # every tf fits a byte: saved as uint8
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    kb.remove("s1")
    del live["s1"]
    assert ranked(kb, "t1 t2") == ranked(whole(live), "t1 t2")  # sweeps those lists, kept narrow
    live["many"] = "t1 " * 300 + "t2"
    kb.add_text(live["many"], "many")
    fresh = whole(live)
    for q in QUERIES:
        assert ranked(kb, q) == ranked(fresh, q)
    tid = kb._index.term_id("t1")
    assert tid is not None and kb._index.tfs_of(tid)[-1] == 300


def test_a_whole_save_after_replacing_most_sources_drops_them_in_one_repack(tmp_path: Path, cheap, monkeypatch) -> None:
    """A whole save leaves the removed chunks out as it repacks every list: no list is swept
    one by one (that copies every list a removed chunk touched), and the index saved equals a fresh build."""
    live = base(20)
    fresh_build(live).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    for i in range(12):
        live[f"s{i}"] = f"t{i} t{i + 1} t3 replaced"
        kb.add_text(live[f"s{i}"], f"s{i}")
    del live["s15"]
    kb.remove("s15")

    def refuse(*args: object) -> None:
        raise AssertionError("a list was swept on its own")

    with monkeypatch.context() as patched:
        patched.setattr(InvertedIndex, "_sweep", refuse)
        patched.setattr(InvertedIndex, "drop_held", refuse)
        kb.save(tmp_path / "whole")
    again = KnowledgeBase.load(tmp_path / "whole", analyzer=plain)
    fresh = fresh_build(live)
    assert len(again) == len(fresh)
    for q in [*QUERIES, "replaced t3"]:  # (replaced sources come after the others: ties in another order)
        assert sorted(ranked(again, q)) == sorted(ranked(fresh, q))
        assert sorted(ranked(kb, q)) == sorted(ranked(fresh, q))
