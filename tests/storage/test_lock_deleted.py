"""The writer lock survives an operator deleting ``.lock`` while writers commit.

``IndexLock`` used to flock whatever file sat at ``folder/.lock``: once the
file was deleted, a second writer created a new one and "held" the lock too,
each commit deleted the segments its commit point did not name, and the
last commit point named a data file that was gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clanker_rag import IndexLockedError, KnowledgeBase
from clanker_rag._storage._lock import IndexLock, check_held

WRITER = r"""
import json, sys
from clanker_rag import IndexLockedError, KnowledgeBase
folder, who, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
done = []
for r in range(rounds):
    source = f"{who}-{r}"
    try:
        with KnowledgeBase.edit(folder, timeout=60) as kb:
            kb.add_text(f"writer {who} round {r} wrote this passage about topic{who}x{r}", source)
    except IndexLockedError:
        continue  # this commit was abandoned cleanly: it must not be in the index
    done.append(source)
print(json.dumps(done))
"""


def _deleter(path: Path, stop: threading.Event) -> None:
    while not stop.is_set():
        path.unlink(missing_ok=True)
        stop.wait(0.005)


@pytest.mark.parametrize("attempt", range(2))
def test_deleting_the_lock_file_while_writers_commit_loses_nothing(tmp_path: Path, attempt: int) -> None:
    folder = tmp_path / "idx"
    with KnowledgeBase.edit(folder) as kb:
        kb.add_text("the first passage of the index", "seed")
    stop = threading.Event()
    deleter = threading.Thread(target=_deleter, args=(folder / ".lock", stop))
    deleter.start()
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(folder), f"w{i}", "12"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        stop.set()
        deleter.join()
    committed = {"seed"}
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        committed.update(json.loads(out))
    kb = KnowledgeBase.load(folder)
    kb.verify()
    # Every commit that returned is there, and nothing else: some serial order of them.
    assert set(kb.sources()) == committed
    for source in committed - {"seed"}:
        who, r = source.split("-")
        hits = kb.search(f"topic{who}x{r}", k=1)
        assert hits and hits[0].source == source


def test_a_lock_whose_file_was_deleted_is_not_shared(tmp_path: Path) -> None:
    first = IndexLock(tmp_path, timeout=0.2)
    first.acquire()
    try:
        (tmp_path / ".lock").unlink()
        second = IndexLock(tmp_path, timeout=0.2)
        with pytest.raises(IndexLockedError):
            second.acquire()
        assert not second.held
    finally:
        first.release()
    # Once released, the next writer gets it (and the file is back at the path).
    with IndexLock(tmp_path, timeout=0.2) as third:
        assert third.held
        assert (tmp_path / ".lock").exists()


def test_a_lock_file_swapped_after_flock_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clanker_rag._storage._lock as lock_mod

    real = lock_mod._flock_nb
    swapped: list[bool] = []

    def flock_then_swap(fd: int) -> None:
        real(fd)
        if not swapped:  # the file this writer just locked is replaced by a fresh one
            swapped.append(True)
            (tmp_path / ".lock").unlink()
            (tmp_path / ".lock").touch()

    monkeypatch.setattr(lock_mod, "_flock_nb", flock_then_swap)
    with IndexLock(tmp_path, timeout=2) as lock:
        st = os.stat(tmp_path / ".lock")
        assert lock.held and swapped
        assert lock.holds_path()
        assert (st.st_dev, st.st_ino) == lock.identity()


def test_check_held_refuses_a_commit_after_the_lock_was_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clanker_rag._storage._lock as lock_mod

    # Without the folder's own lock (a file system that refuses it), the path is all there is.
    monkeypatch.setattr(lock_mod, "_lock_folder", lambda path: None)
    kb = KnowledgeBase()
    kb.add_text("one passage", "a")
    kb.save(tmp_path / "idx")
    before = (tmp_path / "idx" / "index.json").read_bytes()
    with pytest.raises(IndexLockedError), KnowledgeBase.edit(tmp_path / "idx") as kb2:
        kb2.add_text("another passage", "b")
        (tmp_path / "idx" / ".lock").unlink()
        with pytest.raises(IndexLockedError):
            check_held(tmp_path / "idx")
    # The commit was abandoned before the commit point moved or a file went.
    assert (tmp_path / "idx" / "index.json").read_bytes() == before
    assert KnowledgeBase.load(tmp_path / "idx").sources() == ["a"]
