"""Offsets saved narrow (format 7; the sources' and chunks' columns since format 8): uint32 when they fit, int64
otherwise, read back exactly; damage is refused."""

import json
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._storage import _segments, _store
from clanker_rag._storage._offset_column import column_type, int_part, offset_part, offset_type

SECTIONS = ("postings", "orders", "dictionary")


def segment(folder):
    """The (only) segment's path and body."""
    (record,) = json.loads((folder / "index.json").read_text())["body"]["segments"]
    path = folder / record["file"]
    off, length = record["body"]
    return path, json.loads(path.read_bytes()[off : off + length])


def flip(folder, part, item, itemsize):
    """Flip the low bit of item ``item`` of ``section.offsets``, every checksum left as saved."""
    path, body = segment(folder)
    section, _, key = part.partition(".")
    start, size = body[section][key]
    assert item * itemsize < size
    data = bytearray(path.read_bytes())
    data[start + item * itemsize] ^= 0x01
    path.write_bytes(data)


def saved(blob, ref, code):
    return array(code, b"".join(bytes(p) for p in blob.parts)[ref[0] : ref[0] + ref[1]])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 1 << 34), max_size=40).map(sorted), st.sampled_from(["q", "I", "view"]))
def test_offsets_round_trip_in_the_narrowest_type_that_holds_them(values, given_as):
    if given_as == "I" and values and values[-1] >= 1 << 32:
        given_as = "q"
    offsets = array("q" if given_as == "view" else given_as, values)
    blob = _store.Blob()
    ref, code = offset_part(blob, memoryview(offsets) if given_as == "view" else offsets)
    assert list(saved(blob, ref, code)) == values
    assert code == ("I" if not values or values[-1] < 1 << 32 else "q")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 1 << 34), max_size=40), st.sampled_from(["q", "I", "view"]))
def test_columns_in_any_order_round_trip_as_uint32_when_every_value_fits(values, given_as):
    if given_as == "I" and any(v >= 1 << 32 for v in values):
        given_as = "q"
    column = array("q" if given_as == "view" else given_as, values)
    blob = _store.Blob()
    ref, code = int_part(blob, memoryview(column) if given_as == "view" else column)
    assert list(saved(blob, ref, code)) == values
    assert code == ("I" if all(v < 1 << 32 for v in values) else "q")
    assert column_type({"x": code}, "x", "here") == code


def test_missing_and_unknown_column_types_are_refused():
    missing: tuple[dict[str, str] | None, ...] = (None, {})
    for types in missing:
        with pytest.raises(IndexFormatError, match=r"the type of sources\.chars is None"):
            column_type(types, "sources.chars", "here")
    with pytest.raises(IndexFormatError, match=r"the type of sources\.chars is 'i'"):
        column_type({"sources.chars": "i"}, "sources.chars", "here")


@pytest.mark.parametrize("code", ["i", "Q", "", 8])
def test_an_unknown_offsets_type_is_refused(code):
    with pytest.raises(IndexFormatError, match="offsets_type"):
        offset_type({"offsets_type": code}, "here")
    with pytest.raises(IndexFormatError, match="offsets_type is None"):
        offset_type({}, "here")


def build():
    kb = KnowledgeBase(chunk_size=8, stride=4)
    for i in range(40):
        kb.add_text(f"alpha{i % 7} beta{i % 5} words of source {i} " + "filler " * (i % 9), f"doc{i:03d}.txt")
    return kb


def ranked(kb, q):
    return [(h.source, h.score, h.text) for h in kb.search(q)]


def test_a_save_writes_uint32_offsets_and_searches_as_before(tmp_path):
    kb = build()
    kb.save(tmp_path)
    _, body = segment(tmp_path)
    assert [body[s]["offsets_type"] for s in SECTIONS] == ["I", "I", "I"]
    loaded = KnowledgeBase.load(tmp_path)
    for q in ("alpha3 words", "beta1 filler", "source 17", "alpha0 alpha1 beta4"):
        assert ranked(loaded, q) == ranked(kb, q)


# Every term of build()'s texts, in one query.
EVERY_TERM = " ".join([*(f"alpha{i}" for i in range(7)), *(f"beta{i}" for i in range(5)), "words of source filler"])
EVERY_TERM += " " + " ".join(map(str, range(40)))


@pytest.mark.parametrize("part", ["postings.offsets", "orders.offsets", "postings.maxes"])
def test_a_flipped_bit_in_a_per_term_part_fails_when_first_read(tmp_path, monkeypatch, part):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 64)
    build().save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)  # as if big: checked block by block
    _, body = segment(tmp_path)
    section, _, key = part.partition(".")
    n = body[section][key][1] // 4
    flip(tmp_path, part, n // 2, 4)
    loaded = KnowledgeBase.load(tmp_path)  # a load reads nothing per term but the ends
    with pytest.raises(IndexFormatError, match="checksum mismatch"):
        loaded.save(tmp_path / "whole")  # a whole save reads every term's
    if part != "orders.offsets":  # (the search reads the orders of long lists only)
        with pytest.raises(IndexFormatError, match="checksum mismatch"):
            KnowledgeBase.load(tmp_path).search(EVERY_TERM)
    for end in (0, n - 1):  # the ends, which the load cross-checks, are checked at load
        build().save(tmp_path / f"end{end}")
        flip(tmp_path / f"end{end}", part, end, 4)
        with pytest.raises(IndexFormatError, match="checksum mismatch"):
            KnowledgeBase.load(tmp_path / f"end{end}")


def test_a_flipped_bit_in_the_dictionary_offsets_fails_when_a_term_is_first_looked_up(tmp_path, monkeypatch):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 64)
    build().save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)
    _, body = segment(tmp_path)
    flip(tmp_path, "dictionary.offsets", body["dictionary"]["offsets"][1] // 8, 4)
    kb = KnowledgeBase.load(tmp_path)  # the dictionary is read as terms are looked up
    with pytest.raises(IndexFormatError, match="checksum mismatch"):
        for i in range(40):
            kb.search(f"alpha{i % 7} beta{i % 5} source {i} words filler")
    assert json.loads((tmp_path / "index.json").read_text())["format_version"] == 8
