"""A loaded index makes a source's Doc (and decodes its name) only when something needs it."""

from array import array

import pytest

from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._engine._sources import ChunkDocs, LoadedSources
from clanker_rag._storage import _segments, _store
from clanker_rag._storage._codec import SourceColumns

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "omicron"]


def texts(n=40):
    # Each source has a word of its own ("uniqN") and shares the rest.
    return {
        f"docs/s{i:02d}.txt": f"uniq{i} {WORDS[i % len(WORDS)]} {WORDS[(i * 5) % len(WORDS)]} common words here"
        for i in range(n)
    }


def build(items):
    kb = KnowledgeBase(chunk_size=4, stride=4)
    for source, text in items.items():
        kb.add_text(text, source, {"even": int(source[-6:-4]) % 2 == 0})
    return kb


def answers(kb, queries, **filters):
    return [[(h.source, h.chunk_index, h.score, h.text) for h in kb.search(q, 5, **filters)] for q in queries]


QUERIES = ["uniq7", "alpha common", "kappa lambda", "zeta words", "uniq3 uniq31 here"]


def test_an_unfiltered_search_makes_only_the_hits_sources(tmp_path):
    build(texts()).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path)
    assert kb._corpus.sources.loaded is not None and kb._corpus.sources.loaded.made == 0
    hits = kb.search("uniq7 uniq12", k=2)
    assert {h.source for h in hits} == {"docs/s07.txt", "docs/s12.txt"}
    assert kb._corpus.sources.loaded.made == 2
    assert not kb._corpus.sources.mapped  # no name map either
    assert kb.explain("uniq7 uniq12", hits[0]).score == hits[0].score
    assert kb._corpus.sources.loaded.made == 2
    assert len(kb.sources()) == 40
    assert kb._corpus.sources.loaded.made == 40


def test_edits_filters_and_saves_after_a_lazy_load_match_a_fresh_build(tmp_path):
    items = texts()
    build(items).save(tmp_path / "a")
    kb = KnowledgeBase.load(tmp_path / "a")
    assert answers(kb, QUERIES) == answers(build(items), QUERIES)  # some sources made, not all
    fresh_chunks = [d.source if d else None for d in build(items)._chunks.doc]
    assert [d.source if d else None for d in kb._chunks.doc] == fresh_chunks
    kb.remove("docs/s07.txt")
    kb.add_text("uniq7 moved elsewhere with common words", "other/s07.txt", {"even": False})
    del items["docs/s07.txt"]
    items["other/s07.txt"] = "uniq7 moved elsewhere with common words"
    fresh = build(items)
    for filters in ({}, {"source": "docs/"}, {"source": "other/*"}, {"where": {"even": True}}):
        assert answers(kb, QUERIES, **filters) == answers(fresh, QUERIES, **filters)
    kb.save(tmp_path / "b")
    again = KnowledgeBase.load(tmp_path / "b")
    assert again.sources() == sorted(items)
    assert answers(again, QUERIES) == answers(fresh, QUERIES)
    # Removing a loaded source before anything made the name map.
    again = KnowledgeBase.load(tmp_path / "b")
    (hit,) = again.search("uniq12", 1)
    assert again.remove("docs/s12.txt") == 2
    assert not again._chunks.live(hit.chunk_id)
    assert all(h.source != "docs/s12.txt" for h in again.search("uniq12 common", 80))
    assert answers(again, QUERIES) == answers(build({s: t for s, t in items.items() if s != "docs/s12.txt"}), QUERIES)


def damaged(tmp_path, monkeypatch, old, new):
    (path,) = tmp_path.glob("data-*.bin")
    data = path.read_bytes()
    assert data.count(old) == 1 and len(old) == len(new)
    path.write_bytes(data.replace(old, new))
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)  # as if it were too large to hash at load
    return KnowledgeBase.load(tmp_path)


def unchecked(monkeypatch):
    """Segments written without block checksums: damage is then found by the decoders' own checks."""
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 0)


def test_a_damaged_name_fails_clearly_when_it_is_decoded(tmp_path, monkeypatch):
    unchecked(monkeypatch)
    build(texts(12)).save(tmp_path)
    kb = damaged(tmp_path, monkeypatch, b"docs/s07.txt", b"docs/s\xff\xfe.txt")
    assert [h.source for h in kb.search("uniq3", 1)] == ["docs/s03.txt"]
    with pytest.raises(IndexFormatError, match="not valid UTF-8"):
        kb.search("uniq7")
    with pytest.raises(IndexFormatError, match="not valid UTF-8"):
        kb.sources()


def test_a_source_named_twice_is_still_refused(tmp_path, monkeypatch):
    unchecked(monkeypatch)
    build(texts(12)).save(tmp_path)
    kb = damaged(tmp_path, monkeypatch, b"docs/s07.txt", b"docs/s08.txt")
    with pytest.raises(IndexFormatError, match="names a source twice"):
        kb.sources()
    with pytest.raises(IndexFormatError, match="names a source twice"):
        kb.search("uniq3", where={"even": False})


def test_sources_whose_chunks_are_not_one_run_use_their_own_lists():
    # Formats 1 and 2 may interleave sources' chunks: each source then lists its own.
    cols = SourceColumns(["a", "b"], ["one two", "three"], array("q", [7, 5]), [None, {"k": 1}], ["fa", "fb"])
    loaded = LoadedSources(cols, array("i", [1, 0, 1]), None, [[1], [0, 2]])
    docs = ChunkDocs(loaded)
    assert [d.source if d else None for d in (docs[0], docs[1], docs[2])] == ["b", "a", "b"]
    assert loaded.made == 2 and docs[0] is docs[2]
    assert docs[0] is not None and list(docs[0].cids) == [0, 2] and docs[0].metadata == {"k": 1}
    docs[1] = None
    assert not docs.live(1) and docs.live(2) and docs[1] is None
    with pytest.raises(ValueError):
        docs[0] = loaded.doc(0)
    assert [d.source if d else None for d in docs] == ["b", None, "b"]
    assert loaded.everything()[1] is docs[0]  # made ones are kept
