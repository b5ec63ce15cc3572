"""A save's texts compressed in a forked child: the same part as compressing them here, or here when it fails."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._engine._commits import whole_snapshot
from clanker_rag._storage import _texts, _texts_child
from clanker_rag._storage._store import Blob
from clanker_rag._storage._texts import write_texts

needs_fork = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform == "darwin", reason="no safe fork here (no os.fork, or macOS)"
)


def pieces() -> list[str | bytes | memoryview]:
    out: list[str | bytes | memoryview] = []
    for i in range(300):
        out.append(f"text {i} " + "word " * (i % 97) + "caf\u00e9 \U0001f600 \udcff")  # astral, lone surrogate
        out.append(f"bytes {i} ".encode() * (i % 13))
        out.append(memoryview(b"view " * (i % 1500)))  # some longer than a block
        out.append("")
    return out


Added = tuple[tuple[list[int], list[int], dict[str, Any] | None], bytes]


def added(fork: bool) -> Added:
    blob = Blob()
    blob.add(b"x" * 5)  # a part before: the texts' range is not at 0
    texts = _texts_child.start_texts(pieces(), fork=fork)
    try:
        got = texts.add_to(blob)
    finally:
        texts.abandon()
    ref, offsets, record = got
    return (ref, list(offsets), record), b"".join(bytes(p) for p in blob.parts)


@needs_fork
def test_the_child_writes_the_part_this_process_would(monkeypatch):
    assert threading.active_count() == 1
    monkeypatch.setattr(_texts, "TEXT_BLOCK", 512)
    here, here_bytes = added(fork=False)
    calls: list[int] = []
    real = _texts_child._fork

    def counted(texts: _texts_child.Texts, pieces: Any) -> None:
        calls.append(1)
        real(texts, pieces)

    monkeypatch.setattr(_texts_child, "_fork", counted)
    child, child_bytes = added(fork=True)
    assert calls and child == here and child_bytes == here_bytes


@needs_fork
def test_a_failed_child_leaves_the_texts_to_this_process(monkeypatch):
    monkeypatch.setattr(_texts, "TEXT_BLOCK", 512)
    here, here_bytes = added(fork=False)
    monkeypatch.setattr(_texts_child, "_child", lambda *args: 1)  # the child exits with an error
    assert added(fork=True) == (here, here_bytes)
    monkeypatch.undo()
    monkeypatch.setattr(_texts, "TEXT_BLOCK", 512)
    monkeypatch.setattr(_texts_child, "_layout", lambda p, b: (64, 128))  # no room for the child's bytes
    assert added(fork=True) == (here, here_bytes)


def test_uncompressed_texts_never_fork(monkeypatch):
    monkeypatch.setattr(_texts, "COMPRESS", False)
    monkeypatch.setattr(_texts_child, "_fork", lambda texts, pieces: pytest.fail("forked for uncompressed texts"))
    (ref, offsets, record), _ = added(fork=True)
    assert record is None and offsets[-1] == ref[1]


# -- a whole save's texts, compressed from before the snapshot is made ----------------------------


def build(texts: list[tuple[str, str]]) -> Any:
    from clanker_rag import KnowledgeBase

    kb = KnowledgeBase(chunk_size=None)
    for text, source in texts:
        kb.add_text(text, source)
    return kb


def data_bytes(folder: Path) -> bytes:
    (data,) = [p for p in folder.iterdir() if p.name.startswith("data-")]
    return data.read_bytes()


def sample_texts() -> list[tuple[str, str]]:
    return [(f"text {i} about caf\u00e9 and word{i % 7} " * (1 + i % 5), f"s{i}") for i in range(40)]


@pytest.fixture
def forking(monkeypatch):
    """Saves of at least 10 texts fork for them, as if a core were idle; records what happens."""
    from clanker_rag._engine import _writing as _kb  # (the index writer makes the snapshot a save writes)
    from clanker_rag._storage import _writer

    monkeypatch.setattr(_writer, "FORK_TEXTS", 10)
    monkeypatch.setattr(_kb, "spare_core", lambda: True)
    events: list[str] = []
    real_fork = _texts_child._fork

    def fork(texts: Any, pieces: Any) -> None:
        events.append("fork")
        real_fork(texts, pieces)

    def write_here(*args: Any) -> Any:
        events.append("compressed here")
        return write_texts(*args)

    def snapshot(*args: Any) -> Any:
        events.append("snapshot")
        return whole_snapshot(*args)

    monkeypatch.setattr(_texts_child, "_fork", fork)
    monkeypatch.setattr(_texts_child, "write_texts", write_here)
    monkeypatch.setattr(_kb, "whole_snapshot", snapshot)
    return events


def reference(tmp_path: Any, texts: list[tuple[str, str]], name: str = "ref") -> bytes:
    build(texts).save(tmp_path / name)  # below FORK_TEXTS (not patched here): no child
    return data_bytes(tmp_path / name)


@needs_fork
def test_a_fresh_builds_texts_compress_in_a_child_forked_before_the_snapshot(tmp_path, forking):
    texts = sample_texts()
    want = reference(tmp_path, texts)
    forking.clear()
    build(texts).save(tmp_path / "kb")
    assert forking == ["fork", "snapshot"]  # one child, from before the snapshot; nothing compressed here
    assert data_bytes(tmp_path / "kb") == want


@needs_fork
def test_sources_without_chunks_are_last_in_the_early_childs_texts_as_in_the_save(tmp_path, forking):
    # An empty text has no chunks: a whole save writes it after the sources with chunks.
    texts = sample_texts()
    texts.insert(3, ("", "empty"))
    texts.insert(7, ("\u26cf \u26d1", "no words"))
    want = reference(tmp_path, texts)
    forking.clear()
    build(texts).save(tmp_path / "kb")
    assert forking == ["fork", "snapshot"]
    assert data_bytes(tmp_path / "kb") == want


@needs_fork
def test_early_texts_other_than_the_snapshots_are_dropped_and_compressed_again(tmp_path, forking, monkeypatch):
    from clanker_rag._storage import _writer

    texts = sample_texts()
    want = reference(tmp_path, texts)
    real_start, calls = _writer.start_texts, []

    def reversed_first(pieces: Any, fork: bool) -> Any:  # the early child's texts in the wrong order
        calls.append(1)
        return real_start(pieces[::-1] if len(calls) == 1 else pieces, fork=fork)

    monkeypatch.setattr(_writer, "start_texts", reversed_first)
    forking.clear()
    build(texts).save(tmp_path / "kb")
    assert forking == ["fork", "snapshot", "fork"]  # dropped at the layout, forked again there
    assert data_bytes(tmp_path / "kb") == want


@needs_fork
def test_a_failed_early_child_leaves_the_texts_to_this_process(tmp_path, forking, monkeypatch):
    texts = sample_texts()
    want = reference(tmp_path, texts)
    monkeypatch.setattr(_texts_child, "_child", lambda *args: 1)  # the child exits with an error
    forking.clear()
    build(texts).save(tmp_path / "kb")
    assert forking == ["fork", "snapshot", "compressed here"]
    assert data_bytes(tmp_path / "kb") == want


@needs_fork
def test_a_save_failing_after_the_early_fork_reaps_the_child_and_writes_nothing(tmp_path, forking, monkeypatch):
    from clanker_rag import KnowledgeBase
    from clanker_rag._engine import _writing as _kb
    from clanker_rag._forking import Child

    texts = sample_texts()
    want = reference(tmp_path, texts)
    started: list[int] = []
    real_abandon = Child.abandon

    def abandon(self: Child) -> None:
        started.append(self.pid)
        real_abandon(self)

    def broken(*args: Any) -> Any:
        raise OSError("disk went away")

    monkeypatch.setattr(Child, "abandon", abandon)
    monkeypatch.setattr(_kb, "whole_snapshot", broken)
    kb = build(texts)
    with pytest.raises(OSError, match="disk went away"):
        kb.save(tmp_path / "kb")
    assert len(started) == 1 and started[0] > 0
    with pytest.raises(ChildProcessError):
        os.waitpid(started[0], os.WNOHANG)  # reaped
    left = [p.name for p in (tmp_path / "kb").iterdir()] if (tmp_path / "kb").exists() else []
    assert not [name for name in left if name.startswith(("data-", "index"))], left  # no data file, no commit
    monkeypatch.undo()
    kb.save(tmp_path / "kb")  # the knowledge base is whole: saved again, the same bytes
    assert data_bytes(tmp_path / "kb") == want
    assert KnowledgeBase.load(tmp_path / "kb").search("word3", 3)


@needs_fork
def test_a_loaded_index_saved_whole_forks_for_its_texts_only_at_the_layout(tmp_path, forking):
    # A loaded source's stored text is read again from the data file each time it is asked
    # for: the early child's texts could never be the snapshot's, so none is started.
    from clanker_rag import KnowledgeBase

    texts = sample_texts()
    build(texts).save(tmp_path / "first")
    kb = KnowledgeBase.load(tmp_path / "first")
    kb.add_text("one more text", "more")
    forking.clear()
    kb.save(tmp_path / "kb")
    assert forking == ["snapshot", "fork"]
    assert data_bytes(tmp_path / "kb") == reference(tmp_path, [*texts, ("one more text", "more")])
