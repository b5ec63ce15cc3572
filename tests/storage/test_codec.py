"""Formats 3 and 4: read in place from mapped data files, the term dictionary, lazy texts, old formats."""

import json
import mmap
import shutil
import zlib
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._storage import _impact_tables, _segments, _store, _texts
from clanker_rag._storage._codec import TermDictionary, read
from clanker_rag._storage._tf_column import TfColumn

DATA = Path(__file__).parents[1] / "data"
# index_v4 was saved by format 4 with its texts in fixed 64-byte zlib blocks (format 5 ends blocks with texts);
# index_v5 is index_v4 saved by format 5 with a lookup table for every list (format 6 no longer saves a slot
# table's impacts again beside its list's); index_v6 is index_v5 saved by format 6, a table for every list
# (format 7 compresses each slot table); index_v7 is index_v6 saved by format 7 the same way (format 8 saves
# the sources' and chunks' offsets as uint32 and the term frequencies as uint8 with the large ones apart).
FIXTURES = {version: DATA / f"index_v{version}" for version in (1, 2, 3, 4, 5, 6, 7)}

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


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7])
def test_every_format_fixture_loads_and_saves_as_format_8(tmp_path, version):
    # tests/data/index_v<N> were written by format_version N and are never rewritten.
    shutil.copytree(FIXTURES[version], tmp_path / "old")
    kb = KnowledgeBase.load(tmp_path / "old")
    assert kb.search("lazy dog")[0].source == "fox.txt"
    assert [h.source for h in kb.search("kappa")] == ["greek.txt"]
    assert kb.source_metadata("greek.txt") == {"n": 1}
    kb.save(tmp_path / "new")
    again = KnowledgeBase.load(tmp_path / "new")
    assert json.loads((tmp_path / "new" / "index.json").read_text())["format_version"] == 8
    assert again.sources() == kb.sources()
    for q in ["lazy dog", "kappa", "echo w3 pad", "quick brown"]:
        assert ranked(again, q) == ranked(kb, q)


def test_v3_fixture_matches_the_v2_fixture_it_was_converted_from(tmp_path):
    v2 = KnowledgeBase.load(FIXTURES[2])
    v3 = KnowledgeBase.load(FIXTURES[3])
    assert v3.sources() == v2.sources()
    for q in ["echo w3 pad", "lazy dog", "alpha"]:
        assert ranked(v3, q) == ranked(v2, q)


def test_v4_fixture_reads_its_fixed_size_text_blocks_exactly():
    v3 = KnowledgeBase.load(FIXTURES[3])
    v4 = KnowledgeBase.load(FIXTURES[4])
    assert b"quick brown" not in next(FIXTURES[4].glob("data-*.bin")).read_bytes()  # compressed
    assert v4.sources() == v3.sources()
    for source in v3.sources():
        assert v4.source_text(source) == v3.source_text(source)  # spans many 64-byte blocks
    for q in ["echo w3 pad", "lazy dog", "alpha"]:
        assert ranked(v4, q) == ranked(v3, q)


def test_v5_fixture_serves_its_saved_slot_impacts_and_saves_tables_without_them(tmp_path, monkeypatch):
    v4 = KnowledgeBase.load(FIXTURES[4])
    v5 = KnowledgeBase.load(FIXTURES[5])
    tables = v5._index.base_tables
    assert tables is not None and v5._index.lookups.saved is not None
    queries = ["echo w3 pad", "lazy dog", "alpha", "quick brown fox", "kappa lambda"]
    expected = [ranked(v4, q) for q in queries]
    assert [ranked(v5, q) for q in queries] == expected
    assert not v5._index.lookups.cache.entries, "the saved tables served every long lookup"
    opened = read(FIXTURES[5])
    old = opened.segments[0].snap.postings.tables
    assert old is not None and old.slot_impacts is not None and old.dense_terms  # both kinds, impacts saved again
    monkeypatch.setattr(_impact_tables, "STORED_MIN", 1)
    monkeypatch.setattr(_impact_tables, "STORED_SHARE", 10**9)
    monkeypatch.setattr(_impact_tables, "SLOT_LIMIT", 30)
    v5.save(tmp_path)
    new = read(tmp_path).segments[0].snap.postings.tables
    assert new is not None and new.slot_impacts is None and new.slot_offsets is None
    assert list(new.slot_terms) == list(old.slot_terms) and unpacked_slots(new) == bytes(old.slots)
    again = KnowledgeBase.load(tmp_path)
    assert [ranked(again, q) for q in queries] == expected
    assert not again._index.lookups.cache.entries


def unpacked_slots(tables):
    """A format 7 segment's slot tables inflated and laid end to end, as formats 3-6 saved them."""
    spans = tables.slot_spans
    assert spans is not None
    return b"".join(zlib.decompress(tables.slots[a:b], -15) for a, b in pairwise(spans))


def test_v6_fixture_serves_its_uncompressed_slot_tables_and_saves_them_compressed(tmp_path, monkeypatch):
    v5 = KnowledgeBase.load(FIXTURES[5])
    v6 = KnowledgeBase.load(FIXTURES[6])
    queries = ["echo w3 pad", "lazy dog", "alpha", "quick brown fox", "kappa lambda", "w3 w7 pad"]
    expected = [ranked(v5, q) for q in queries]
    assert [ranked(v6, q) for q in queries] == expected
    assert v6._index.lookups.saved is not None and not v6._index.lookups.cache.entries, "its tables served"
    old = read(FIXTURES[6]).segments[0].snap.postings.tables
    assert old is not None and old.slot_spans is None and old.slot_terms and old.dense_terms
    assert len(old.slots) == len(old.slot_terms) * old.n_chunks  # one uint16 a chunk, uncompressed
    monkeypatch.setattr(_impact_tables, "STORED_MIN", 1)
    monkeypatch.setattr(_impact_tables, "STORED_SHARE", 10**9)
    monkeypatch.setattr(_impact_tables, "SLOT_LIMIT", 30)
    v6.save(tmp_path)
    new = read(tmp_path).segments[0].snap.postings.tables
    assert new is not None and new.slot_spans is not None and len(new.slots) < 2 * len(old.slots)
    assert list(new.slot_terms) == list(old.slot_terms) and unpacked_slots(new) == bytes(old.slots)
    assert bytes(new.dense) == bytes(old.dense)
    again = KnowledgeBase.load(tmp_path)
    assert [ranked(again, q) for q in queries] == expected
    assert not again._index.lookups.cache.entries


def test_v7_fixture_reads_its_int64_columns_and_saves_them_as_uint32(tmp_path):
    v6 = KnowledgeBase.load(FIXTURES[6])
    v7 = KnowledgeBase.load(FIXTURES[7])
    queries = ["echo w3 pad", "lazy dog", "alpha", "quick brown fox", "kappa lambda", "w3 w7 pad"]
    expected = [ranked(v6, q) for q in queries]
    assert [ranked(v7, q) for q in queries] == expected
    assert all(v7.source_text(s) == v6.source_text(s) for s in v6.sources())
    (old,) = read(FIXTURES[7]).segments
    assert "types" not in json.loads(_segment_body(FIXTURES[7]))  # format 7: every offset column int64
    assert memoryview(old.snap.sources.chars).format == "q" and memoryview(old.snap.chunks.start).format == "q"
    v7.save(tmp_path)
    body = json.loads(_segment_body(tmp_path))
    assert set(body["types"].values()) == {"I"} and len(body["types"]) == 7
    assert body["sources"]["text_blocks"]["type"] == "I"
    (new,) = read(tmp_path).segments
    assert list(new.snap.sources.chars) == list(old.snap.sources.chars)
    assert list(new.snap.chunks.start) == list(old.snap.chunks.start)
    assert list(new.snap.chunks.end) == list(old.snap.chunks.end)
    again = KnowledgeBase.load(tmp_path)
    assert [ranked(again, q) for q in queries] == expected
    assert all(again.source_text(s) == v6.source_text(s) for s in v6.sources())


def _segment_body(folder):
    (record,) = json.loads((folder / "index.json").read_text())["body"]["segments"]
    off, length = record["body"]
    return (folder / record["file"]).read_bytes()[off : off + length]


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


def test_read_gives_typed_values_for_every_version():
    for version, folder in FIXTURES.items():
        opened = read(folder)
        assert opened.revision and opened.version == version
        ((snap, record, _),) = opened.segments
        assert (record is None) == (version < 4)  # formats 1-3 are one segment without a commit record
        n_terms = len(snap.postings.terms)
        assert len(snap.postings.offsets) == n_terms + 1
        assert snap.postings.offsets[n_terms] == len(snap.postings.chunks), version
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
