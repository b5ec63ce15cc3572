"""``backup --kb NAME DEST`` and ``restore SRC --kb NAME``: named knowledge bases, by name (issue 45, item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clanker_rag._cli._main import main
from clanker_rag._kb import KnowledgeBase


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLANKER_RAG_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def build(folder: Path, tag: str, n: int) -> None:
    kb = KnowledgeBase(chunk_size=None)
    for i in range(n):
        kb.add_text(f"{tag} note {i} about lanterns", f"{tag}/{i}.md")
    kb.save(folder, overwrite=True)


def test_backup_and_restore_take_a_named_knowledge_base(tmp_path: Path, home: Path, capsys) -> None:
    assert main(["create", "notes"]) == 0
    build(home / "notes", "old", 3)
    copy = tmp_path / "backups" / "notes"
    assert main(["backup", "--kb", "notes", str(copy)]) == 0
    assert capsys.readouterr().out.endswith(f"{home / 'notes'} to {copy}: 3 sources, 3 chunks, verified\n")
    assert KnowledgeBase.load(copy).sources() == ["old/0.md", "old/1.md", "old/2.md"]

    build(home / "notes", "new", 2)
    assert main(["restore", str(copy), "--kb", "notes"]) == 0
    assert "replacing the index there" in capsys.readouterr().out
    assert KnowledgeBase.load(home / "notes").sources() == ["old/0.md", "old/1.md", "old/2.md"]

    # A restore may bring back a knowledge base that was deleted; `list` shows it again.
    assert main(["delete", "notes"]) == 0
    assert main(["restore", str(copy), "--kb", "notes"]) == 0
    capsys.readouterr()
    assert main(["list"]) == 0
    assert capsys.readouterr().out.startswith("notes ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["backup", "--kb", "notes", "SRC", "DEST"], "give the folder SRC or --kb NAME (or --index DIR), not both"),
        (["backup", "DEST"], "give the folder SRC or --kb NAME (or --index DIR), one of them"),
        (["restore", "SRC", "DEST", "--kb", "notes"], "give the folder DEST or --kb NAME (or --index DIR), not both"),
        (["restore", "SRC"], "give the folder DEST or --kb NAME (or --index DIR), one of them"),
    ],
)
def test_the_named_side_is_a_folder_or_kb_never_both_nor_neither(
    home: Path, capsys, args: list[str], message: str
) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_backing_up_a_missing_named_knowledge_base_says_how_to_create_it(tmp_path: Path, home: Path, capsys) -> None:
    assert main(["backup", "--kb", "nope", str(tmp_path / "copy")]) == 1
    assert "no knowledge base named 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "copy").exists()
