"""What a new user hits in the first hour (issue 30): usage errors exit 2 and say what was meant,
``sources`` lists an index, a sharded index is searched without ``--cluster``, help says what each
command takes, ``serve`` names the address it cannot bind."""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

import pytest

from clanker_rag._cli._main import build_parser, main
from clanker_rag._cli._sources import line_count, matching
from clanker_rag._ingest._run import IngestReport
from clanker_rag._kb import KnowledgeBase
from clanker_rag.cluster import ShardedKnowledgeBase

TEXTS = {
    "guide/install.md": "# Install\n\nInstall the tool with pip.\nIt needs Python 3.10 or newer.\n",
    "guide/ports.md": "# Ports\n\nThe server listens on port 7341.",
    "notes/cooking.txt": "Boil the pasta for nine minutes, then drain it.\n",
}
# Counted by hand: the lines an editor shows for each text above.
LINES = {"guide/install.md": 4, "guide/ports.md": 3, "notes/cooking.txt": 1}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLANKER_RAG_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLANKER_RAG_BASE_URL", raising=False)


@pytest.fixture()
def index(tmp_path: Path) -> Path:
    kb = KnowledgeBase(chunk_size=None)
    for name, text in TEXTS.items():
        kb.add_text(text, name, {"team": "ops" if name.startswith("guide/") else "home"})
    return kb.save(tmp_path / "idx")


@pytest.fixture()
def sharded(tmp_path: Path) -> Path:
    kb = ShardedKnowledgeBase(shards=2)
    try:
        for name, text in TEXTS.items():
            kb.add_text(text, name)
        return kb.save(tmp_path / "sharded")
    finally:
        kb.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- usage errors exit 2 --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["search", "x", "-k", "0"], "invalid count '0'"),
        (["search", "x", "--k", "-3"], "invalid count '-3'"),
        (["search", "x", "--where", "team"], "invalid filter 'team' (expected KEY=VALUE"),
        (["search", "x", "--where", "=ops"], "invalid filter '=ops'"),
        (["--index", "D", "--kb", "N", "search", "x"], "give --index or --kb, not both"),
        (["search", "x", "--index", "D", "--kb", "N"], "give --index or --kb, not both"),
        (["--kb", "notes", "list"], "list does not use a knowledge base"),
        (["ask", "why?", "-k", "0"], "invalid count '0'"),
        (["serve", "-k", "0"], "invalid count '0'"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("clanker-rag: error: ") and says in line, line


def test_an_unknown_flag_or_command_gets_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "search", "x", "--idnex", "D")
    assert code == 2
    assert "unrecognized arguments: --idnex D; did you mean --index? (see 'clanker-rag search --help')" in err
    code, _, err = run(capsys, "search", "x", "--feedbak")
    assert code == 2 and "did you mean --feedback?" in err
    code, _, err = run(capsys, "serach", "x")
    assert code == 2 and "did you mean 'search'?" in err
    code, _, err = run(capsys, "list", "--index", "D")
    assert code == 2 and "list does not take --index" in err
    # Nothing close: no guess.
    code, _, err = run(capsys, "search", "x", "--zzzzzz")
    assert code == 2 and "did you mean" not in err


# -- help -----------------------------------------------------------------------------------------


def subparsers() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no commands")


def test_commands_that_read_no_knowledge_base_do_not_offer_index_or_kb() -> None:
    commands = subparsers()
    for name in ("eval", "list", "create", "delete"):
        text = commands[name].format_help()
        assert "--index" not in text and "--kb" not in text, text
    for name in ("search", "show", "sources", "stats", "rm", "ingest", "ask", "serve", "mcp", "demo"):
        assert "--index DIR" in commands[name].format_help(), name


def test_every_positional_argument_has_help() -> None:
    for name, parser in subparsers().items():
        for action in parser._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{name} {action.metavar or action.dest} has no help text"


# -- sources --------------------------------------------------------------------------------------


def test_sources_prints_every_source_name(capsys: pytest.CaptureFixture[str], index: Path) -> None:
    code, out, _ = run(capsys, "sources", "--index", str(index))
    assert code == 0
    assert out.splitlines() == sorted(TEXTS)


def test_sources_glob_and_prefix(capsys: pytest.CaptureFixture[str], index: Path) -> None:
    assert run(capsys, "sources", "guide/*.md", "--index", str(index))[1].splitlines() == [
        "guide/install.md",
        "guide/ports.md",
    ]
    assert run(capsys, "sources", "notes/", "--index", str(index))[1].splitlines() == ["notes/cooking.txt"]
    code, out, err = run(capsys, "sources", "drafts/*", "--index", str(index))
    assert code == 1 and out == "" and "no source in" in err and "'drafts/*'" in err


def test_sources_json_gives_chunks_lines_and_metadata(capsys: pytest.CaptureFixture[str], index: Path) -> None:
    code, out, _ = run(capsys, "sources", "--json", "--index", str(index))
    assert code == 0
    items = json.loads(out)
    assert [item["source"] for item in items] == sorted(TEXTS)
    kb = KnowledgeBase.load(index)
    for item in items:
        name = item["source"]
        assert item["lines"] == LINES[name]
        assert item["chars"] == len(TEXTS[name])
        assert item["chunks"] == len(list(kb.chunks(name))) >= 1
        assert item["metadata"]["team"] == ("ops" if name.startswith("guide/") else "home")


def test_line_count_matches_an_editor() -> None:
    assert [line_count(t) for t in ("", "a", "a\n", "a\nb", "a\n\n", "\n")] == [0, 1, 1, 2, 2, 1]
    assert matching(["a/x.md", "a/y.txt", "b/x.md"], "*.md") == ["a/x.md", "b/x.md"]
    assert matching(["a/x.md", "ab/y.md"], "a/") == ["a/x.md"]


def test_an_empty_index_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = KnowledgeBase().save(tmp_path / "empty")
    code, out, err = run(capsys, "sources", "--index", str(folder))
    assert code == 0 and out == "" and "no sources in" in err


def test_rm_of_an_unknown_name_points_at_sources(capsys: pytest.CaptureFixture[str], index: Path) -> None:
    code, _, err = run(capsys, "rm", "zzzz-nothing", "--index", str(index))
    assert code == 1
    assert "clanker-rag sources lists them" in err and "stats" not in err


# -- a sharded index without --cluster -----------------------------------------------------------


def test_search_a_sharded_index_without_cluster(capsys: pytest.CaptureFixture[str], sharded: Path) -> None:
    code, out, err = run(capsys, "search", "which port does the server listen on", "--index", str(sharded), "--json")
    assert code == 0, err
    hits = json.loads(out)
    assert hits and hits[0]["source"] == "guide/ports.md"
    # The same scores as one index over the same texts (sharding scores with whole-collection statistics).
    one = KnowledgeBase(chunk_size=ShardedKnowledgeBase.load(sharded).settings().get("chunk_size"))
    for name, text in TEXTS.items():
        one.add_text(text, name)
    expected = one.search("which port does the server listen on", 5)
    assert [(h["source"], round(h["score"], 9)) for h in hits] == [(h.source, round(h.score, 9)) for h in expected]
    code, out, _ = run(capsys, "sources", "--index", str(sharded))
    assert code == 0 and out.splitlines() == sorted(TEXTS)
    code, out, _ = run(capsys, "show", "notes/cooking.txt", "--index", str(sharded))
    assert code == 0 and out == TEXTS["notes/cooking.txt"]


def test_stats_of_a_sharded_index_says_what_to_pass(capsys: pytest.CaptureFixture[str], sharded: Path) -> None:
    code, _, err = run(capsys, "stats", "--index", str(sharded))
    assert code == 1
    assert "is a sharded index" in err and "--cluster local" in err and "no index" not in err


# -- messages -------------------------------------------------------------------------------------


def test_serve_on_a_taken_port_names_the_address(capsys: pytest.CaptureFixture[str], index: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        upstream = "http://127.0.0.1:9"
        code, _, err = run(capsys, "serve", "--upstream", upstream, "--index", str(index), "--port", str(port))
    assert code == 1
    [line] = err.strip().splitlines()
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--port 0" in line, line


@pytest.mark.parametrize(("workers", "words"), [(1, "1 worker process)"), (2, "2 worker processes)")])
def test_ingest_summary_counts_worker_processes_in_good_english(workers: int, words: str) -> None:
    report = IngestReport(added=["a.md"], bytes_read=2_000_000, seconds=1.0, workers=workers)
    assert report.summary().endswith(words) or words in report.summary(), report.summary()


def test_serve_a_sharded_index_without_cluster(sharded: Path) -> None:
    from tests.helpers._fake_upstream import FakeUpstream, Reply
    from tests.helpers._serve import serve_and_ask

    with FakeUpstream(lambda path, body: Reply(["7341"])) as up:
        question = "Which port does the server listen on?\n"
        served = serve_and_ask(["--upstream", up.url, "--index", str(sharded)], question)
        assert served.answer["choices"][0]["text"] == "7341"
        # (serve's --dialect auto asks /props first.)
        [request, *_] = [r for r in up.requests if r["path"] == "/v1/completions"]
        assert "guide/ports.md" in request["body"]["prompt"]
    assert served.code == 130 and "Traceback" not in served.rest
