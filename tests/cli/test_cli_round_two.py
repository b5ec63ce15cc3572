"""A newcomer's first hour, round 2 (issue 45): counts in good English, Ctrl-C said and exit codes alike."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from clanker_rag._cli._main import main
from clanker_rag._cli._terminal import counted
from clanker_rag._cli._watching import _stop_on_signals
from clanker_rag._kb import KnowledgeBase
from tests.helpers._fake_upstream import FakeUpstream, Reply
from tests.helpers._serve import serve_and_ask

FINISHING = "clanker-rag: finishing the commit in progress; Ctrl-C again to abort\n"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLANKER_RAG_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLANKER_RAG_BASE_URL", raising=False)
    return tmp_path / "home"


@pytest.fixture
def one_chunk(tmp_path: Path) -> Path:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("The server listens on port 7341.", "guide/ports.md")
    kb.save(tmp_path / "kb")
    return tmp_path / "kb"


@pytest.mark.parametrize(("n", "text"), [(0, "0 chunks"), (1, "1 chunk"), (2, "2 chunks")])
def test_counts_are_singular_only_for_one(n: int, text: str) -> None:
    assert counted(n, "chunk") == text


def test_removing_a_one_chunk_source_says_one_chunk(one_chunk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rm", "guide/ports.md", "--index", str(one_chunk)]) == 0
    assert capsys.readouterr().out == "removed guide/ports.md (1 chunk)\n"


def test_backup_of_one_source_says_one_source_and_one_chunk(
    one_chunk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["backup", str(one_chunk), str(tmp_path / "copy")]) == 0
    assert capsys.readouterr().out.endswith(": 1 source, 1 chunk, verified\n")


def test_serve_says_one_chunk_and_exits_130_after_ctrl_c(one_chunk: Path) -> None:
    with FakeUpstream(lambda path, body: Reply(["7341"])) as up:
        served = serve_and_ask(["--upstream", up.url, "--index", str(one_chunk)], "Which port?\n")
    assert f"with {one_chunk} (1 chunk); Ctrl-C stops" in served.banner
    assert served.code == 130 and "stopped" in served.rest


def test_ctrl_c_during_a_commit_says_it_finishes_and_a_second_one_aborts(capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGINT)
    with _stop_on_signals() as stop:
        stop.committing = True
        signal.raise_signal(signal.SIGINT)
        assert stop() and stop.signum == signal.SIGINT
        assert capsys.readouterr().err == FINISHING  # at once, not after the commit
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_between_commits_stops_without_talking_of_a_commit(capsys: pytest.CaptureFixture[str]) -> None:
    with _stop_on_signals() as stop:
        assert not stop()
        signal.raise_signal(signal.SIGTERM)
        assert stop() and stop.signum == signal.SIGTERM
    assert capsys.readouterr().err == ""
