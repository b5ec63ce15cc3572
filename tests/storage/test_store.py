"""Persistence: atomic saves, clear errors on damaged files, writer safety."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from itertools import accumulate
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import IndexFormatError, IndexLockedError, KnowledgeBase
from clanker_rag._storage import _store
from clanker_rag._storage._store import FORMAT_VERSION
from tests.helpers._forge import rewrite_segment

ROOT = Path(__file__).resolve().parents[2]


def small_kb():
    kb = KnowledgeBase(chunk_size=8, stride=4)
    kb.add_text("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", "greek.txt", {"n": 1})
    kb.add_text("The quick brown fox jumps over the lazy dog.", "fox.txt")
    return kb


def test_save_load_round_trip(tmp_path):
    kb = small_kb()
    kb.save(tmp_path / "idx")
    again = KnowledgeBase.load(tmp_path / "idx")
    assert again.sources() == ["fox.txt", "greek.txt"]
    assert [(h.source, h.score, h.text) for h in again.search("lazy fox")] == [
        (h.source, h.score, h.text) for h in kb.search("lazy fox")
    ]
    assert again.source_metadata("greek.txt") == {"n": 1}
    assert not list((tmp_path / "idx").glob("*.tmp"))


def test_missing_index_is_a_clear_error(tmp_path):
    with pytest.raises(IndexFormatError, match="no index here"):
        KnowledgeBase.load(tmp_path / "nowhere")


def data_file(folder):
    (path,) = folder.glob("data-*.bin")
    return path


@pytest.mark.parametrize("which", ["manifest", "data"])
@pytest.mark.parametrize("cut", [0.0, 0.3, 0.9, 0.99])
def test_truncated_file_names_file_and_problem(tmp_path, cut, which):
    small_kb().save(tmp_path)
    path = tmp_path / "index.json" if which == "manifest" else data_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(IndexFormatError) as info:
        KnowledgeBase.load(tmp_path)
    assert str(path) in str(info.value)
    assert "truncated" in str(info.value) or "not valid JSON" in str(info.value)


def test_tampered_manifest_is_refused(tmp_path):
    small_kb().save(tmp_path)
    path = tmp_path / "index.json"
    text = path.read_text()
    assert '"segments":1' in text
    path.write_text(text.replace('"segments":1', '"segments":2'))
    with pytest.raises(IndexFormatError, match="checksum mismatch") as info:
        KnowledgeBase.load(tmp_path)
    assert str(path) in str(info.value)


def test_tampered_data_file_is_refused(tmp_path, monkeypatch):
    from clanker_rag._storage import _texts

    monkeypatch.setattr(_texts, "LEVEL", 0)  # texts stored uncompressed, so the test can find one
    small_kb().save(tmp_path)
    path = data_file(tmp_path)
    data = path.read_bytes()
    assert b"quick brown fox" in data
    path.write_bytes(data.replace(b"quick brown fox", b"quick brown cat"))
    with pytest.raises(IndexFormatError, match="checksum mismatch") as info:
        KnowledgeBase.load(tmp_path)
    assert str(path) in str(info.value)


def test_missing_data_file_is_a_clear_error(tmp_path):
    small_kb().save(tmp_path)
    path = data_file(tmp_path)
    path.unlink()
    with pytest.raises(IndexFormatError, match="data file is missing") as info:
        KnowledgeBase.load(tmp_path)
    assert str(path) in str(info.value)


def test_data_file_is_named_by_content_and_old_ones_go(tmp_path):
    kb = small_kb()
    kb.save(tmp_path)
    first = data_file(tmp_path)
    kb.save(tmp_path)
    assert data_file(tmp_path) == first  # same content, same file
    kb.add_text("new words entirely", "new.txt")
    kb.save(tmp_path)
    # The replaced commit's file goes once the new commit point is in place (readers hold theirs open).
    assert not first.exists() and len(list(tmp_path.glob("data-*.bin"))) == 1
    kb.add_text("more words", "more.txt")
    kb.save(tmp_path)
    assert len(list(tmp_path.glob("data-*.bin"))) == 1
    assert KnowledgeBase.load(tmp_path).sources() == ["fox.txt", "greek.txt", "more.txt", "new.txt"]


def test_newer_format_version_is_refused(tmp_path):
    small_kb().save(tmp_path)
    path = tmp_path / "index.json"
    current = f'"format_version":{FORMAT_VERSION}'
    assert current in path.read_text()
    path.write_text(path.read_text().replace(current, '"format_version":99', 1))
    with pytest.raises(IndexFormatError, match=r"newer clanker_rag.*format_version 99"):
        KnowledgeBase.load(tmp_path)


def test_garbage_and_foreign_json_are_refused(tmp_path):
    path = tmp_path / "index.json"
    path.write_bytes(b"\x00\xff\xfe binary junk")
    with pytest.raises(IndexFormatError, match="not a clanker_rag index"):
        KnowledgeBase.load(tmp_path)
    path.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(IndexFormatError, match="not a clanker_rag index"):
        KnowledgeBase.load(tmp_path)


def test_inconsistent_body_is_refused_even_with_a_valid_checksum(tmp_path):

    small_kb().save(tmp_path)

    def one_term_fewer(body):  # than the dictionary holds
        body["postings"]["offsets"][1] -= 8

    rewrite_segment(tmp_path, one_term_fewer)
    with pytest.raises(IndexFormatError, match="inconsistent"):
        KnowledgeBase.load(tmp_path)


def test_failed_save_leaves_the_old_index(tmp_path, monkeypatch):
    kb = small_kb()
    kb.save(tmp_path)
    before = (tmp_path / "index.json").read_bytes()
    kb.add_text("new words entirely", "new.txt")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        kb.save(tmp_path)
    monkeypatch.undo()
    assert (tmp_path / "index.json").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(list(tmp_path.glob("data-*.bin"))) == 1
    assert KnowledgeBase.load(tmp_path).sources() == ["fox.txt", "greek.txt"]


SAVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from clanker_rag import KnowledgeBase
    kb = KnowledgeBase.load({folder!r})
    i = 0
    print("ready", flush=True)
    while True:
        i += 1
        kb.add_text("generation " + str(i) + " " + "filler words " * 400, "gen.txt")
        kb.save({folder!r})
    """
)


@pytest.mark.slow
def test_kill_during_save_leaves_old_or_new_index(tmp_path):
    kb = small_kb()
    kb.save(tmp_path)
    script = SAVER.format(root=str(ROOT), folder=str(tmp_path))
    for delay in (0.05, 0.2, 0.35, 0.5, 0.8):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        loaded = KnowledgeBase.load(tmp_path)  # must never raise
        assert "greek.txt" in loaded.sources()
        assert set(loaded.sources()) <= {"greek.txt", "fox.txt", "gen.txt"}


WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from clanker_rag import KnowledgeBase
    for i in range({n}):
        with KnowledgeBase.edit({folder!r}) as kb:
            kb.add_text("document from writer {name} number " + str(i), "{name}-" + str(i) + ".txt")
    """
)


def test_concurrent_writers_lose_nothing(tmp_path):
    n = 8
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), folder=str(tmp_path), n=n, name=name)])
        for name in ("a", "b", "c")
    ]
    for proc in procs:
        assert proc.wait(timeout=300) == 0
    kb = KnowledgeBase.load(tmp_path)
    assert kb.sources() == sorted(f"{name}-{i}.txt" for name in "abc" for i in range(n))


def test_stale_save_is_refused_not_silently_merged(tmp_path):
    small_kb().save(tmp_path)
    first = KnowledgeBase.load(tmp_path)
    second = KnowledgeBase.load(tmp_path)
    first.add_text("from the first process", "one.txt")
    first.save()
    second.add_text("from the second process", "two.txt")
    with pytest.raises(IndexLockedError, match="another process saved"):
        second.save()
    assert "one.txt" in KnowledgeBase.load(tmp_path).sources()


def test_lock_held_elsewhere_times_out_with_clear_message(tmp_path):
    from clanker_rag._storage._lock import IndexLock

    small_kb().save(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(ROOT)!r})
            from clanker_rag._storage._lock import IndexLock
            lock = IndexLock({str(tmp_path)!r}); lock.acquire(); print("held", flush=True); time.sleep(30)
        """),
        ],
        stdout=subprocess.PIPE,
    )
    holder_out = holder.stdout
    assert holder_out is not None
    try:
        assert holder_out.readline().strip() == b"held"
        with pytest.raises(IndexLockedError, match="another process is writing"):
            IndexLock(tmp_path, timeout=0.3).acquire()
    finally:
        holder.kill()
        holder.wait()
        holder_out.close()
    IndexLock(tmp_path, timeout=5).acquire()  # released when the holder died


def test_posting_beyond_the_chunk_table_fails_clearly(tmp_path):
    from array import array

    small_kb().save(tmp_path)

    def bad_chunk(body, data):
        start, size = body["postings"]["chunks"]
        chunks = array("i", data[start : start + size])
        chunks[-1] = 10_000  # a chunk id that does not exist
        data[start : start + size] = chunks.tobytes()
        body.pop("blocks")  # as a segment written before block checksums

    rewrite_segment(tmp_path, edit_data=bad_chunk)
    kb = KnowledgeBase.load(tmp_path)
    terms = kb._index.terms
    last_term = terms[len(terms) - 1]  # its list ends the chunk ids
    with pytest.raises(IndexFormatError, match="points at a chunk that does not exist"):
        kb.search(last_term)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_forked_child_does_not_keep_the_lock_after_the_writer_dies(tmp_path):
    from clanker_rag._storage._lock import IndexLock

    # The writer takes the lock, forks a long-lived child (as a parallel
    # ingest forks its workers) and is killed without unlocking.
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import os, sys, time
            sys.path.insert(0, {str(ROOT)!r})
            from clanker_rag._storage._lock import IndexLock
            lock = IndexLock({str(tmp_path)!r}); lock.acquire()
            child = os.fork()
            if child == 0:
                time.sleep(30)
                os._exit(0)
            print(child, flush=True)
            os._exit(0)
        """),
        ],
        stdout=subprocess.PIPE,
    )
    writer_out = writer.stdout
    assert writer_out is not None
    child = int(writer_out.readline())
    writer.wait(timeout=60)
    writer_out.close()
    try:
        os.kill(child, 0)  # the child still runs...
        lock = IndexLock(tmp_path, timeout=1.0)
        lock.acquire()  # ...yet the lock is free
        lock.release()
    finally:
        os.kill(child, signal.SIGKILL)
        writer_out.close()


piece = st.one_of(
    st.text(max_size=40),  # lone surrogates included: written as surrogatepass UTF-8
    st.binary(max_size=40),
    st.binary(max_size=40).map(lambda b: memoryview(b)),
    st.binary(min_size=2, max_size=40).filter(lambda b: len(b) % 2 == 0).map(lambda b: memoryview(b).cast("H")),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(piece, max_size=30), max_size=4), st.integers(1, 64))
def test_a_run_is_its_pieces_back_to_back_whatever_they_are_and_however_they_are_grouped(runs, group):
    # Small groups make some pieces big (parts of their own) and join the rest across batches.
    saved, _store._GROUP = _store._GROUP, group
    try:
        blob = _store.Blob()
        blob.add(b"x")  # the next run starts aligned, not at 0
        expected = []
        for pieces in runs:
            raw = [p.encode("utf-8", "surrogatepass") if isinstance(p, str) else bytes(p) for p in pieces]
            ref, offsets = blob.run(pieces)
            assert ref[0] % 8 == 0 and list(offsets) == list(accumulate(map(len, raw), initial=0))
            expected.append((ref, b"".join(raw)))
        whole = b"".join(bytes(p) if isinstance(p, memoryview) else p for p in blob.parts)
        assert len(whole) == blob.size
        for (start, length), data in expected:
            assert whole[start : start + length] == data
    finally:
        _store._GROUP = saved
