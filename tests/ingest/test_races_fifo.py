"""A FIFO where the ingest expects a file is skipped, never waited on.

Opening a FIFO for reading blocks until a writer comes, and the ingest holds
the index's writer lock meanwhile.  Each ingest here runs in a thread with a
deadline; a FIFO left blocking is opened for writing at the end so no thread
outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clanker_rag import KnowledgeBase
from clanker_rag._ingest import _run
from clanker_rag._ingest._discovery import Candidate, DiscoveryOptions, Skipped, discover

GUARD_SECONDS = 20


def _unblock(fifos: list[Path]) -> None:
    """Give any reader stuck on these FIFOs its end of file."""
    for fifo in fifos:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _ingest_guarded(root: Path, fifos: list[Path], **options: object) -> tuple[KnowledgeBase, object]:
    kb = KnowledgeBase()
    out: list[object] = []

    def run() -> None:
        try:
            out.append(kb.ingest(root, progress=False, **options))
        except BaseException as exc:  # (reported by the test thread)
            out.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(GUARD_SECONDS)
    hung = worker.is_alive()
    _unblock(fifos)
    worker.join(GUARD_SECONDS)
    assert not hung, f"the ingest was still blocked after {GUARD_SECONDS} s"
    assert out and not isinstance(out[0], BaseException), out
    return kb, out[0]


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.md").write_text("alpha notes about herons\n")
    (root / "b.md").write_text("beta notes about egrets\n")
    return root


def test_a_fifo_named_gitignore_is_skipped(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "sub").mkdir()
    (root / "sub" / "c.md").write_text("gamma notes\n")
    fifos = [root / ".gitignore", root / "sub" / ".gitignore"]
    for fifo in fifos:
        os.mkfifo(fifo)
    kb, _ = _ingest_guarded(root, fifos)
    assert kb.sources() == ["a.md", "b.md", "sub/c.md"]


def test_a_fifo_at_git_info_exclude_is_skipped(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / ".git" / "info").mkdir(parents=True)
    fifo = root / ".git" / "info" / "exclude"
    os.mkfifo(fifo)
    kb, _ = _ingest_guarded(root, [fifo])
    assert kb.sources() == ["a.md", "b.md"]


def test_a_fifo_in_an_enclosing_repository_is_skipped(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git" / "info").mkdir(parents=True)
    fifos = [repo / ".git" / "info" / "exclude", repo / ".gitignore"]
    for fifo in fifos:
        os.mkfifo(fifo)
    root = _tree(repo)
    kb, _ = _ingest_guarded(root, fifos)
    assert kb.sources() == ["a.md", "b.md"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_swapped_for_a_fifo_after_the_walk_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    root = _tree(tmp_path)
    fifo = root / "a.md"
    real = discover

    def walk(path: str, options: DiscoveryOptions) -> Iterator[Candidate | Skipped]:
        yield from real(path, options)
        os.unlink(fifo)
        os.mkfifo(fifo)

    monkeypatch.setattr(_run, "discover", walk)
    kb, report = _ingest_guarded(root, [fifo], jobs=jobs)
    assert kb.sources() == ["b.md"]
    assert any(rel == "a.md" and "not a regular file" in reason for rel, reason in report.skipped)  # type: ignore[attr-defined]


def test_a_fifo_named_explicitly_is_skipped(tmp_path: Path) -> None:
    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    kb, report = _ingest_guarded(fifo, [fifo])
    assert kb.sources() == []
    assert report.skipped == [("notes.md", "not a regular file")]  # type: ignore[attr-defined]
