"""A commit point never names one data file twice, nor one live source in two segments."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from clanker_rag import Analyzer, IndexFormatError, KnowledgeBase
from clanker_rag._storage import _codec, _segments
from clanker_rag._storage._segments import Policy

plain = Analyzer(stopwords=False, stemmer=None, split_identifiers=False)


@pytest.fixture
def segmented(monkeypatch):
    monkeypatch.setattr(_segments, "POLICY", Policy(merge_factor=50, full_share=10.0, full_below=0))


def resign(folder: Path, change: Any) -> None:
    """Rewrite the manifest with ``change(body)`` applied and a matching digest (as a tool that re-signs would)."""
    doc = json.loads((folder / "index.json").read_text())
    change(doc["body"])
    body = json.dumps(doc["body"], ensure_ascii=True, separators=(",", ":"))
    doc["sha256"] = hashlib.sha256(body.encode("ascii")).hexdigest()
    head = json.dumps({k: doc[k] for k in ("format", "format_version", "revision", "sha256")}, separators=(",", ":"))
    (folder / "index.json").write_text(head[:-1] + ',"body":' + body + "}\n")


def two_segments(folder: Path, n: int = 20) -> None:
    kb = KnowledgeBase(chunk_size=8, stride=4, analyzer=plain)
    for i in range(n):
        kb.add_text(f"common word{i} alpha beta", f"s{i}.md")
    kb.save(folder)
    kb = KnowledgeBase.load(folder, analyzer=plain)
    kb.add_text("common tail only gamma", "tail.md")
    kb.remove("s3.md")
    kb.add_text("common word3 again delta", "s3.md")  # deleted in the first segment, written in the second
    kb.save(merge=False)
    assert len(json.loads((folder / "index.json").read_text())["body"]["segments"]) == 2


def test_a_segment_named_twice_is_refused(tmp_path, segmented):
    two_segments(tmp_path)
    resign(tmp_path, lambda b: b["segments"].append(dict(b["segments"][1])))
    with pytest.raises(IndexFormatError, match=r"names data file data-[0-9a-f]+\.bin twice") as err:
        KnowledgeBase.load(tmp_path, analyzer=plain)
    assert "\n" not in str(err.value)


def test_the_first_segment_named_again_later_is_refused(tmp_path, segmented):
    two_segments(tmp_path)
    resign(tmp_path, lambda b: b["segments"].insert(1, dict(b["segments"][0], deleted=[], deleted_chunks=0)))
    with pytest.raises(IndexFormatError, match="twice"):
        KnowledgeBase.load(tmp_path, analyzer=plain)


def undelete_first(body: dict[str, Any]) -> None:
    body["segments"][0]["deleted"] = []
    body["segments"][0]["deleted_chunks"] = 0


def test_a_live_source_in_two_segments_is_refused(tmp_path, segmented):
    two_segments(tmp_path)
    resign(tmp_path, undelete_first)
    with pytest.raises(IndexFormatError, match=r"source 's3\.md' is live in two segments") as err:
        KnowledgeBase.load(tmp_path, analyzer=plain)
    assert "\n" not in str(err.value)


def test_the_check_finds_the_tails_names_together_when_the_tail_is_big(tmp_path, segmented, monkeypatch):
    two_segments(tmp_path, n=5)
    monkeypatch.setattr(_codec, "_SEARCH_SHARE", 10**6)  # the bulk way, whatever the sizes
    resign(tmp_path, undelete_first)
    with pytest.raises(IndexFormatError, match=r"s3\.md"):
        KnowledgeBase.load(tmp_path, analyzer=plain)


@pytest.mark.parametrize("share", [1, 10**6])
def test_a_commit_a_save_wrote_loads_and_a_removal_leaves_no_copy(tmp_path, segmented, monkeypatch, share):
    monkeypatch.setattr(_codec, "_SEARCH_SHARE", share)
    two_segments(tmp_path)
    kb = KnowledgeBase.load(tmp_path, analyzer=plain)
    assert [h.source for h in kb.search("word3", 10)] == ["s3.md"]
    kb.remove("s3.md")
    kb.save(merge=False)
    assert KnowledgeBase.load(tmp_path, analyzer=plain).search("word3", 10) == []


@pytest.mark.parametrize("fence", [1, 3, 32])
@pytest.mark.parametrize("bulk_share", [1, 10**6])
def test_names_found_together_are_those_found_one_by_one(tmp_path, monkeypatch, fence, bulk_share):
    from clanker_rag._storage import _stored

    monkeypatch.setattr(_stored, "_FENCE", fence)
    monkeypatch.setattr(_stored, "_BULK_SHARE", bulk_share)  # 1: fences and a bisection; 10**6: every name
    names = [f"{prefix}{i}" for i, prefix in enumerate(["a/", "é/", "z", "日本/", "a/b", "\udc80x"] * 30)]
    kb = KnowledgeBase(chunk_size=8, stride=4, analyzer=plain)
    for name in names:
        kb.add_text(f"text of {name}", name)
    kb.save(tmp_path)
    index = _codec.read(tmp_path).segments[0].names
    assert index is not None
    wanted = {*names[::7], "a/", "zz", "", "日本/9999", "\udc80", names[-1] + "x", min(names), max(names)}
    expected = {name: index.find(name) for name in wanted}
    assert index.numbers_of(wanted) == {name: n for name, n in expected.items() if n is not None}
    assert set(index.numbers_of(wanted)) == {*names[::7], min(names), max(names)}
