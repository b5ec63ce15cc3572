"""``clanker-rag backup`` and ``restore`` (issue 27, item 4): verified, atomic copies of an index."""

from __future__ import annotations

from pathlib import Path

import pytest

from clanker_rag._cli._main import main
from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._follow import IndexFollower


def build(folder: Path, tag: str, n: int = 30, *, overwrite: bool = False) -> KnowledgeBase:
    kb = KnowledgeBase()
    for i in range(n):
        kb.add_text(f"{tag} passage {i} about lanterns number{i % 7}", f"{tag}/doc{i:02d}.md", {"i": i})
    kb.save(folder, overwrite=overwrite)
    return kb


def state(folder: Path) -> tuple[list[str], list[tuple[str, str, float]]]:
    kb = KnowledgeBase.load(folder)
    return kb.sources(), [(h.source, h.text, h.score) for h in kb.search("lanterns number3 passage", 5)]


def test_backup_copies_an_index_verified_and_refuses_to_replace_one_unasked(tmp_path: Path, capsys) -> None:
    live, copy = tmp_path / "live", tmp_path / "copy"
    build(live, "a")
    assert main(["backup", str(live), str(copy)]) == 0
    out = capsys.readouterr().out
    assert out == f"backed up {live} to {copy}: 30 sources, 30 chunks, verified\n"
    assert state(copy) == state(live)
    KnowledgeBase.load(copy).verify()
    build(live, "b", 10, overwrite=True)
    assert main(["backup", str(live), str(copy)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds an index; pass --overwrite" in err
    assert state(copy)[0][0].startswith("a/")  # untouched
    assert main(["backup", str(live), str(copy), "--overwrite"]) == 0
    assert "replacing the index there" in capsys.readouterr().out
    assert state(copy) == state(live)


def test_a_damaged_index_is_refused_not_copied(tmp_path: Path, capsys) -> None:
    live, copy = tmp_path / "live", tmp_path / "copy"
    build(live, "a")
    (data,) = live.glob("data-*.bin")
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    assert main(["backup", str(live), str(copy)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checksum mismatch" in err
    assert not (copy / "index.json").exists()


def test_restore_replaces_a_served_index_atomically_and_its_server_follows(tmp_path: Path, capsys) -> None:
    live, saved = tmp_path / "live", tmp_path / "saved"
    build(live, "old")
    build(saved, "new", 12)
    served = KnowledgeBase.load(live)
    follower = IndexFollower(live)
    before = [h.source for h in served.search("lanterns", 3)]
    assert main(["restore", str(saved), str(live)]) == 0
    assert capsys.readouterr().out.startswith(f"restored {saved} to {live}: 12 sources, 12 chunks, verified")
    # What was loaded before still reads whole (its data file was replaced, not rewritten)...
    assert not served.data_rewritten()
    assert [h.source for h in served.search("lanterns", 3)] == before
    # ...and the server's follower picks up the restored index.
    fresh = follower.fresh(served)
    assert fresh is not None and fresh.sources() == KnowledgeBase.load(saved).sources()
    assert state(live) == state(saved)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["restore", "{missing}", "{live}"], "no index there to restore"),
        (["restore", "{live}", "{live}"], "are the same folder"),
        (["backup", "{live}", "{file}"], "not a folder"),
    ],
)
def test_backup_and_restore_refuse_what_cannot_be_done_in_one_line(
    tmp_path: Path, capsys, args: list[str], message: str
) -> None:
    live = tmp_path / "live"
    build(live, "a", 3)
    (tmp_path / "file").write_text("x")
    names = {"missing": str(tmp_path / "missing"), "live": str(live), "file": str(tmp_path / "file")}
    assert main([arg.format(**names) for arg in args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert state(live)[0] == ["a/doc00.md", "a/doc01.md", "a/doc02.md"]
