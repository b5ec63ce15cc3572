"""A Ctrl-C during an ingest keeps what was done and says so (issue 45 item 4).

The signal is real (sent to this process), and lands while the index is being
saved or a file added: the ingest finishes that change, saves, then stops.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._engine._writing import IndexWriter
from clanker_rag._kb import KnowledgeBase
from tests.helpers._trees import write

pytestmark = pytest.mark.usefixtures("ctrl_c_raises")


def tree_of(root: Path, files: int) -> Path:
    for i in range(files):
        write(root, f"notes/file{i:02d}.md", f"# Note {i}\n\nword{i} shared text about topic {i % 4}.\n")
    return root


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_during_the_first_checkpoint_save_finishes_it_and_keeps_every_file_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tree = tree_of(tmp_path / "tree", 12)
    index = tmp_path / "index"
    real = IndexWriter.commit
    saves: list[int] = []

    def interrupted_save(self: IndexWriter, path: Any, **kw: Any) -> Any:
        saves.append(len(self.corpus.sources.all()))
        if len(saves) == 1:
            ctrl_c()  # arrives while the save is under way
        return real(self, path, **kw)

    monkeypatch.setattr(IndexWriter, "commit", interrupted_save)
    kb = KnowledgeBase()
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        kb.ingest(tree, index_path=index, checkpoint_files=5, jobs=1)
    # The save the Ctrl-C landed in was finished, and the run stopped there.
    assert saves == [5]
    saved = KnowledgeBase.load(index)
    assert len(saved.sources()) == 5
    assert "interrupted: kept 5 files (5 chunks)" in caplog.text
    assert "run the same command again to continue" in caplog.text
    # Running it again finishes the rest, the five saved files unchanged.
    report = saved.ingest(tree, index_path=index, jobs=1)
    assert len(report.unchanged) == 5 and len(report.added) == 7
    assert len(KnowledgeBase.load(index).sources()) == 12


def test_ctrl_c_during_an_add_finishes_the_file_and_saves_everything_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tree = tree_of(tmp_path / "tree", 9)
    index = tmp_path / "index"
    real = IndexWriter.add_prepared
    added: list[str] = []

    def interrupted_add(self: IndexWriter, text: str, source: str, *args: Any, **kw: Any) -> int:
        added.append(source)
        if len(added) == 7:
            ctrl_c()  # arrives while the seventh file goes in
        return real(self, text, source, *args, **kw)

    monkeypatch.setattr(IndexWriter, "add_prepared", interrupted_add)
    kb = KnowledgeBase()
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        kb.ingest(tree, index_path=index, checkpoint_files=3, jobs=1)
    assert kb._writer.is_intact()
    saved = KnowledgeBase.load(index)
    # Not the last checkpoint (six files): the seventh, added whole, was saved too.
    assert saved.sources() == sorted(added)
    assert [h.text for h in saved.chunks(added[-1])] == [h.text for h in kb.chunks(added[-1])]
    assert "kept 7 files (7 chunks)" in caplog.text


def test_a_second_ctrl_c_stops_the_save_and_says_the_folder_keeps_its_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tree = tree_of(tmp_path / "tree", 8)
    index = tmp_path / "index"
    real = IndexWriter.commit
    saves = 0

    def impatient(self: IndexWriter, path: Any, **kw: Any) -> Any:
        nonlocal saves
        saves += 1
        if saves == 2:
            ctrl_c()
            ctrl_c()  # the second one is raised at once
        return real(self, path, **kw)

    monkeypatch.setattr(IndexWriter, "commit", impatient)
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        KnowledgeBase().ingest(tree, index_path=index, checkpoint_files=3, jobs=1)
    assert len(KnowledgeBase.load(index).sources()) == 3  # the first checkpoint
    assert "stopped while saving" in caplog.text
