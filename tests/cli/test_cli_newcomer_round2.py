"""A newcomer's first hour, round 2 (issue 45 items 10, 11): what long steps say, many queries at once,
and ``ask``/``serve`` limited to part of the index as ``search`` is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clanker_rag._cli._main import main
from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._proxy import SharedRetriever
from tests.helpers._trees import write


@pytest.fixture
def index(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    write(tree, "ops/keys.md", "# Keys\n\nRotate the signing keys every ninety days.\n")
    write(tree, "home/shed.md", "# Shed\n\nThe keys to the garden shed hang by the door.\n")
    write(tree, "home/tomatoes.md", "# Tomatoes\n\nWater the tomato plants every morning.\n")
    path = tmp_path / "index"
    KnowledgeBase().ingest(tree, index_path=path)
    return path


def test_search_queries_file_prints_one_json_line_a_query_in_order(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "queries.txt"
    queries.write_text("signing keys\n\ntomato plants\nkeys\n", encoding="utf-8")
    assert main(["search", "--index", str(index), "--queries", str(queries), "-k", "2", "--filter", "home"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["query"] for line in lines] == ["signing keys", "tomato plants", "keys"]
    assert all(hit["source"].startswith("home/") for line in lines for hit in line["hits"])
    assert [hit["source"] for hit in lines[1]["hits"]] == ["home/tomatoes.md"]
    kb = KnowledgeBase.load(index)
    assert [hit["source"] for hit in lines[2]["hits"]] == [h.source for h in kb.search("keys", 2, source="home")]


@pytest.mark.parametrize("argv", [[], ["keys", "--queries", "-"]])
def test_search_takes_a_query_or_a_queries_file_not_both(
    index: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "--index", str(index), *argv]) == 2
    assert "search takes a QUERY or --queries FILE" in capsys.readouterr().err


def test_ask_filter_injects_only_the_part_of_the_index_asked_for(
    index: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLANKER_RAG_BASE_URL", raising=False)
    # Without a model server, ask prints what it would inject (exit code 1: no answer).
    assert main(["ask", "--index", str(index), "where are the keys?"]) == 1
    everything = capsys.readouterr().out
    assert "ops/keys.md" in everything
    assert main(["ask", "--index", str(index), "--filter", "home/*", "where are the keys?"]) == 1
    limited = capsys.readouterr().out
    assert "home/shed.md" in limited and "ops/keys.md" not in limited
    assert main(["ask", "--index", str(index), "--where", "path=ops/keys.md", "where are the keys?"]) == 1
    by_metadata = capsys.readouterr().out
    assert "ops/keys.md" in by_metadata and "home/shed.md" not in by_metadata


def test_serve_filters_every_search_it_makes_also_after_a_reload(index: Path, tmp_path: Path) -> None:
    shared = SharedRetriever(KnowledgeBase.load(index), index, check_every=0, source="home")
    assert {h.source for h in shared.search("keys", 5)} == {"home/shed.md"}
    with KnowledgeBase.edit(index) as kb:
        kb.add_text("Spare keys are in the kitchen drawer.", "home/kitchen.md")
        kb.add_text("Office keys are at the front desk.", "work/office.md")
    assert {h.source for h in shared.search("keys", 5)} == {"home/shed.md", "home/kitchen.md"}
    where = SharedRetriever(KnowledgeBase.load(index), where={"path": "ops/keys.md"})
    assert {h.source for h in where.search("keys", 5)} == {"ops/keys.md"}


def test_serve_takes_filter_and_where(index: Path) -> None:
    from clanker_rag._cli._main import build_parser

    args = build_parser().parse_args(["serve", "--filter", "docs/*", "--where", "team=ops"])
    assert args.filter == "docs/*" and args.where == ["team=ops"]


def test_optimize_and_backup_say_what_they_are_doing_with_v_and_not_without(
    index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with KnowledgeBase.edit(index) as kb:
        kb.add_text("one more note about keys", "more.md")
    assert main(["optimize", "--index", str(index)]) == 0
    assert "merging" not in capsys.readouterr().err  # stderr is not a terminal here
    with KnowledgeBase.edit(index) as kb:
        kb.add_text("and another", "again.md")
    assert main(["optimize", "--index", str(index), "-v"]) == 0
    assert re.search(r"clanker-rag: merging \d+ segments? \(5 chunks\) into one \.\.\.", capsys.readouterr().err)
    assert main(["backup", str(index), str(tmp_path / "copy"), "-v"]) == 0
    err = capsys.readouterr().err
    for step in ("checking every byte of", "writing 5 chunks to", "reading back"):
        assert step in err
    assert main(["backup", str(index), str(tmp_path / "copy2")]) == 0
    assert "checking every byte" not in capsys.readouterr().err


def test_ingest_says_when_the_bar_stands_still_for_a_save(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    for i in range(5):
        write(tree, f"f{i}.md", f"note {i} about word{i}\n")
    KnowledgeBase().ingest(tree, index_path=tmp_path / "index", progress=True, checkpoint_files=2, jobs=1)
    err = capsys.readouterr().err
    assert "2/5 files  saving a checkpoint ..." in err and "4/5 files  saving a checkpoint ..." in err
    assert f"saving the index to {tmp_path / 'index'} ..." in err
    # The bar drew over the note after it: the line ends with the bar, then a newline.
    assert err.index("5/5 files") > err.index("4/5 files  saving")


def test_ingest_text_field_makes_each_jsonl_record_a_source_and_syncs_on_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = tmp_path / "notes.jsonl"
    rows = [
        {"id": "k1", "text": "Rotate the signing keys every ninety days.", "team": "ops"},
        {"id": "t1", "text": "Water the tomato plants every morning.", "team": "home"},
        {"id": "s1", "text": "The shed keys hang by the door.", "team": "home"},
    ]
    records.write_text("\n".join(json.dumps(r) for r in rows) + "\n\nnot json\n", encoding="utf-8")
    index = tmp_path / "index"
    argv = ["ingest", "--index", str(index), str(records), "--text-field", "text", "--id-field", "id", "--no-progress"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("3 added, 0 updated, 0 unchanged, 0 removed, 1 skipped record; 3 chunks in the index")
    assert "skipped: 1 record (-v lists them)" in err
    kb = KnowledgeBase.load(index)
    assert kb.sources() == ["notes.jsonl#k1", "notes.jsonl#s1", "notes.jsonl#t1"]
    assert kb.source_text("notes.jsonl#t1") == rows[1]["text"]  # the field, not the JSON line
    assert kb.source_metadata("notes.jsonl#k1") == {"id": "k1", "team": "ops"}
    assert [h.source for h in kb.search("keys", 5, where={"team": "home"})] == ["notes.jsonl#s1"]
    # Edit one record, drop another: the rerun updates and removes just those.
    rows[0]["text"] = "Rotate the signing keys every thirty days."
    records.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n", encoding="utf-8")
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("0 added, 1 updated, 1 unchanged, 1 removed, 0 skipped records")
    assert KnowledgeBase.load(index).sources() == ["notes.jsonl#k1", "notes.jsonl#t1"]


def test_ingest_text_field_refuses_what_is_not_a_jsonl_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "tree", "a.md", "# A\n")
    assert main(["ingest", "--index", str(tmp_path / "i"), str(tmp_path / "tree"), "--text-field", "text"]) == 1
    assert "--text-field reads JSON Lines files" in capsys.readouterr().err


def test_the_first_hybrid_search_says_it_is_embedding_before_the_first_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from clanker_rag._retrieval._dense import HybridRetriever
    from tests.helpers._models import FakeBiEncoder

    kb = KnowledgeBase()
    kb.add_text("Cats sleep most of the day.", "cats.md")
    kb.add_text("The rocket reached orbit.", "space.md")
    hybrid = HybridRetriever(kb, FakeBiEncoder(), model_name="fake-concepts")
    with caplog.at_level(logging.INFO, logger="clanker_rag"):
        hybrid.search("feline", 1)
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "embedding 2 chunk texts (stored: later searches reuse them) ..."
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="clanker_rag"):
        hybrid.search("orbit", 1)
    assert not any("embedding" in r.getMessage() for r in caplog.records)  # nothing new to embed
