"""Servers read their index into their own memory: a data file rewritten in place cannot kill them.

A mapped data file that ``cp`` truncates and writes again loses its pages, and a
search touching one dies of SIGBUS, which no check before the search can
rule out (the rewrite can start during it).  ``load_served`` (what ``serve``,
``mcp`` and their reloads use) reads the files into anonymous memory.  Every
attack runs in a child process, so a SIGBUS shows as a failed test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from clanker_rag import KnowledgeBase
from clanker_rag._serve._follow import IndexFollower, load_served
from clanker_rag._storage import _store

ROOT = Path(__file__).resolve().parents[2]


def build(folder: Path, n: int = 600) -> None:
    kb = KnowledgeBase()
    for i in range(n):
        kb.add_text(f"passage {i} on harbour lanterns number{i % 13} and keepers word{i}", f"doc{i:03d}.md")
    kb.save(folder)


SCRIPT = """
import os, sys, threading
sys.path.insert(0, {root!r})
from pathlib import Path
from clanker_rag._serve._proxy import SharedRetriever
from clanker_rag._serve._follow import load_served
from clanker_rag.integrations._mcp import KnowledgeService

folder = Path({folder!r})
(data,) = folder.glob("data-*.bin")
original = data.read_bytes()
proxy = SharedRetriever(load_served(folder), folder, check_every=0.0)
mcp = KnowledgeService(load_served(folder), folder)

def ask():
    a = [(h.source, h.text) for h in proxy.search("harbour lanterns number7", 5)]
    b = [(r["source"], r["text"]) for r in mcp.search("harbour lanterns number7", 5)["results"]]
    return a, b, mcp.show("doc123.md")

before = ask()
stop = threading.Event()

def rewrite():  # in place, as cp over the file does: truncate, then write
    flip = 0
    while not stop.is_set():
        with open(data, "r+b") as fh:
            fh.truncate(0)
            fh.write(bytes(len(original)) if flip else original)
        flip ^= 1

writer = threading.Thread(target=rewrite)
writer.start()
seen = set()
try:
    for _ in range({rounds}):
        seen.add(repr(ask()))
finally:
    stop.set()
    writer.join()
with open(data, "r+b") as fh:
    fh.truncate(0)
    fh.write(original)
print(repr((repr(before), sorted(seen))))
"""


def test_servers_keep_answering_while_their_data_file_is_rewritten_in_place(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    build(folder)
    script = SCRIPT.format(root=str(ROOT), folder=str(folder), rounds=300)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the serving process died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    before, seen = eval(proc.stdout)  # our own repr of plain strings
    # Every answer is the one from before: the copy in memory is what is served.
    assert seen == [before]
    assert "doc007.md" in before


def in_a_child(body: str) -> None:
    """Run ``body`` in a child process (a SIGBUS there fails the test, not the test run)."""
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"the child died (exit {proc.returncode}): {proc.stderr[-2000:]}"


def test_a_served_load_holds_copies_not_mappings(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    build(folder, 50)
    in_a_child(f"""
        from pathlib import Path
        from clanker_rag._serve._follow import load_served
        folder = Path({str(folder)!r})
        kb = load_served(folder)
        (data,) = folder.glob("data-*.bin")
        data.write_bytes(b"")  # truncated in place under the server (a save writes a new file instead)
        hits = kb.search("harbour lanterns number7", 3)
        assert [h.source for h in hits] == ["doc007.md", "doc020.md", "doc033.md"], hits
        assert "keepers word7" in hits[0].text and kb.source_text("doc020.md") is not None
        assert not kb.data_rewritten()  # nothing of the file is read any more
    """)


def test_a_reload_reads_only_the_segments_it_does_not_hold(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "index"
    build(folder, 2000)
    read: list[int] = []
    real = _store._read_copy

    def counting(fd: int, size: int, path: Path) -> memoryview:
        read.append(size)
        return real(fd, size, path)

    monkeypatch.setattr(_store, "_read_copy", counting)
    kb = load_served(folder)
    follower = IndexFollower(folder)
    (first,) = read
    with KnowledgeBase.edit(folder) as writer:
        writer.add_text("a late note on harbour lanterns", "late.md")
        writer.save(merge=False)
    assert len(list(folder.glob("data-*.bin"))) == 2
    fresh = follower.fresh(kb)
    assert fresh is not None and "late.md" in fresh.sources()
    assert read[0] == first and len(read) == 2 and read[1] < first  # the new tail segment only
    del kb
    assert fresh.search("late note", 1)[0].source == "late.md"


def test_a_sharded_index_served_in_process_holds_copies_too(tmp_path: Path) -> None:
    from clanker_rag.cluster import ShardedKnowledgeBase

    kb = ShardedKnowledgeBase(2)
    for i in range(40):
        kb.add_text(f"passage {i} on harbour lanterns number{i % 13} and keepers word{i}", f"doc{i:03d}.md")
    folder = kb.save(tmp_path / "sharded")
    in_a_child(f"""
        from pathlib import Path
        from clanker_rag.cluster import ShardedKnowledgeBase
        folder = Path({str(folder)!r})
        served = ShardedKnowledgeBase.load(folder, private=True)
        before = [(h.source, h.text) for h in served.search("harbour lanterns number7", 3)]
        for data in folder.rglob("data-*.bin"):
            data.write_bytes(b"")  # in place, under the server
        assert [(h.source, h.text) for h in served.search("harbour lanterns number7", 3)] == before
        assert len(before) == 3
    """)
