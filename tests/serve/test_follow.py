"""IndexFollower: a server's loaded index follows saves made by other processes."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from clanker_rag import ConfigError, KnowledgeBase
from clanker_rag._serve._follow import IndexFollower


def _save(folder: Path, *texts: str) -> None:
    kb = KnowledgeBase(chunk_size=None)
    for i, text in enumerate(texts):
        kb.add_text(text, f"s{i}.md")
    kb.save(folder, overwrite=True)


def _bump(file: Path) -> None:
    """Move the file's mtime on, so a save within the clock's resolution still shows."""
    st = file.stat()
    os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_nothing_until_the_index_changes_then_the_new_index_once(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    _save(folder, "apples are red")
    follower = IndexFollower(folder)
    assert follower.folder == folder
    assert follower.fresh() is None
    with KnowledgeBase.edit(folder) as kb:
        kb.add_text("bananas are yellow", "b.md")
    _bump(folder / "index.json")
    fresh = follower.fresh()
    assert fresh is not None and len(fresh) == 2
    assert [h.source for h in fresh.search("bananas", 3)] == ["b.md"]
    assert follower.fresh() is None  # the same save is loaded once


def test_a_missing_folder_is_followed_until_it_appears(tmp_path: Path) -> None:
    folder = tmp_path / "later"
    follower = IndexFollower(folder)
    assert follower.fresh() is None
    _save(folder, "cherries are dark")
    fresh = follower.fresh()
    assert fresh is not None and len(fresh) == 1


def test_a_broken_index_is_logged_kept_out_and_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "kb"
    _save(folder, "apples are red")
    follower = IndexFollower(folder)
    index = folder / "index.json"
    good = index.read_bytes()
    index.write_bytes(b"{ not json")
    with caplog.at_level(logging.WARNING, logger="clanker_rag._serve._follow"):
        assert follower.fresh() is None
    assert any("could not reload" in r.getMessage() for r in caplog.records)
    index.write_bytes(good)
    _bump(index)
    fresh = follower.fresh()  # the failed look did not count as loaded
    assert fresh is not None and len(fresh) == 1


def test_check_every_spaces_the_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    folder = tmp_path / "kb"
    _save(folder, "apples are red")
    follower = IndexFollower(folder, check_every=5.0)
    _save(folder, "apples are red", "plums are purple")
    _bump(folder / "index.json")
    clock[0] += 4.9
    assert follower.fresh() is None  # too soon to look
    clock[0] += 0.2
    fresh = follower.fresh()
    assert fresh is not None and len(fresh) == 2


@pytest.mark.parametrize("bad", [-1.0, -0.001])
def test_negative_check_every_is_refused_naming_the_value(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ConfigError, match=repr(bad)):
        IndexFollower(tmp_path, check_every=bad)


def test_every_cheap_commit_is_seen_even_within_the_clocks_resolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clanker_rag._storage import _segments

    monkeypatch.setattr(_segments, "POLICY", _segments.Policy(full_below=0, full_share=1.0))
    folder = tmp_path / "kb"
    _save(folder, *(f"filler text number {i}" for i in range(20)))
    follower = IndexFollower(folder)
    writer = KnowledgeBase.load(folder)
    for i, word in enumerate(["apricot", "blueberry", "currant"]):
        st = (folder / "index.json").stat()
        writer.add_text(f"{word} written by an agent", f"n{i}.md")
        writer.save()
        assert writer.segments > 1  # a commit, not a rewrite
        # As if the new commit point had the old one's time (same size: one digit changes).
        os.utime(folder / "index.json", ns=(st.st_atime_ns, st.st_mtime_ns))
        fresh = follower.fresh()
        assert fresh is not None and [h.source for h in fresh.search(word, 3)] == [f"n{i}.md"]
        assert follower.fresh() is None
