"""The checks a load leaves for first use: a damaged or inconsistent column fails clearly when it is first read.

A load of a big segment reads its sources' columns (name, text and
fingerprint offsets, lengths, runs of chunks, sorted names, text block
tables) and the chunk bounds only as they are used (see
``_storage/_stored.py``).  Each test damages one of them, checks that the load
itself still succeeds (the check really is deferred), and that the first use
that reads it raises ``IndexFormatError`` rather than give a wrong answer.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._storage import _segments, _store, _texts
from tests.helpers._forge import rewrite_segment

N = 120
NAMES = [f"doc{i:03d}.txt" for i in range(N)]
ITEM = 70  # the source whose entries are damaged
# A chunk column's item damaged in the column's middle: a block that holds the column's first
# items may also hold the end of the part before it, which a load reads (a column's last item).
MID = 100


def text(i: int) -> str:
    return f"alpha{i % 7} beta{i % 5} words of source {i} " + "filler " * (i % 9)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An index of N sources saved with small checksum blocks, loaded as if big (not hashed at load)."""
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 64)
    # Text blocks of about one text each: the block tables then span several checksum
    # blocks, and their middle items share none with the parts a load reads.
    monkeypatch.setattr(_texts, "TEXT_BLOCK", 64)
    kb = KnowledgeBase(chunk_size=8, stride=4)
    for i, name in enumerate(NAMES):
        kb.add_text(text(i), name)
    kb.save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)
    _, body, _ = segment(tmp_path)  # format 8: the columns damaged below saved as uint32 (4-byte items)
    assert set(body["types"].values()) == {"I"} and body["sources"]["text_blocks"]["type"] == "I"
    return tmp_path


def segment(folder: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    doc = json.loads((folder / "index.json").read_text())
    (record,) = doc["body"]["segments"]
    path = folder / record["file"]
    off, length = record["body"]
    return path, json.loads(path.read_bytes()[off : off + length]), doc


def ref(body: dict[str, Any], part: str) -> list[int]:
    value: Any = body
    for key in part.split("."):
        value = value[key]
    return list(value)


def flip(folder: Path, part: str, item: int, itemsize: int) -> None:
    """Flip the low bit of item ``item`` of ``part``, leaving every checksum as saved."""
    path, body, _ = segment(folder)
    start, size = ref(body, part)
    at = start + item * itemsize
    assert at < start + size
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(data)


def forge(folder: Path, part: str, typecode: str, edit: Callable[[array[Any]], None]) -> None:
    """Rewrite ``part``'s values with ``edit`` and fix every checksum (the block checksums are
    dropped, as in a segment written before them), as a careful forger would."""

    def edit_data(body: dict[str, Any], data: bytearray) -> None:
        start, size = ref(body, part)
        values = array(typecode, bytes(data[start : start + size]))
        edit(values)
        data[start : start + size] = values.tobytes()

    rewrite_segment(folder, lambda body: body.pop("blocks"), edit_data)


def every_name_looked_up(kb: KnowledgeBase) -> None:
    for name in NAMES:
        assert name in kb


def read_its_text(kb: KnowledgeBase) -> None:
    kb.source_text(NAMES[ITEM])


def replace_it(kb: KnowledgeBase) -> None:
    kb.add_text("a different text", NAMES[ITEM])  # compares its saved fingerprint


def remove_it(kb: KnowledgeBase) -> None:
    kb.remove(NAMES[ITEM])


def list_sources(kb: KnowledgeBase) -> None:
    kb.sources()


def search(kb: KnowledgeBase) -> None:
    # Every chunk holds one of these words: every chunk is a hit, so every chunk's row and
    # source run are read (a search checks the chunks it shows, not the whole table).
    kb.search(EVERY_CHUNK, k=10_000)


EVERY_CHUNK = " ".join(f"alpha{i}" for i in range(7)) + " words source filler"


def test_the_search_use_shows_every_chunk(folder):
    kb = KnowledgeBase.load(folder)
    shown = {(h.source, h.chunk_index) for h in kb.search(EVERY_CHUNK, k=10_000)}
    assert shown == {(h.source, h.chunk_index) for h in kb.chunks()}


# (part, item size, item, the first use that reads it)
DAMAGED = [
    ("sources.name_offsets", 4, ITEM, list_sources),
    ("sources.name_offsets", 4, ITEM + 1, every_name_looked_up),
    ("sources.sorted", 4, ITEM, every_name_looked_up),
    ("sources.text_offsets", 4, ITEM + 1, read_its_text),
    ("sources.fingerprint_offsets", 4, ITEM + 1, replace_it),
    ("sources.chars", 4, ITEM, read_its_text),
    ("sources.first_chunks", 4, ITEM + 1, remove_it),
    ("sources.first_chunks", 4, ITEM + 1, search),
    ("sources.text_blocks.offsets", 4, MID // 2, read_its_text),
    ("sources.text_blocks.starts", 4, MID // 2, read_its_text),
    ("chunks.source", 4, MID, search),
    ("chunks.index", 4, MID, search),
    ("chunks.start", 4, MID, search),
    ("chunks.end", 4, MID, search),
    ("chunks.start_line", 4, MID, search),
    ("chunks.end_line", 4, MID, search),
]


@pytest.mark.parametrize(("part", "itemsize", "item", "use"), DAMAGED, ids=lambda v: getattr(v, "__name__", str(v)))
def test_a_flipped_bit_in_a_lazily_checked_column_fails_when_first_read(folder, part, itemsize, item, use):
    flip(folder, part, item, itemsize)
    kb = KnowledgeBase.load(folder)  # the column is not read yet
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        use(kb)


@pytest.mark.parametrize("part", ["sources.text_offsets", "chunks.start"])
def test_a_commit_that_does_not_read_a_damaged_column_succeeds_and_the_damage_stays_found(folder, monkeypatch, part):
    monkeypatch.setattr(_segments, "POLICY", _segments.Policy(full_share=0.9, full_below=0))  # a cheap commit
    flip(folder, part, ITEM + 1, 4)
    kb = KnowledgeBase.load(folder)
    kb.add_text("a new note", "note.md")
    kb.remove(NAMES[3])
    kb.save()
    again = KnowledgeBase.load(folder)
    assert "note.md" in again and NAMES[3] not in again
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        read_its_text(again) if part.startswith("sources") else search(again)


def test_a_flipped_bit_in_the_chunk_lengths_fails_at_load(folder):
    flip(folder, "chunks.length", 5, 4)  # copied at load: the statistics
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        KnowledgeBase.load(folder)


def swap(i: int) -> Callable[[array[Any]], None]:
    def edit(values: array[Any]) -> None:
        values[i], values[i + 1] = values[i + 1], values[i]

    return edit


def set_item(i: int, value: Callable[[array[Any]], int]) -> Callable[[array[Any]], None]:
    def edit(values: array[Any]) -> None:
        values[i] = value(values)

    return edit


# (part, typecode, edit, the first use that reads it, what the error says)
INCONSISTENT = [
    ("sources.name_offsets", "I", swap(ITEM), list_sources, "name_offsets do not match"),
    ("sources.name_offsets", "I", swap(ITEM), every_name_looked_up, "name_offsets do not match"),
    ("sources.sorted", "i", set_item(ITEM, lambda v: N + 5), every_name_looked_up, "a source that does not exist"),
    ("sources.text_offsets", "I", swap(ITEM), read_its_text, "text_offsets do not match"),
    ("sources.fingerprint_offsets", "I", swap(ITEM), replace_it, "fingerprint_offsets do not match"),
    ("sources.first_chunks", "I", swap(ITEM), remove_it, "first_chunks .*do not match"),
    ("sources.first_chunks", "I", swap(ITEM), search, "first_chunks .*do not match"),
    ("sources.text_blocks.starts", "I", swap(1), read_its_text, "text blocks do not cover"),
    ("chunks.start", "I", set_item(5, lambda v: 10_000), search, "lies outside its source text"),
    ("chunks.end", "I", set_item(5, lambda v: 10_000), search, "lies outside its source text"),
    ("chunks.source", "i", set_item(5, lambda v: N + 5), search, "points at a source that does not exist"),
]


@pytest.mark.parametrize(
    ("part", "typecode", "edit", "use", "message"), INCONSISTENT, ids=lambda v: getattr(v, "__name__", str(v))
)
def test_an_inconsistent_lazily_checked_column_fails_when_first_read(folder, part, typecode, edit, use, message):
    forge(folder, part, typecode, edit)
    kb = KnowledgeBase.load(folder)  # loads: the column is checked when first read
    with pytest.raises(IndexFormatError, match=message):
        use(kb)


def test_statistics_that_do_not_match_the_chunk_lengths_fail_when_the_total_is_first_read(folder, tmp_path):
    forge(folder, "chunks.length", "i", set_item(3, lambda v: v[3] + 1))
    # A load takes the saved total; everything that reads it (new statistics, a whole save) checks it first.
    with pytest.raises(IndexFormatError, match="statistics do not match"):
        KnowledgeBase.load(folder).save(tmp_path / "whole")
    kb = KnowledgeBase.load(folder)
    kb.add_text("one more text with words", "late.txt")
    with pytest.raises(IndexFormatError, match="statistics do not match"):
        kb.search("words")


def test_a_flipped_bit_in_the_term_dictionary_fails_when_a_commit_looks_the_term_up(folder):
    term = KnowledgeBase.load(folder)._index.terms[10]
    path, body, _ = segment(folder)
    start = ref(body, "dictionary.text")[0]
    at, size = ref(body, "dictionary.offsets")
    offsets = array(body["dictionary"].get("offsets_type", "q"), path.read_bytes()[at : at + size])
    data = bytearray(path.read_bytes())
    data[start + offsets[10]] ^= 0x01
    path.write_bytes(data)
    kb = KnowledgeBase.load(folder)
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        kb.add_text(f"a note that names {term}", "note.md")


@pytest.mark.parametrize("reads", [0, 5, 10_000])
def test_term_lookups_find_the_same_ids_checked_read_by_read_or_whole(folder, monkeypatch, reads):
    from clanker_rag._storage import _codec

    reference = KnowledgeBase.load(folder)
    known = reference._index.terms
    words = [known[tid] for tid in range(len(known))] + ["zzz", "", "qqqq", "alpha9zz"]
    monkeypatch.setattr(_codec, "CHECKED_READS", reads)
    kb = KnowledgeBase.load(folder)
    terms = kb._index.terms
    assert isinstance(terms, _codec.TermList)
    saved = terms.saved
    expected = [*range(len(words) - 4), None, None, None, None]
    assert [saved.find(w) for w in words] == expected
    assert [saved.term(tid) for tid in range(len(saved))] == words[:-4]
    # Looked up in bulk (a tail segment's replay), in any order, and decoded all at once.
    monkeypatch.setattr(_codec, "BULK_SHARE", 1)
    assert saved.find_all(words[::-1]) == expected[::-1]
    assert saved.all() == list(terms) == words[:-4]


def test_lookups_read_each_probed_term_once_while_checking_read_by_read(folder, monkeypatch):
    """Binary searches for different terms probe the same ranks first: those terms are kept, so a
    commit's lookups read and check only what no earlier lookup read."""
    from clanker_rag._storage import _codec

    monkeypatch.setattr(_codec, "CHECKED_READS", 10_000)
    terms = KnowledgeBase.load(folder)._index.terms
    assert isinstance(terms, _codec.TermList)
    saved = terms.saved
    words = [saved.term(tid) for tid in range(0, len(saved), 3)] + ["zzz", "qqqq"]
    before = saved._budget
    first = [saved.find(w) for w in words]
    assert first == [*range(0, len(saved), 3), None, None]
    spent = before - saved._budget
    assert 0 < spent < len(words) * max(1, len(saved).bit_length())  # shared probes read once
    left = saved._budget
    assert [saved.find(w) for w in words] == first
    assert saved._budget == left  # nothing read again
