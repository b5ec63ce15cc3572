"""Term frequencies saved as uint8 with the counts of 255 or more apart (format 8): exact, and damage refused."""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._storage import _segments, _store, _tf_column
from clanker_rag._storage._codec import read
from clanker_rag._storage._store import Blob
from clanker_rag._storage._tf_column import (
    OVERFLOW,
    TfColumn,
    extend_ints,
    narrow_tfs,
    split_overflow,
    tf_part,
    tf_type,
)
from tests.helpers._forge import rewrite_segment

counts = st.lists(
    st.one_of(st.integers(1, 254), st.integers(1, 254), st.integers(1, 254), st.integers(255, 70_000)), max_size=200
)


def column_of(values: list[int]) -> TfColumn | None:
    split = split_overflow(narrow_tfs(array("I", values)))
    return None if split is None else TfColumn(split.narrow, split.positions, split.values, "t")


@settings(max_examples=150, deadline=None)
@given(counts, st.lists(st.tuples(st.integers(0, 210), st.integers(0, 210)), max_size=12))
def test_a_split_column_reads_back_every_count_by_slice_item_and_whole(values, ranges):
    column = column_of(values)
    many = sum(v >= OVERFLOW for v in values)
    if column is None:  # uint8 already, or too many large counts: the column is saved wide instead
        assert max(values, default=0) < 256 or many * _tf_column.OVERFLOW_SHARE > len(values)
        return
    assert len(column) == len(values) and list(column.positions) == [i for i, v in enumerate(values) if v >= 255]
    assert all(column.narrow[i] == min(v, OVERFLOW) for i, v in enumerate(values))
    column.check_table()
    assert list(column) == values == list(column.whole())
    assert [column[i] for i in range(len(values))] == values
    assert [column[-i - 1] for i in range(len(values))] == values[::-1]
    for a, b in ranges:
        part = column[a:b]
        assert list(part) == values[a:b]
        if not any(v >= OVERFLOW for v in values[a:b]):
            assert isinstance(part, memoryview)  # no overflowed posting: a view, no copy


@settings(max_examples=60, deadline=None)
@given(counts)
def test_tf_part_writes_the_narrowest_layout_and_copies_a_split_column_as_it_is(values):
    blob = Blob()
    keys = tf_part(blob, array("I", values))
    column = column_of(values)
    largest = max(values, default=0)
    if "tf_overflow" in keys:
        assert keys["tf_type"] == "B" and column is not None and largest >= 255
    else:
        assert keys["tf_type"] == ("B" if largest < 256 else "H" if largest < 65536 else "I")
    if column is not None:
        again = tf_part(Blob(), column)
        assert again["tf_type"] == "B" and "tf_overflow" in again
    blob.release()


many_wide = st.lists(st.one_of(st.integers(0, 300), st.integers(255, 70_000), st.just(255)), max_size=300)


@settings(max_examples=150, deadline=None)
@given(st.one_of(counts, many_wide), st.sampled_from(["I", "i", "H", "B"]))
def test_tf_part_writes_what_narrowing_then_splitting_writes(values, code):
    # tf_part splits 4-byte counts straight, without the uint16 copy narrow_tfs makes first:
    # the keys and the bytes are those of narrowing, then splitting the narrowed counts.
    try:
        tfs = array(code, values)
    except OverflowError:
        return
    blob, ref_blob = Blob(), Blob()
    keys = tf_part(blob, tfs)
    narrow = narrow_tfs(tfs)
    split = split_overflow(narrow)
    if split is None:
        code = narrow.typecode if isinstance(narrow, array) else memoryview(narrow).format
        expected = {"tfs": ref_blob.array(narrow), "tf_type": code}
    else:
        expected = tf_part(ref_blob, TfColumn(split.narrow, split.positions, split.values, "t"))
    assert keys == expected
    assert b"".join(map(bytes, blob.parts)) == b"".join(map(bytes, ref_blob.parts))
    blob.release()
    ref_blob.release()


def test_an_overflow_table_beside_a_wide_column_is_refused():
    with pytest.raises(IndexFormatError, match="beside a 'H' column"):
        tf_type({"tf_type": "H", "tf_overflow": {}}, "here")


# A few chunks count a term hundreds of times among hundreds of short ones: the column splits.
TEXTS = {
    f"d{i:03d}.txt": f"alpha{i % 7} beta{i % 5} gamma words of source {i} " + "filler " * (i % 9) for i in range(400)
}
TEXTS["big.txt"] = "zebra " * 300 + "alpha1 " * 260 + "words"
TEXTS["edge.txt"] = "zebra " * 255 + "gamma " * 256 + "end"
QUERIES = ["zebra", "alpha1 words", "gamma zebra", "beta3 filler", "source 17", "end words"]


def make(texts: dict[str, str]) -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    for source, text in texts.items():
        kb.add_text(text, source)
    return kb


def ranked(kb: KnowledgeBase) -> list[list[tuple[str, float, str]]]:
    return [[(h.source, h.score, h.text) for h in kb.search(q)] for q in QUERIES]


def test_a_split_column_scores_exactly_after_load_commits_merges_and_optimize(tmp_path):
    make(TEXTS).save(tmp_path)
    (seg,) = read(tmp_path).segments
    tfs = seg.snap.postings.tfs
    assert isinstance(tfs, TfColumn) and {300, 260, 256, 255} <= set(tfs.values)
    loaded = KnowledgeBase.load(tmp_path)
    assert ranked(loaded) == ranked(make(TEXTS))
    # A commit whose segment itself splits, a removal of a source holding overflowed counts, a merge.
    live = dict(TEXTS)
    loaded.add_text("zebra " * 400 + "alpha2", "tail.txt")
    loaded.remove("big.txt")
    live["tail.txt"] = "zebra " * 400 + "alpha2"
    del live["big.txt"]
    for i in range(300):
        loaded.add_text(f"gamma note {i}", f"n{i}.txt")
        live[f"n{i}.txt"] = f"gamma note {i}"
    loaded.save(merge=False)
    assert len(json.loads((tmp_path / "index.json").read_text())["body"]["segments"]) == 2
    tail = read(tmp_path).segments[1].snap.postings.tfs
    assert isinstance(tail, TfColumn) and list(tail.values) == [400]
    fresh = make(live)
    assert ranked(loaded) == ranked(fresh)
    again = KnowledgeBase.load(tmp_path)  # replays the tail's split column
    assert ranked(again) == ranked(fresh)
    again.optimize()  # written whole: the loaded split column's lists copied
    assert ranked(KnowledgeBase.load(tmp_path)) == ranked(fresh)
    copy = KnowledgeBase.load(tmp_path)
    copy.save(tmp_path / "copy")  # a loaded index saved elsewhere copies its parts whole
    assert ranked(KnowledgeBase.load(tmp_path / "copy")) == ranked(fresh)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 64)
    make(TEXTS).save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)  # as if big: checked block by block
    return tmp_path


def body_of(folder: Path) -> tuple[Path, dict[str, Any]]:
    (record,) = json.loads((folder / "index.json").read_text())["body"]["segments"]
    path = folder / record["file"]
    off, length = record["body"]
    return path, json.loads(path.read_bytes()[off : off + length])


@pytest.mark.parametrize(("part", "itemsize", "item"), [("positions", 8, 1), ("values", 4, 2)])
def test_a_flipped_bit_in_the_overflow_table_fails_at_load(folder, part, itemsize, item):
    path, body = body_of(folder)
    start, _ = body["postings"]["tf_overflow"][part]
    data = bytearray(path.read_bytes())
    data[start + item * itemsize] ^= 0x01
    path.write_bytes(data)
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        KnowledgeBase.load(folder)


def test_a_flipped_bit_at_an_overflow_mark_fails_when_its_list_is_read(folder):
    path, body = body_of(folder)
    start, _ = body["postings"]["tfs"]
    (seg,) = read(folder).segments
    tfs = seg.snap.postings.tfs
    assert isinstance(tfs, TfColumn)
    at = tfs.positions[0]
    del seg, tfs
    data = bytearray(path.read_bytes())
    data[start + at] ^= 0x01
    path.write_bytes(data)
    kb = KnowledgeBase.load(folder)  # the column's blocks are checked when first read
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        for q in QUERIES:
            kb.search(q)


def forge(folder: Path, edit: Callable[[dict[str, Any], bytearray], None]) -> None:
    rewrite_segment(folder, lambda body: body.pop("blocks"), edit)


def edit_table(
    part: str, typecode: str, change: Callable[[array[Any]], None]
) -> Callable[[dict[str, Any], bytearray], None]:
    def edit(body: dict[str, Any], data: bytearray) -> None:
        start, size = body["postings"]["tf_overflow"][part]
        values = array(typecode, bytes(data[start : start + size]))
        change(values)
        data[start : start + size] = values.tobytes()

    return edit


def swap(values: array[Any]) -> None:
    values[0], values[1] = values[1], values[0]


def too_small(values: array[Any]) -> None:
    values[0] = 7


def past_the_end(values: array[Any]) -> None:
    values[-1] = 10**9


@pytest.mark.parametrize(
    ("part", "typecode", "change"),
    [("positions", "q", swap), ("positions", "q", past_the_end), ("values", "I", too_small)],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_an_inconsistent_overflow_table_is_refused_at_load(folder, part, typecode, change):
    forge(folder, edit_table(part, typecode, change))
    with pytest.raises(IndexFormatError, match="overflow table is inconsistent"):
        KnowledgeBase.load(folder)


def test_an_overflow_entry_its_column_does_not_mark_fails_when_its_list_is_read(folder):
    def unmark(body: dict[str, Any], data: bytearray) -> None:
        start, _ = body["postings"]["tfs"]
        first, _ = body["postings"]["tf_overflow"]["positions"]
        at = array("q", bytes(data[first : first + 8]))[0]
        data[start + at] = 3

    forge(folder, unmark)
    kb = KnowledgeBase.load(folder)
    with pytest.raises(IndexFormatError, match="does not mark"):
        for q in QUERIES:
            kb.search(q)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["B", "H", "I"]), st.sampled_from(["H", "I", "q", "Q"]), st.data())
def test_extend_ints_widens_unsigned_items_exactly(code, into, data):
    width = array(code).itemsize
    values = data.draw(st.lists(st.integers(0, (1 << (8 * width)) - 1), max_size=300))
    out = array(into, [7])
    if array(into).itemsize < width:
        return
    extend_ints(out, memoryview(array(code, values)))  # a long run takes the strided copy
    assert list(out) == [7, *values]
