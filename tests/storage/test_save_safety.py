"""Saves that could lose documents, files that are not what they seem, and
library calls with the wrong arguments (issue 14: items 1, 2, 4, 8, 9)."""

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clanker_rag import ClankerRagError, ConfigError, IndexFormatError, IndexLockedError, KnowledgeBase
from clanker_rag._cli._main import main

ROOT = Path(__file__).resolve().parents[2]
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo (POSIX)")


def small_kb():
    kb = KnowledgeBase(chunk_size=8, stride=4)
    kb.add_text("alpha beta gamma delta epsilon zeta eta theta", "greek.txt")
    kb.add_text("The quick brown fox jumps over the lazy dog.", "fox.txt")
    return kb


# -- 1: the same folder under another spelling ---------------------------------


@pytest.mark.parametrize("spelling", ["absolute", "dotdot", "symlink"])
def test_stale_save_through_a_path_alias_is_refused(tmp_path, monkeypatch, spelling):
    monkeypatch.chdir(tmp_path)
    small_kb().save("i")
    mine = KnowledgeBase.load("i")
    other = KnowledgeBase.load("i")
    other.add_text("saved by another process", "other.txt")
    other.save()
    mine.add_text("mine", "mine.txt")
    if spelling == "absolute":
        alias: str = str(tmp_path / "i")
    elif spelling == "dotdot":
        (tmp_path / "x").mkdir()
        alias = "x/../i"
    else:
        os.symlink(tmp_path / "i", tmp_path / "link")
        alias = "link"
    with pytest.raises(IndexLockedError, match="another process saved"):
        mine.save(alias)
    assert "other.txt" in KnowledgeBase.load("i").sources()


def test_a_save_through_an_alias_of_its_own_folder_still_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    small_kb().save("i")
    kb = KnowledgeBase.load("i")
    kb.add_text("more", "more.txt")
    kb.save(str(tmp_path / "i"))
    assert "more.txt" in KnowledgeBase.load("i").sources()


def test_edit_saving_through_an_alias_does_not_wait_for_its_own_lock(tmp_path):
    small_kb().save(tmp_path / "i")
    with KnowledgeBase.edit(tmp_path / "i", timeout=2) as kb:
        kb.add_text("more", "more.txt")
        kb.save(tmp_path / "i" / "." / "")  # the held lock is used, not a second one
    assert "more.txt" in KnowledgeBase.load(tmp_path / "i").sources()


# -- 2: a fresh knowledge base over an existing index -----------------------------


def test_fresh_kb_refuses_to_replace_an_existing_index(tmp_path):
    small_kb().save(tmp_path / "i")
    fresh = KnowledgeBase()
    fresh.add_text("a different collection", "new.txt")
    with pytest.raises(ConfigError, match="overwrite=True") as info:
        fresh.save(tmp_path / "i")
    assert str(tmp_path / "i") in str(info.value)
    assert KnowledgeBase.load(tmp_path / "i").sources() == ["fox.txt", "greek.txt"]
    fresh.save(tmp_path / "i", overwrite=True)
    assert KnowledgeBase.load(tmp_path / "i").sources() == ["new.txt"]


def test_kb_loaded_elsewhere_refuses_to_replace_another_index(tmp_path):
    small_kb().save(tmp_path / "a")
    other = KnowledgeBase()
    other.add_text("b's own", "b.txt")
    other.save(tmp_path / "b")
    kb = KnowledgeBase.load(tmp_path / "a")
    with pytest.raises(ConfigError, match="not loaded from"):
        kb.save(tmp_path / "b")
    assert KnowledgeBase.load(tmp_path / "b").sources() == ["b.txt"]


def test_fresh_kb_ingest_into_an_existing_index_refuses(tmp_path):
    small_kb().save(tmp_path / "i")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("some words to index\n")
    with pytest.raises(ClankerRagError):
        KnowledgeBase().ingest(docs, index_path=tmp_path / "i")
    assert KnowledgeBase.load(tmp_path / "i").sources() == ["fox.txt", "greek.txt"]


def test_fresh_kb_ingest_refuses_before_reading_any_file(tmp_path, monkeypatch):
    small_kb().save(tmp_path / "i")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("some words to index\n")
    kb = KnowledgeBase()
    added: list[str] = []
    real_add = kb._writer.add_prepared

    def recording_add(*a, **k):
        added.append("x")
        return real_add(*a, **k)

    monkeypatch.setattr(kb._writer, "add_prepared", recording_add)
    with pytest.raises(ConfigError, match="overwrite=True") as info:
        kb.ingest(docs, index_path=tmp_path / "i", checkpoint_files=10_000)
    assert str(tmp_path / "i") in str(info.value)
    assert added == [] and len(kb) == 0  # refused up front, not at a checkpoint after the work


def test_ingest_with_overwrite_replaces_an_existing_index(tmp_path):
    small_kb().save(tmp_path / "i")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("some words to index\n")
    kb = KnowledgeBase()
    report = kb.ingest(docs, index_path=tmp_path / "i", overwrite=True, progress=False, checkpoint_files=1)
    assert report.added == ["a.txt"]
    assert KnowledgeBase.load(tmp_path / "i").sources() == ["a.txt"]
    assert not kb._writer.would_replace(tmp_path / "i")  # now its own: later saves keep the stale-save check


def test_would_replace_sees_through_aliases(tmp_path):
    kb = small_kb()
    assert not kb._writer.would_replace(tmp_path / "new")  # nothing there yet
    kb.save(tmp_path / "i")
    assert not kb._writer.would_replace(tmp_path / "x" / ".." / "i")
    assert KnowledgeBase()._writer.would_replace(tmp_path / "i")


def test_cli_ingest_adds_to_an_existing_index(tmp_path, capsys):
    small_kb().save(tmp_path / "i")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("some words to index\n")
    assert main(["ingest", str(docs), "--index", str(tmp_path / "i"), "--no-progress"]) == 0
    sources = KnowledgeBase.load(tmp_path / "i").sources()
    assert {"fox.txt", "greek.txt"} <= set(sources) and len(sources) == 3


# -- 4: temporary files of killed saves ----------------------------------------------


def test_next_save_removes_temp_files_of_killed_saves(tmp_path):
    kb = small_kb()
    kb.save(tmp_path)
    stale = [
        tmp_path / f".data-{'ab' * 16}.bin.4242.deadbeef.tmp",
        tmp_path / ".index.json.4242.0badf00d.tmp",
    ]
    for path in stale:
        path.write_bytes(b"x" * 1000)
    keep = [tmp_path / "notes.tmp", tmp_path / ".dense-model-0123456789.json.42.abcd.tmp"]
    for path in keep:
        path.write_bytes(b"not ours")
    kb.add_text("another", "another.txt")
    kb.save()
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in keep)


# -- 8: a FIFO where a file should be -------------------------------------------------


def without_hanging(call, fifo):
    """``call()``'s exception (or None) when it returns within 30 s; if it hangs
    on the FIFO, the test fails and a writer opened on the FIFO lets it go."""
    outcome: list[BaseException | None] = []

    def run():
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(30)
        pytest.fail(f"hung on the FIFO {fifo}")
    return outcome[0]


def _data_file(folder):
    (path,) = folder.glob("data-*.bin")
    return path


@needs_fifo
@pytest.mark.parametrize("which", ["manifest", "data"])
def test_fifo_in_place_of_an_index_file_is_a_clear_error(tmp_path, which):
    small_kb().save(tmp_path)
    target = tmp_path / "index.json" if which == "manifest" else _data_file(tmp_path)
    target.unlink()
    os.mkfifo(target)
    exc = without_hanging(lambda: KnowledgeBase.load(tmp_path), target)
    assert isinstance(exc, IndexFormatError)
    assert "not a regular file" in str(exc)
    assert str(target) in str(exc)


@needs_fifo
def test_search_on_a_fifo_index_exits_nonzero(tmp_path):
    small_kb().save(tmp_path)
    (tmp_path / "index.json").unlink()
    os.mkfifo(tmp_path / "index.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "clanker_rag", "search", "fox", "--index", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode != 0
    assert "not a regular file" in proc.stderr


@needs_fifo
def test_ingest_into_a_fifo_index_fails_and_releases_the_lock(tmp_path):
    small_kb().save(tmp_path / "i")
    (tmp_path / "i" / "index.json").unlink()
    os.mkfifo(tmp_path / "i" / "index.json")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("words\n")
    codes = []
    args = ["ingest", str(docs), "--index", str(tmp_path / "i"), "--no-progress"]
    assert without_hanging(lambda: codes.append(main(args)), tmp_path / "i" / "index.json") is None
    assert codes == [1]
    from clanker_rag._storage._lock import IndexLock

    lock = IndexLock(tmp_path / "i", timeout=0)
    lock.acquire()  # would raise IndexLockedError if the failed ingest still held it
    lock.release()


@needs_fifo
def test_save_over_a_fifo_manifest_does_not_hang(tmp_path):
    kb = small_kb()
    kb.save(tmp_path)
    (tmp_path / "index.json").unlink()
    os.mkfifo(tmp_path / "index.json")
    exc = without_hanging(kb.save, tmp_path / "index.json")
    assert isinstance(exc, IndexFormatError)
    assert "not a regular file" in str(exc)


# -- 9: library argument errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda kb: kb.add_texts("string"), ["'string'", "(text, source"]),
        (lambda kb: kb.add_texts([("x",)]), ["('x',)", "(text, source)"]),
        (lambda kb: kb.add_texts([("t", "s", "meta")]), ["'meta'", "mapping"]),
        (lambda kb: kb.add_text("t", "s", [1, 2]), ["[1, 2]", "mapping"]),
        (lambda kb: kb.add_texts([("t", "s", [1, 2])]), ["[1, 2]", "mapping"]),
        (lambda kb: kb.save(""), ["''", "folder"]),
    ],
)
def test_bad_library_arguments_raise_clanker_errors(tmp_path, monkeypatch, call, names):
    monkeypatch.chdir(tmp_path)
    kb = small_kb()
    with pytest.raises(ClankerRagError) as info:
        call(kb)
    for name in names:
        assert name in str(info.value)
    assert list(tmp_path.iterdir()) == []  # save("") wrote nothing into the current folder


def test_add_texts_still_takes_pairs_and_triples():
    kb = KnowledgeBase()
    # A list where the type says tuple: callers building items from JSON get lists.
    assert kb.add_texts([("one two", "a"), ["three", "b", {"k": 1}], ("four", "c", None)]) == 3  # type: ignore[list-item]
    assert kb.source_metadata("b") == {"k": 1}


def test_full_disk_names_the_path_in_the_cli(tmp_path, monkeypatch, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("some words\n")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert main(["ingest", str(docs), "--index", str(tmp_path / "i"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert os.strerror(errno.ENOSPC) in err
    assert str(tmp_path / "i") in err


@pytest.mark.parametrize(
    ("call", "code"),
    [("fsync", errno.ENOSPC), ("replace", errno.EROFS), ("open", errno.EACCES)],
)
def test_save_on_a_full_or_read_only_folder_is_one_clanker_error_and_keeps_the_index(tmp_path, monkeypatch, call, code):
    from clanker_rag import IndexWriteError

    folder = tmp_path / "idx"
    kb = small_kb()
    kb.save(folder)
    kb.add_text("a third document about otters", "otter.txt")
    real = getattr(os, call)

    def failing(*args, **kwargs):
        # os.open also opens the lock and the folder (for fsync): only writes fail.
        if call == "open" and not (len(args) > 1 and args[1] & os.O_CREAT and ".tmp" in str(args[0])):
            return real(*args, **kwargs)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, call, failing)
    if call == "open":
        import builtins

        real_open = builtins.open

        def failing_open(file, mode="r", *args, **kwargs):
            if "w" in mode and ".tmp" in str(file):
                raise OSError(code, os.strerror(code), str(file))
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", failing_open)
    with pytest.raises(IndexWriteError, match="the index there is unchanged") as caught:
        kb.save(folder)
    assert isinstance(caught.value, OSError) and isinstance(caught.value, ClankerRagError)
    assert caught.value.errno == code and os.strerror(code) in str(caught.value)
    monkeypatch.undo()
    assert KnowledgeBase.load(folder).sources() == ["fox.txt", "greek.txt"]
    kb.save(folder)  # and once the folder is writable again, the save goes through
    assert KnowledgeBase.load(folder).sources() == ["fox.txt", "greek.txt", "otter.txt"]
