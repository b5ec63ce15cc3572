"""An ingest's sync leaves what a fresh ingest of the same path would hold, whatever the path led to before.

A root's sources are its own under any of its names (the path given, the
folder it resolves to, that folder's device and inode): a ``current``
symlink switched to another release, a folder renamed, a watched folder
replaced by a symlink for a while, none leaves old or outside files behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clanker_rag import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def contents(kb: KnowledgeBase) -> dict[str, str | None]:
    return {s: kb.source_text(s) for s in kb.sources()}


def fresh(path: Path) -> dict[str, str | None]:
    kb = KnowledgeBase()
    kb.ingest(path, progress=False, jobs=1)
    return contents(kb)


def ingest(index: Path, path: Path, **options: object) -> None:
    with KnowledgeBase.edit(index) as kb:
        kb.ingest(path, index_path=index, progress=False, jobs=1, **options)


def held(index: Path) -> dict[str, str | None]:
    return contents(KnowledgeBase.load(index))


def test_a_release_symlink_switched_with_ln_sfn_leaves_no_old_release_files(tmp_path: Path) -> None:
    write(tmp_path / "release1", {"guide.md": "old guide text", "only-old.md": "removed in the next release"})
    write(tmp_path / "release2", {"guide.md": "new guide text", "only-new.md": "added in this release"})
    current, index = tmp_path / "current", tmp_path / "index"
    current.symlink_to("release1")
    ingest(index, current)
    assert set(held(index)) == {"guide.md", "only-old.md"}
    subprocess.run(["ln", "-sfn", "release2", str(current)], check=True, cwd=tmp_path)
    ingest(index, current)
    assert held(index) == fresh(current) == {"guide.md": "new guide text", "only-new.md": "added in this release"}


def test_a_folder_renamed_and_ingested_again_drops_what_is_gone(tmp_path: Path) -> None:
    docs, index = write(tmp_path / "docs", {"a.md": "alpha", "b.md": "beta", "sub/c.md": "gamma"}), tmp_path / "index"
    ingest(index, docs)
    renamed = tmp_path / "handbook"
    docs.rename(renamed)
    (renamed / "b.md").unlink()
    ingest(index, renamed)
    assert held(index) == fresh(renamed) == {"a.md": "alpha", "sub/c.md": "gamma"}


def test_a_watched_folder_briefly_replaced_by_a_symlink_leaves_no_outside_file(tmp_path: Path) -> None:
    notes = write(tmp_path / "notes", {"mine.md": "my own note"})
    outside = write(tmp_path / "outside", {"elsewhere.md": "a file from outside the notes"})
    index = tmp_path / "index"
    ingest(index, notes)
    notes.rename(tmp_path / "notes.moved")
    notes.symlink_to(outside)
    ingest(index, notes)
    assert held(index) == fresh(notes)
    notes.unlink()
    (tmp_path / "notes.moved").rename(notes)
    ingest(index, notes)
    assert held(index) == fresh(notes) == {"mine.md": "my own note"}


def test_other_roots_in_the_same_index_are_left_alone(tmp_path: Path) -> None:
    a = write(tmp_path / "a", {"one.md": "first root"})
    b = write(tmp_path / "b", {"two.md": "second root", "gone.md": "deleted later"})
    index = tmp_path / "index"
    ingest(index, a)
    ingest(index, b)
    (b / "gone.md").unlink()
    ingest(index, b)
    ingest(index, a)
    assert held(index) == {"one.md": "first root", "two.md": "second root"}


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_the_cli_ingest_of_a_switched_release_symlink_equals_a_fresh_one(tmp_path: Path) -> None:
    write(tmp_path / "r1", {"keep.md": "kept in both", "old.md": "only in the first"})
    write(tmp_path / "r2", {"keep.md": "kept in both"})
    current, index = tmp_path / "current", tmp_path / "index"
    current.symlink_to("r1")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "clanker_rag", "ingest", str(current), "--index", str(index)]
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=120)
    subprocess.run(["ln", "-sfn", "r2", str(current)], check=True)
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=120)
    assert held(index) == fresh(current) == {"keep.md": "kept in both"}


def test_a_watchers_commits_follow_its_folder_through_a_symlink_swap_and_back(tmp_path: Path) -> None:
    from clanker_rag._ingest._watch import FolderSync

    notes = write(tmp_path / "notes", {"mine.md": "my own note", "also.md": "another one"})
    outside = write(tmp_path / "outside", {"elsewhere.md": "a file from outside the notes"})
    index = tmp_path / "index"
    sync = FolderSync(KnowledgeBase(), notes, index, jobs=1)
    sync.commit()
    notes.rename(tmp_path / "notes.moved")
    notes.symlink_to(outside)
    sync.commit()
    assert held(index) == fresh(notes)
    notes.unlink()
    (tmp_path / "notes.moved").rename(notes)
    (notes / "also.md").unlink()
    report = sync.commit()
    assert held(index) == fresh(notes) == {"mine.md": "my own note"}
    assert "elsewhere.md" in report.removed
