"""A save's texts compressed in a forked child: the same part as compressing them here, or here when it fails."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest

from clanker_rag._storage import _texts, _texts_child
from clanker_rag._storage._store import Blob

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
