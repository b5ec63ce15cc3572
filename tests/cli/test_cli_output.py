"""What the command prints from untrusted text, and its --jobs bound (issue 14: items 5, 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clanker_rag._cli._main import main
from clanker_rag._cli._terminal import one_line, printable
from clanker_rag._kb import KnowledgeBase

HOSTILE_TEXT = "harbor lantern \x1b[2J\x1b]0;pwned\x07 bell\x07 csi\x9b31m and \u202eevil\u202c keeper"
HOSTILE_NAME = "notes/evil\nname\x1b[2J\x1b]2;title\x07.md"


@pytest.fixture
def hostile_index(tmp_path: Path) -> Path:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text(HOSTILE_TEXT, HOSTILE_NAME)
    kb.add_text("harbor lantern plain text", "plain.md")
    kb.add_text("harbor " * 3, "sec.md", sections=[(0, 21, "Heading \x1b]8;;http://x\x07link")])
    kb.save(tmp_path / "idx")
    return tmp_path / "idx"


@pytest.mark.parametrize("color", ["never", "always"])
def test_search_escapes_control_characters_from_indexed_text(hostile_index, capsys, color):
    code = main(["search", "harbor lantern", "--index", str(hostile_index), "--color", color])
    out = capsys.readouterr().out
    assert code == 0
    for bad in ("\x1b[2J", "\x1b]", "\x07", "\x9b", "\u202e"):
        assert bad not in out
    lines = out.splitlines()
    assert len(lines) == 6  # a head line and a snippet line per result: a newline in a name cannot add one
    assert any("notes/evil\\nname\\x1b[2J\\x1b]2;title\\x07.md" in line for line in lines)
    assert any("\\x1b[2J\\x1b]0;pwned\\x07" in line for line in lines)
    if color == "never":
        assert "\x1b" not in out


def test_search_json_keeps_the_exact_text(hostile_index, capsys):
    assert main(["search", "harbor lantern", "--index", str(hostile_index), "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    by_source = {hit["source"]: hit for hit in hits}
    assert by_source[HOSTILE_NAME]["text"] == HOSTILE_TEXT


def test_one_line_escapes_line_breaks_too():
    text = "Grüße, 東京 — naïve café\u00a0ok"
    assert one_line(text) == printable(text) == text
    assert one_line("a\tb\nc\u2028d\x1b") == "a\\tb\\nc\\u2028d\\x1b"


def test_ingest_jobs_are_capped_at_the_usable_cpus(tmp_path, capsys, monkeypatch):
    from clanker_rag._ingest import _parallel

    monkeypatch.setattr(_parallel, "POOL_MIN_BYTES", 0)  # a small tree: start workers anyway
    monkeypatch.setattr(_parallel, "usable_cpus", lambda: 2)
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(40):
        (tree / f"note{i:02d}.md").write_text(f"# Note {i}\n\nharbor lantern number {i}\n", encoding="utf-8")
    code = main(["ingest", str(tree), "--index", str(tmp_path / "idx"), "--json", "-j", "64"])
    out, err = capsys.readouterr()
    assert code == 0
    report = json.loads(out)
    assert report["workers"] == 1  # two processes: this one and one worker
    assert len(report["added"]) == 40
    assert "--jobs 64 capped at 2" in err


def test_show_escapes_control_characters_and_json_keeps_them(hostile_index, capsys):
    assert main(["show", HOSTILE_NAME, "--index", str(hostile_index)]) == 0
    out = capsys.readouterr().out
    for bad in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert bad not in out
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in out
    assert main(["show", "sec.md", "--index", str(hostile_index), "--chunks"]) == 0
    assert "\x1b" not in capsys.readouterr().out
    assert main(["show", HOSTILE_NAME, "--index", str(hostile_index), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == HOSTILE_TEXT


def test_rm_and_ingest_verbose_print_no_escape_or_bell_bytes_from_file_names(tmp_path: Path) -> None:
    # A file name that would set the window title and clear the screen.
    import os
    import subprocess
    import sys

    evil = "evil\x1b]0;pwned\x07\x1b[2J"
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / f"{evil}.md").write_text("harbor lantern keeper")
    (tree / f"{evil}.bin").write_bytes(b"not in the allow-list")
    (tree / f"{evil}2.md").write_bytes(b"\x00\x01binary despite its name")
    index = tmp_path / "index"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def run(*args: str) -> bytes:
        proc = subprocess.run(
            [sys.executable, "-m", "clanker_rag", *args, "--index", str(index)],
            capture_output=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout + proc.stderr

    shown = run("ingest", str(tree), "-v", "--no-progress")
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert b"evil\\x1b]0;pwned\\x07\\x1b[2J" in shown  # named, escaped
    assert KnowledgeBase.load(index).sources() == [f"{evil}.md"]
    shown = run("rm", "evil*")
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert b"removed evil\\x1b]0;pwned\\x07\\x1b[2J.md" in shown
    assert KnowledgeBase.load(index).sources() == []
