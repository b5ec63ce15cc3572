"""Loads while another process saves (issue 27, item 2): a load reads the data file it
mapped, never the path again, so a save replacing and deleting that path cannot fail it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clanker_rag import IndexFormatError, KnowledgeBase
from clanker_rag._storage import _store

ROOT = Path(__file__).resolve().parents[2]


def saved(folder: Path, n: int = 200) -> None:
    kb = KnowledgeBase()
    for i in range(n):
        kb.add_text(f"document {i} about topic{i % 7} and some words", f"s{i:03d}.txt")
    kb.save(folder)


def test_a_load_survives_its_data_file_being_replaced_right_after_it_is_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "index"
    saved(folder)
    real = _store.map_file
    mapped: list[Path] = []

    def then_a_save_deletes_it(path: Path, *, private: bool = False) -> tuple[memoryview, _store.DataFile]:
        opened = real(path, private=private)
        # What another process's save does to the old data file, right after this load mapped it.
        path.unlink()
        mapped.append(path)
        return opened

    monkeypatch.setattr(_store, "map_file", then_a_save_deletes_it)
    kb = KnowledgeBase.load(folder)
    hits = kb.search("topic3 document 10", 3)
    assert hits and all("topic3" in hit.text or "10" in hit.text for hit in hits)
    assert kb.source_text("s010.txt") == "document 10 about topic3 and some words"
    assert mapped and not any(p.exists() for p in mapped), "the data file was not deleted under the load"


@pytest.mark.slow
def test_loads_and_searches_never_fail_while_another_process_edits_and_saves(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    saved(folder)
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from clanker_rag import KnowledgeBase
        end = time.monotonic() + 4.0
        i = 0
        while time.monotonic() < end:
            with KnowledgeBase.edit({str(folder)!r}) as kb:
                kb.add_text(f"extra text {{i}} about topic3", f"x{{i % 5}}.txt")
            i += 1
        print(i)
    """)
    saver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    loads = 0
    try:
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            kb = KnowledgeBase.load(folder)
            hits = kb.search("topic3 document", 3)
            assert len(hits) == 3
            assert all(hit.text for hit in hits)
            loads += 1
    finally:
        out, err = saver.communicate(timeout=60)
    assert saver.returncode == 0, err.decode()
    assert int(out) > 5, "the other process barely saved: nothing raced"
    assert loads > 20


def test_search_on_a_2_gib_sparse_manifest_fails_at_once_with_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    folder.mkdir()
    with open(folder / "index.json", "wb") as fh:
        fh.truncate(2 << 30)  # sparse: no disk used; read whole it would take seconds and gigabytes
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "clanker_rag", "search", "anything", "--index", str(folder)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "more than any index manifest holds" in proc.stderr
    with pytest.raises(IndexFormatError, match=r"2147483648 bytes"):
        KnowledgeBase.load(folder)


def resign(folder: Path, change: object) -> None:
    """Rewrite the manifest with ``change(body)`` applied and a matching digest (as a tool that re-signs would)."""
    import hashlib
    import json

    doc = json.loads((folder / "index.json").read_text())
    change(doc["body"])  # type: ignore[operator]
    body = json.dumps(doc["body"], ensure_ascii=True, separators=(",", ":"))
    doc["sha256"] = hashlib.sha256(body.encode("ascii")).hexdigest()
    head = json.dumps({k: doc[k] for k in ("format", "format_version", "revision", "sha256")}, separators=(",", ":"))
    (folder / "index.json").write_text(head[:-1] + ',"body":' + body + "}\n")


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.update(analyzer=[]),
        lambda b: b["analyzer"].pop("cjk_bigrams"),
        lambda b: b["analyzer"].update(stopwords="1"),
        lambda b: b["analyzer"].update(stopwords=[1]),
        lambda b: b["analyzer"].update(type="nonsense"),
        lambda b: b.update(chunking=[180, 90]),
        lambda b: b["chunking"].update(chunk_size="x"),
        lambda b: b["bm25"].update(variant=0),
        lambda b: b.update(bm25=None),
    ],
)
def test_re_signed_manifests_with_bad_settings_are_one_index_format_error(tmp_path: Path, change: object) -> None:
    folder = tmp_path / "index"
    saved(folder, 20)
    resign(folder, change)
    with pytest.raises(IndexFormatError, match="index"):
        KnowledgeBase.load(folder).search("topic3 document", 3)
