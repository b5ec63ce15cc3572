"""Format 4: segments, commit points, deletion marks, merges, and readers that keep working."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from clanker_rag import Analyzer, IndexFormatError, KnowledgeBase
from clanker_rag._storage import _segments, _store, _texts
from clanker_rag._storage._segments import MergePlan, Policy, plan_merges

ROOT = Path(__file__).resolve().parents[2]
VOCAB = [f"t{i}" for i in range(12)]
plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)
QUERIES = ["t0", "t1 t2", "t3 t3 t4", "t5 t6 t7 t8", "t9 t10 t11 t0", "zz"]


@pytest.fixture
def segmented(monkeypatch):
    """Cheap commits even for tiny indexes, and merges after two segments of a level."""
    monkeypatch.setattr(_segments, "POLICY", Policy(merge_factor=2, full_share=0.6, full_below=0))


def commit(folder: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((folder / "index.json").read_text())["body"]
    return body


def ranked(kb: KnowledgeBase, q: str) -> list[tuple[str, int, float, str]]:
    return [(h.source, h.chunk_index, h.score, h.text) for h in kb.search(q, 100)]


def fresh_build(live: dict[str, str]) -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=4, stride=2, analyzer=plain)
    for source, text in live.items():
        kb.add_text(text, source)
    return kb


def test_a_commit_writes_only_the_new_segment_and_marks(tmp_path, segmented):
    kb = fresh_build({f"s{i}": " ".join(VOCAB[i % 5 : i % 5 + 6]) for i in range(30)})
    kb.save(tmp_path)
    (base,) = tmp_path.glob("data-*.bin")
    before = base.read_bytes()
    loaded = KnowledgeBase.load(tmp_path, analyzer=plain)
    loaded.add_text("t1 t2 t3 a brand new note", "note.md")
    loaded.remove("s3")
    loaded.save()
    body = commit(tmp_path)
    first, second = body["segments"]
    assert first["file"] == base.name and base.read_bytes() == before  # never rewritten
    assert first["deleted"] == [3] and first["deleted_chunks"] > 0
    assert second["chunks"] == len(list(loaded.chunks("note.md"))) and second["sources"] == 1
    assert (tmp_path / second["file"]).stat().st_size < base.stat().st_size
    # A removal alone writes no segment: only the commit point changes.
    again = KnowledgeBase.load(tmp_path, analyzer=plain)
    again.remove("s4")
    again.save(merge=False)
    assert [s["file"] for s in commit(tmp_path)["segments"]] == [first["file"], second["file"]]
    assert commit(tmp_path)["segments"][0]["deleted"] == [3, 4]
    assert "s4" not in KnowledgeBase.load(tmp_path, analyzer=plain).sources()


def test_merges_bound_the_segment_count_and_reclaim_deletions(tmp_path, segmented):
    kb = fresh_build({f"s{i}": "t0 t1 t2 t3 t4 t5 t6 t7" for i in range(40)})
    kb.save(tmp_path)
    counts = []
    for i in range(12):
        kb = KnowledgeBase.load(tmp_path, analyzer=plain)
        kb.add_text(f"t{i % 12} note {i}", f"n{i}")
        kb.save()
        counts.append(len(commit(tmp_path)["segments"]))
    assert max(counts) <= 4  # merge_factor 2: about one segment per level
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    for i in range(12):
        kb.remove(f"n{i}")
    kb.save()
    assert all(s["deleted_chunks"] == 0 for s in commit(tmp_path)["segments"]) or len(commit(tmp_path)["segments"]) == 1
    kb.optimize()
    (only,) = commit(tmp_path)["segments"]
    assert only["deleted"] == [] and only["chunks"] == len(kb)


def test_merge_policy():
    p = Policy(merge_factor=3, full_share=0.5, full_below=10)
    assert plan_merges([5], 0, p) == MergePlan(False, [])
    assert plan_merges([5, 1], 0, p).full  # under full_below chunks: write it whole
    assert plan_merges([100, 120], 0, p).full  # the tail passed full_share of the index
    assert plan_merges([100, 1, 1], 50, p).full  # deletions count too
    assert plan_merges([100, 1, 1], 0, p) == MergePlan(False, [])
    assert plan_merges([100, 1, 1, 1], 0, p) == MergePlan(False, [(1, 4)])
    # A merged run merges again with its level's neighbours, adjacent runs only.
    assert plan_merges([1000, 9, 9, 3, 3, 3], 0, p) == MergePlan(False, [(1, 6)])
    assert plan_merges([1000, 30, 3, 3], 0, p) == MergePlan(False, [])


def test_a_reader_keeps_its_commit_while_writers_move_on(tmp_path, segmented):
    kb = fresh_build({f"s{i}": "t0 t1 t2 t3" for i in range(20)})
    kb.save(tmp_path)
    reader = KnowledgeBase.load(tmp_path, analyzer=plain)
    want = ranked(reader, "t0 t1")
    readers_files = {p.name for p in tmp_path.glob("data-*.bin")}
    writer = KnowledgeBase.load(tmp_path, analyzer=plain)
    for i in range(4):
        writer.add_text(f"t0 t{i} extra", f"x{i}")
        writer.optimize()
    # The first commit deleted the reader's files: one index in the folder, never two.
    assert not readers_files & {p.name for p in tmp_path.glob("data-*.bin")}
    assert {p.name for p in tmp_path.glob("data-*.bin")} == {seg["file"] for seg in commit(tmp_path)["segments"]}
    assert ranked(reader, "t0 t1") == want  # mapped and open: unlinked files still read
    assert all(reader.source_text(f"s{i}") == "t0 t1 t2 t3" for i in range(20))
    assert len(KnowledgeBase.load(tmp_path, analyzer=plain)) == len(reader) + 4


def test_a_reader_that_read_the_replaced_commit_point_reads_the_new_one(tmp_path, segmented, monkeypatch):
    # A writer commits (deleting the files of the commit point this reader has just read)
    # between the reader's read of index.json and its opening of the segments.
    fresh_build({f"s{i}": "t0 t1 t2 t3" for i in range(20)}).save(tmp_path)
    writer = KnowledgeBase.load(tmp_path, analyzer=plain)
    real = _store.read_index
    calls: list[int] = []

    def read_then_writer_commits(folder: Any) -> Any:
        manifest = real(folder)
        calls.append(1)
        if len(calls) == 1:
            writer.add_text("t0 fresh words", "late.md")
            writer.optimize()  # a whole rewrite: every file the manifest names is gone now
        return manifest

    monkeypatch.setattr(_store, "read_index", read_then_writer_commits)
    reader = KnowledgeBase.load(tmp_path, analyzer=plain)
    assert len(calls) == 2  # the first commit point's files were gone: it read index.json again
    assert "late.md" in reader.sources() and len(reader) == len(writer)


def test_damage_in_a_segment_is_a_clear_error(tmp_path, segmented, monkeypatch):
    kb = fresh_build({f"s{i}": "t0 t1 t2 t3" for i in range(20)})
    kb.save(tmp_path)
    kb.add_text("t5 t6 quite new", "new.md")
    kb.save()
    second = tmp_path / commit(tmp_path)["segments"][1]["file"]
    data = bytearray(second.read_bytes())
    data[10] ^= 0x40
    second.write_bytes(data)
    with pytest.raises(IndexFormatError, match="checksum mismatch") as info:
        KnowledgeBase.load(tmp_path, analyzer=plain)
    assert str(second) in str(info.value)
    second.unlink()
    with pytest.raises(IndexFormatError, match="data file is missing"):
        KnowledgeBase.load(tmp_path, analyzer=plain)


def test_flipped_bit_in_a_large_segment_fails_when_its_block_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 256)
    kb = fresh_build({f"s{i}": " ".join(VOCAB[i % 7 :]) + f" w{i}" for i in range(300)})
    kb.save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)  # as if it were large: not hashed at load
    (path,) = tmp_path.glob("data-*.bin")
    body = json.loads(path.read_bytes()[slice(*_body_range(tmp_path))])
    start, size = body["postings"]["tfs"]
    data = bytearray(path.read_bytes())
    data[start + size - 2] ^= 0x01  # a term frequency near the end of the lists
    path.write_bytes(data)
    loaded = KnowledgeBase.load(tmp_path, analyzer=plain)  # loads: the block is not read yet
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        for term in [*VOCAB, *(f"w{i}" for i in range(300))]:
            loaded.search(term)
    with pytest.raises(IndexFormatError, match="checksum mismatch"):
        loaded.verify()


def _body_range(folder: Path) -> tuple[int, int]:
    (seg,) = commit(folder)["segments"]
    off, length = seg["body"]
    return off, off + length


COMMITTER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from clanker_rag import KnowledgeBase
    from clanker_rag._storage import _segments
    _segments.POLICY = _segments.Policy(merge_factor=2, full_share=0.5, full_below=0)
    kb = KnowledgeBase.load({folder!r})
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        kb.add_text("generation " + str(i) + " " + "filler words " * 50, "gen" + str(i % 7) + ".txt")
        if i % 3 == 0:
            kb.remove("gen" + str((i + 2) % 7) + ".txt")
        if i % 11 == 0:
            kb.optimize()
        else:
            kb.save()
    """
)


@pytest.mark.slow
def test_kill_during_commits_and_merges_leaves_a_whole_commit(tmp_path):
    kb = KnowledgeBase(chunk_size=8, stride=4)
    for i in range(30):
        kb.add_text(f"base text number {i} alpha beta gamma", f"base{i}.txt")
    kb.save(tmp_path)
    script = COMMITTER.format(root=str(ROOT), folder=str(tmp_path))
    for delay in (0.05, 0.15, 0.3, 0.45, 0.6, 0.9):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        loaded = KnowledgeBase.load(tmp_path)  # must never raise
        loaded.verify()
        assert {f"base{i}.txt" for i in range(30)} <= set(loaded.sources())
        for source in loaded.sources():
            assert loaded.source_text(source) is not None


def test_flipped_bit_in_a_stored_text_fails_when_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(_segments, "BLOCK_SIZE", 256)
    monkeypatch.setattr(_texts, "LEVEL", 0)  # the text findable in the file
    kb = fresh_build({f"s{i}": f"t{i % 12} " + "filler " * 60 + f"mark{i}" for i in range(40)})
    kb.save(tmp_path)
    monkeypatch.setattr(_store, "VERIFY_AT_LOAD", 0)
    (path,) = tmp_path.glob("data-*.bin")
    data = bytearray(path.read_bytes())
    at = data.rindex(b"mark17")  # the text's (the texts part follows the term dictionary)
    data[at] ^= 0x20  # "Mark17": still valid UTF-8 of the same length, so only the checksum can tell
    path.write_bytes(data)
    loaded = KnowledgeBase.load(tmp_path, analyzer=plain)
    assert (
        loaded.source_text("s39") is not None
    )  # other blocks read fine (8 KiB text blocks: s17 shares one with s0-s18)
    with pytest.raises(IndexFormatError, match="checksum mismatch in block"):
        loaded.source_text("s17")


def test_saved_tables_and_orders_serve_a_load_with_later_segments_exactly(tmp_path, segmented, monkeypatch):
    from clanker_rag._engine import _index
    from clanker_rag._storage import _impact_tables

    # Every list gets a saved order and a saved table (slot or dense), so a stale load reuses them.
    monkeypatch.setattr(_impact_tables, "STORED_MIN", 1)
    monkeypatch.setattr(_impact_tables, "STORED_SHARE", 10_000)
    monkeypatch.setattr(_index, "ORDER_MIN", 2)
    live = {f"s{i}": " ".join(VOCAB[j] for j in range(12) if (i * 7 + j * 3) % 5 < 3) for i in range(60)}
    fresh_build(live).save(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    kb.add_text("t0 t1 t1 t5 t11 and more", "late.md")
    kb.remove("s7")
    kb.save()
    live.pop("s7")
    live["late.md"] = "t0 t1 t1 t5 t11 and more"
    again = KnowledgeBase.load(tmp_path, analyzer=plain)
    assert again.segments == 2
    queries = [" ".join(VOCAB[j] for j in range(12) if (q >> j) & 1) for q in range(1, 400, 7)]
    fresh = fresh_build(live)
    for q in queries:
        assert ranked(again, q)[:5] == ranked(fresh, q)[:5]
    for q in queries:  # again: now from the restamped tables and kept orders
        assert [(h.source, h.score) for h in again.search(q, 3)] == [(h.source, h.score) for h in fresh.search(q, 3)]
    assert again._index.lookups.restamps, "saved slot tables were used under the new statistics"


def _packed_everywhere(folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A first segment of 90 sources saved in ``folder`` with orders and tables for every list,
    so its packed impacts serve the later commits' statistics (see _engine/_stale.py)."""
    from clanker_rag._engine import _index, _search, _stale
    from clanker_rag._storage import _impact_tables

    monkeypatch.setattr(_impact_tables, "STORED_MIN", 1)
    monkeypatch.setattr(_impact_tables, "STORED_SHARE", 10_000)
    monkeypatch.setattr(_index, "ORDER_MIN", 2)
    monkeypatch.setattr(_search, "SEED", 1)
    monkeypatch.setattr(_stale, "RECOMPUTE_SHARE", 0)
    live = {f"s{i}": " ".join(VOCAB[j] for j in range(12) if (i * 5 + j * 7) % 4 < 2) for i in range(90)}
    fresh_build(live).save(folder)
    return live


def test_a_load_of_several_segments_searches_its_packed_impacts_exactly(tmp_path, segmented, monkeypatch):
    from clanker_rag._engine import _stale

    live = _packed_everywhere(tmp_path, monkeypatch)
    for n in range(3):  # three commits: adds (later segments) and removals (deletion marks)
        kb = KnowledgeBase.load(tmp_path, analyzer=plain)
        kb.add_text(f"t{n} t{n + 1} t{n + 1} late{n}", f"late{n}.md")
        live[f"late{n}.md"] = f"t{n} t{n + 1} t{n + 1} late{n}"
        kb.remove(f"s{10 + n}")
        live.pop(f"s{10 + n}")
        kb.save(merge=False)
    reference = fresh_build(live)
    queries = [" ".join(VOCAB[j] for j in range(12) if (q >> j) & 1) for q in range(1, 600, 11)]
    for k in (1, 3):
        again = KnowledgeBase.load(tmp_path, analyzer=plain)  # cold: every term's impacts stale
        assert again.segments == 4
        for q in queries:
            assert [(h.source, h.score) for h in again.search(q, k)] == [
                (h.source, h.score) for h in reference.search(q, k)
            ]
        index = again._index
        asked = {term for q in queries for term in q.split()}
        served = {t for t in asked if isinstance(index.stale_terms.get(index.vocab[t]), _stale.StaleTerm)}
        assert served == asked, "every query term was served by its packed impacts"
        assert all(index.imp_gen[index.vocab[t]] != index.gen for t in asked), "and none recomputed"


def test_later_postings_are_searched_beside_a_packed_list_not_appended_to_a_copy(tmp_path, segmented, monkeypatch):
    from array import array

    from clanker_rag._engine import _stale

    live = _packed_everywhere(tmp_path, monkeypatch)
    for n in range(3):  # three commits of adds only: later segments
        kb = KnowledgeBase.load(tmp_path, analyzer=plain)
        kb.add_text(f"t{n} t{n + 1} t{n + 1} late{n}", f"late{n}.md")
        live[f"late{n}.md"] = f"t{n} t{n + 1} t{n + 1} late{n}"
        kb.save(merge=False)
    reference = fresh_build(live)
    queries = [" ".join(VOCAB[j] for j in range(12) if (q >> j) & 1) for q in range(1, 600, 11)]
    for k in (1, 3, 100):
        again = KnowledgeBase.load(tmp_path, analyzer=plain)
        assert again.segments == 4
        for q in queries:
            assert [(h.source, h.score) for h in again.search(q, k)] == [
                (h.source, h.score) for h in reference.search(q, k)
            ]
        index = again._index
        later = [index.vocab[f"t{n}"] for n in range(4)]  # terms the later segments hold
        served = [tid for tid in later if isinstance(index.stale_terms.get(tid), _stale.StaleTerm)]
        assert served, "the later segments' terms were served by their packed impacts"
        if k < 100:  # (a pruned search reads the runs: the packed list stays the mapped one)
            assert not any(isinstance(index.docs[tid], array) for tid in served)
        for q in queries:
            for hit in again.search(q, k):  # explain() adds up to the score, exactly
                explained = again.explain(q, hit)
                assert explained.score == hit.score == sum(t.contribution for t in explained.terms)


def test_chunk_sections_are_saved_as_runs_and_read_back_per_chunk(tmp_path: Path) -> None:
    from clanker_rag._storage._codec import section_runs, sections

    kb = KnowledgeBase(chunk_size=None)
    for i in range(6):
        text = f"note {i} about harbour lanterns"
        kb.add_text(text, f"n{i}.md", sections=[(0, len(text), "Lanterns")] if i in (2, 3) else None)
    folder = kb.save(tmp_path / "kb")
    record = json.loads((folder / "index.json").read_text())["body"]["segments"][0]
    offset, length = record["body"]
    body = json.loads((folder / record["file"]).read_bytes()[offset : offset + length])
    assert body["chunks"]["section"] == [[None, 2], ["Lanterns", 2], [None, 2]]
    loaded = KnowledgeBase.load(folder)
    assert [h.section for h in loaded.search("lanterns", 6) if h.source in ("n2.md", "n3.md")] == ["Lanterns"] * 2
    assert {h.section for h in loaded.search("lanterns", 6) if h.source not in ("n2.md", "n3.md")} == {None}
    # A label per chunk reads as it is; runs that do not add up to the chunks are refused.
    labels = [None, "a", "a", None]
    assert sections(section_runs(labels), 4, "x") == labels == sections(labels, 4, "x")
    for bad in ([[None, 3]], [[None, 5]], [["a", 0], [None, 4]], [[1, 4]], [[None, 2], "a", "b"], {"runs": 4}):
        with pytest.raises(IndexFormatError, match="sections do not match"):
            sections(bad, 4, "x")
