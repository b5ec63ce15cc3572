"""Issue 45 item 9's ingest rough edges: counts that add up, the whole run timed, real virtualenvs skipped."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from clanker_rag._ingest import _run
from clanker_rag._kb import KnowledgeBase
from tests.helpers._trees import write


def words(prefix: str, n: int) -> str:
    """``n`` distinct letter-only words: enough text for several chunks."""
    return " ".join(f"{prefix}{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(n))


def test_chunk_counts_add_up_over_adds_updates_and_removals(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write(root, "a.md", words("alpha", 200))
    write(root, "b.md", words("beta", 200))
    write(root, "c.md", words("gamma", 200))
    kb = KnowledgeBase(chunk_size=60, stride=30)
    first = kb.ingest(root)
    assert first.chunks_before == 0
    assert first.chunks_removed == first.chunks_replaced == 0
    assert first.chunks_total == first.chunks_added == len(kb)

    old_a = len(list(kb.chunks("a.md")))
    old_c = len(list(kb.chunks("c.md")))
    write(root, "a.md", words("delta", 80))  # updated: fewer chunks than before
    (root / "c.md").unlink()  # removed
    write(root, "d.md", words("omega", 100))  # added
    second = kb.ingest(root)
    assert second.updated == ["a.md"] and second.removed == ["c.md"] and second.added == ["d.md"]
    assert second.chunks_before == first.chunks_total
    assert second.chunks_replaced == old_a
    assert second.chunks_removed == old_a + old_c
    assert second.chunks_total == len(kb) == second.chunks_before + second.chunks_added - second.chunks_removed
    data = second.to_dict()
    assert data["chunks_total"] == data["chunks_before"] + data["chunks_added"] - data["chunks_removed"]
    assert f"({old_a} replaced)" in second.summary()


def test_summary_says_one_chunk_not_one_chunks(tmp_path: Path) -> None:
    write(tmp_path, "one.md", "a short note")
    report = KnowledgeBase().ingest(tmp_path)
    assert report.chunks_added == 1
    assert "1 chunk added" in report.summary()


def test_seconds_include_the_last_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A clock that only the save moves: the report's seconds show the save or nothing.
    now = [0.0]
    monkeypatch.setattr(_run, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    real_save = _run._Run.save

    def slow_save(self: _run._Run, *, last: bool = False) -> None:
        real_save(self, last=last)
        now[0] += 100.0

    monkeypatch.setattr(_run._Run, "save", slow_save)
    write(tmp_path, "src/a.md", "some text to save")
    kb = KnowledgeBase()
    report = kb.ingest(tmp_path / "src", index_path=tmp_path / "kb")
    assert report.saves >= 1
    assert report.seconds >= 100.0


def test_a_folder_is_skipped_as_a_virtualenv_only_when_it_is_one(tmp_path: Path) -> None:
    # The stdlib's own venv package, and a project named virtualenv: source folders, not environments.
    write(tmp_path, "Lib/venv/__init__.py", "def create():\n    return 1\n")
    write(tmp_path, "src/virtualenv/__init__.py", "VERSION = 1\n")
    for env in ("venv", ".venv", "envs/py", "conda"):
        write(tmp_path, f"{env}/lib/site.py", "should not be indexed")
    for env in ("venv", ".venv", "envs/py"):
        write(tmp_path, f"{env}/pyvenv.cfg", "home = /usr/bin")
    (tmp_path / "conda" / "conda-meta").mkdir()
    kb = KnowledgeBase()
    report = kb.ingest(tmp_path)
    assert kb.sources() == ["Lib/venv/__init__.py", "src/virtualenv/__init__.py"]
    reasons = dict(report.skipped)
    assert reasons["venv/"].startswith("skipped folder")
    assert reasons["envs/py/"] == "skipped folder (virtualenv)"
    assert reasons["conda/"] == "skipped folder (virtualenv)"


def test_a_build_folder_that_is_a_python_package_is_walked(tmp_path: Path) -> None:
    write(tmp_path, "src/build/__init__.py", "def build():\n    return 1\n")
    write(tmp_path, "build/lib/out.py", "generated = True\n")
    kb = KnowledgeBase()
    report = kb.ingest(tmp_path)
    assert kb.sources() == ["src/build/__init__.py"]
    assert dict(report.skipped)["build/"] == "skipped folder (build)"
