"""Segments read in place from mapped data files, the term dictionary, lazy texts."""

import json
import mmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._storage import _segments, _store, _texts
from clanker_rag._storage._codec import TermDictionary, read
from clanker_rag._storage._tf_column import TfColumn

TEXTS = {
    "greek.txt": "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu",
    "fox.txt": "The quick brown fox jumps over the lazy dog.",
    "café.txt": "Ünïcödé naïve café résumé, and a surrogate \udcff escaped byte",
    "code.py": "def parse_header(raw_bytes):\n    return HeaderParser(raw_bytes).parse()\n",
}


def build(texts=TEXTS):
    kb = KnowledgeBase(chunk_size=8, stride=4)
    for source, text in texts.items():
        kb.add_text(text, source, {"len": len(text)} if source.endswith(".py") else None)
    return kb


def ranked(kb, query, k=10):
    return [(h.source, h.chunk_index, h.score, h.text) for h in kb.search(query, k)]


QUERIES = ["lazy fox", "café résumé", "parse header", "alpha kappa mu", "escaped byte", "nothing here at all"]


def test_saved_index_is_format_8_and_read_in_place(tmp_path):
    build().save(tmp_path)
    manifest = json.loads((tmp_path / "index.json").read_text())
    assert manifest["format_version"] == 8
    assert "terms" not in manifest["body"]  # the vocabulary lives in the data file
    (segment,) = manifest["body"]["segments"]  # a fresh save writes one segment
    assert segment["chunks"] == len(build()) and segment["deleted"] == []
    kb = KnowledgeBase.load(tmp_path)
    index = kb._index
    # The postings are views of the mapped data file, not copies.
    lists = index.packed_lists
    assert lists is not None
    views = (lists.docs, lists.tfs, lists.imps, lists.offsets)
    assert all(isinstance(view, memoryview) and isinstance(view.obj, mmap.mmap) for view in views)
    fresh = build()
    for q in QUERIES:
        assert ranked(kb, q) == ranked(fresh, q)
    for source, text in TEXTS.items():
        assert kb.source_text(source) == text
    assert kb.source_metadata("code.py") == {"len": len(TEXTS["code.py"])}


def test_add_and_remove_after_load_match_a_fresh_build_and_survive_a_save(tmp_path):
    build().save(tmp_path / "a")
    kb = KnowledgeBase.load(tmp_path / "a")
    kb.add_text("a lazy afternoon for the brown bear and a new word zyzzyva", "bear.txt")
    kb.remove("greek.txt")
    expected = dict(TEXTS)
    del expected["greek.txt"]
    expected["bear.txt"] = "a lazy afternoon for the brown bear and a new word zyzzyva"
    fresh = build(expected)
    for q in [*QUERIES, "zyzzyva", "brown bear"]:
        assert [r[:3] for r in ranked(kb, q)] == [r[:3] for r in ranked(fresh, q)]
    kb.save(tmp_path / "b")
    again = KnowledgeBase.load(tmp_path / "b")
    assert again.sources() == sorted(expected)
    for q in [*QUERIES, "zyzzyva", "brown bear"]:
        assert [r[:3] for r in ranked(again, q)] == [r[:3] for r in ranked(fresh, q)]


def test_resaving_a_loaded_index_over_itself_keeps_every_text(tmp_path):
    build().save(tmp_path)
    kb = KnowledgeBase.load(tmp_path)
    kb.add_text("one more text", "more.txt")
    kb.save()  # a small index is written whole: the mapped texts are copied into a new data file
    again = KnowledgeBase.load(tmp_path)
    for source, text in TEXTS.items():
        assert again.source_text(source) == text
    # The replaced commit's file went once the new commit point was in place: one index in the folder.
    assert len(list(tmp_path.glob("data-*.bin"))) == 1
    again.add_text("and one more", "more2.txt")
    again.save()
    named = {s["file"] for s in json.loads((tmp_path / "index.json").read_text())["body"]["segments"]}
    assert len(named) == 1 and named == {p.name for p in tmp_path.glob("data-*.bin")}
    assert again.source_text("more.txt") == "one more text"  # its mapped file was deleted under it


def test_large_data_file_is_not_hashed_at_load_but_verify_catches_damage(tmp_path, monkeypatch):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 0)  # no block checksums (see test_segments.py for them)
    monkeypatch.setattr(_texts, "LEVEL", 0)  # texts stored in zlib blocks uncompressed: findable below
    build().save(tmp_path)
    (path,) = tmp_path.glob("data-*.bin")
    data = path.read_bytes()
    assert b"quick brown fox" in data
    path.write_bytes(data.replace(b"quick brown fox", b"quick brown cat"))
    with pytest.raises(IndexFormatError, match="checksum mismatch"):
        KnowledgeBase.load(tmp_path)  # small: hashed at load
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)  # as if it were large
    kb = KnowledgeBase.load(tmp_path)
    with pytest.raises(IndexFormatError, match="checksum mismatch") as info:
        kb.verify()
    assert str(path) in str(info.value)
    # A truncated file is still refused at load, hashed or not.
    path.write_bytes(data[:-1])
    with pytest.raises(IndexFormatError, match="truncated"):
        KnowledgeBase.load(tmp_path)


def test_damaged_text_in_an_unchecked_file_fails_clearly_when_read(tmp_path, monkeypatch):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 0)  # no block checksums: the decoder's own checks
    monkeypatch.setattr(_texts, "COMPRESS", True)
    monkeypatch.setattr(_texts, "LEVEL", 0)  # stored blocks: the text is findable, zlib's checksum still guards it
    monkeypatch.setattr(_texts, "TEXT_BLOCK", 64)  # the damage spoils the blocks holding fox.txt only
    build().save(tmp_path)
    (path,) = tmp_path.glob("data-*.bin")
    data = path.read_bytes()
    path.write_bytes(data.replace(b"quick brown fox", b"quick \xff\xfe\xfd\xfc\xfb fox"))
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)
    kb = KnowledgeBase.load(tmp_path)
    with pytest.raises(IndexFormatError, match="does not decompress"):  # zlib's own checksum
        kb.source_text("fox.txt")
    assert kb.source_text("code.py") == TEXTS["code.py"]


def test_verify_needs_a_saved_index():
    from clanker_rag import ConfigError

    with pytest.raises(ConfigError, match="never loaded or saved"):
        build().verify()


def test_term_lookup_after_load_builds_no_vocabulary_up_front(tmp_path):
    build().save(tmp_path)
    kb = KnowledgeBase.load(tmp_path)
    assert len(kb._index.vocab) == 0
    kb.search("lazy fox")
    assert len(kb._index.vocab) == 2  # the two query terms, found by binary search
    assert kb._index.df("zzz-not-a-term") == 0


@settings(max_examples=60, deadline=None)
@given(
    st.sets(st.text(st.characters(exclude_categories=["Cs"]), max_size=6), max_size=40),
    st.lists(st.text(max_size=6), max_size=10),
    st.sampled_from([1, 2, 3, 64, 1024]),
)
def test_term_dictionary_finds_exactly_its_terms(terms, probes, fence):
    from array import array
    from itertools import accumulate

    terms = list(terms)
    encoded = [t.encode("utf-8") for t in terms]
    offsets = array("q", accumulate(map(len, encoded), initial=0))
    ranks = array("i", sorted(range(len(terms)), key=terms.__getitem__))
    # Every fence-th term decoded on first use: small fences probe each block's edges.
    dictionary = TermDictionary(memoryview(b"".join(encoded)), offsets, ranks, fence)
    for tid, term in enumerate(terms):
        assert dictionary.find(term) == tid
        assert dictionary.term(tid) == term
    for probe in probes:
        assert dictionary.find(probe) == (terms.index(probe) if probe in terms else None)


def test_read_gives_typed_values_of_the_current_format(tmp_path):
    build().save(tmp_path)
    opened = read(tmp_path)
    assert opened.revision and opened.version == 8
    ((snap, record, _),) = opened.segments
    assert record is not None and record.chunks == len(snap.chunks.source)
    n_terms = len(snap.postings.terms)
    assert len(snap.postings.offsets) == n_terms + 1
    assert snap.postings.offsets[n_terms] == len(snap.postings.chunks)
    assert len(snap.chunks.source) == len(snap.chunks.length)


def test_stored_texts_are_compressed_in_blocks_and_read_back_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(_texts, "COMPRESS", True)
    monkeypatch.setattr(_texts, "TEXT_BLOCK", 64)  # texts span several blocks, blocks hold several texts
    texts = {f"t{i}.txt": f"word{i} " * (i * 7 % 40) + "Ünïcödé \udcff end" for i in range(30)}
    build(texts).save(tmp_path)
    (path,) = tmp_path.glob("data-*.bin")
    assert b"word3 word3 word3" not in path.read_bytes()  # compressed
    kb = KnowledgeBase.load(tmp_path)
    for source, text in sorted(texts.items(), reverse=True):
        assert kb.source_text(source) == text
    for hit in kb.search("word7 end", 30):
        assert hit.text == texts[hit.source][hit.start : hit.end]


def test_a_hit_in_a_long_ascii_text_decompresses_only_its_chunks_blocks(tmp_path, monkeypatch):
    import zlib

    monkeypatch.setattr(_texts, "TEXT_BLOCK", 64)
    long_ascii = " ".join(f"w{i}" for i in range(400)) + " needle here"
    texts = {"long.txt": long_ascii, "uni.txt": "Ünïcödé " * 30 + "needle café", **TEXTS}
    kb = KnowledgeBase(chunk_size=8, stride=4)
    for source, text in texts.items():
        kb.add_text(text, source)
    kb.save(tmp_path)
    loaded = KnowledgeBase.load(tmp_path)
    calls: list[int] = []
    real = zlib.decompress

    def counting(data: bytes, *args: int) -> bytes:
        calls.append(len(data))
        return real(data, *args)

    monkeypatch.setattr(zlib, "decompress", counting)
    hits = loaded.search("needle", 10)
    assert {h.source for h in hits} == {"long.txt", "uni.txt"}
    for hit in hits:
        assert hit.text == texts[hit.source][hit.start : hit.end]
    long_hits = [h for h in hits if h.source == "long.txt"]
    calls.clear()
    again = KnowledgeBase.load(tmp_path)
    (first,) = [h for h in again.search("needle", 10) if h.source == "long.txt"][:1]
    assert first.text == long_hits[0].text
    # The long text is about 2,400 bytes (38 blocks); its hit's chunk spans one or two,
    # the other hit's non-ASCII text is decoded whole (about 320 bytes, 6 blocks).
    assert 0 < len(calls) <= 2 + 8
    assert again.source_text("long.txt") == long_ascii


@pytest.mark.parametrize(("repeat", "code"), [(3, "B"), (300, "H"), (70_000, "I")])
def test_term_frequencies_are_saved_as_narrow_as_they_fit_and_score_the_same(tmp_path, repeat, code):
    texts = {**TEXTS, "many.txt": "zebra " * repeat + "lazy fox"}

    def make(items: dict[str, str]) -> KnowledgeBase:
        kb = KnowledgeBase(chunk_size=None)
        for source, text in items.items():
            kb.add_text(text, source)
        return kb

    make(texts).save(tmp_path / "a")
    ((snap, _, _),) = read(tmp_path / "a").segments
    tfs = snap.postings.tfs
    assert not isinstance(tfs, TfColumn)  # one large count among few postings: the column widened
    assert memoryview(tfs).format == code
    assert max(snap.postings.tfs) == repeat
    kb = KnowledgeBase.load(tmp_path / "a")
    queries = ["zebra", "lazy fox", "zebra fox", *QUERIES]
    fresh = make(texts)
    for q in queries:
        assert ranked(kb, q) == ranked(fresh, q)
    # A change after load copies the narrow lists out into uint32 ones; a save narrows them again.
    kb.add_text("zebra zebra crossing", "cross.txt")
    kb.remove("greek.txt")
    changed = {k: v for k, v in texts.items() if k != "greek.txt"} | {"cross.txt": "zebra zebra crossing"}
    fresh = make(changed)
    for q in queries:
        assert ranked(kb, q) == ranked(fresh, q)
    kb.save(tmp_path / "b")
    kb.optimize()
    for folder in ("a", "b"):
        again = KnowledgeBase.load(tmp_path / folder)
        for q in queries:
            assert ranked(again, q) == ranked(fresh if folder == "b" else make(texts), q)
    assert kb.explain("zebra", kb.search("zebra")[0]).terms[0].tf == repeat
