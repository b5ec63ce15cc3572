"""The sample outputs in docs/cli.md are what the commands print (issue 14, item 14).

Each ``$ clanker-rag ...`` line of a console block that is followed by output
is run, and its output compared with the sample.  What legitimately differs
between machines and runs (a score that moves with every docs edit, a date,
a home folder, a port) is masked on both sides before comparing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clanker_rag._cli._main import main
from clanker_rag._kb import KnowledgeBase
from tests.helpers._paths import SHARED
from tests.helpers._serve import default_sigint

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"


def samples() -> dict[str, list[str]]:
    """Command line (without ``clanker-rag``) -> the output lines shown under it."""
    out: dict[str, list[str]] = {}
    text = CLI_DOC.read_text(encoding="utf-8")
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        command = None
        for line in block.splitlines():
            if line.startswith("$ "):
                command = line[2:].split("  #")[0].strip() if line.startswith("$ clanker-rag ") else None
                if command:
                    out[command] = []
            elif command:
                out[command].append(line)
    return {command: lines for command, lines in out.items() if lines}


def argv(command: str) -> list[str]:
    return shlex.split(command)[1:]


def test_every_sample_output_is_checked_here():
    checked = {"search", "eval", "list", "serve", "optimize", "ingest"}
    shown = {argv(command)[0] for command in samples()}
    assert shown <= checked, f"docs/cli.md shows output of {shown - checked}: check it in this file"


def test_search_sample_is_what_search_prints(capsys, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    (command, expected), *_ = [(c, lines) for c, lines in samples().items() if argv(c)[0] == "search"]
    assert main(argv(command)) == 0
    actual = capsys.readouterr().out.splitlines()
    # Compared whole, score included: the score moves with any edit of docs/ (the shipped index is the
    # docs), so an edit that moves it must update this sample too, when it rebuilds data/kb.
    assert actual == expected, "docs/cli.md's search sample should read:\n" + "\n".join(actual)


def test_ingest_sample_is_what_ingest_prints(capsys, monkeypatch, tmp_path):
    # The records sample: a JSON-lines file of that many one-chunk records, ingested into a new index.
    (command, expected), *_ = [(c, lines) for c, lines in samples().items() if argv(c)[0] == "ingest"]
    count = int(expected[0].split()[0])
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(count):
            f.write(json.dumps({"_id": f"r{i}", "text": f"record number {i} of the sample"}) + "\n")
    assert main(argv(command)) == 0
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.slow
def test_eval_samples_are_what_eval_prints(cranfield, capsys, monkeypatch, tmp_path):
    # The doc's "datasets/cranfield" is found through CLANKER_RAG_SHARED from any folder.
    monkeypatch.setenv("CLANKER_RAG_SHARED", str(SHARED))
    monkeypatch.chdir(tmp_path)
    runs = [(c, lines) for c, lines in samples().items() if argv(c)[0] == "eval"]
    assert len(runs) == 2
    for command, expected in runs:
        assert main(argv(command)) == 0
        actual = capsys.readouterr().out.splitlines()
        assert actual == expected, "\n".join(actual)


def test_list_sample_has_the_shape_list_prints(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CLANKER_RAG_HOME", str(tmp_path / "home"))
    (command, expected), *_ = [(c, lines) for c, lines in samples().items() if argv(c)[0] == "list"]
    assert main(["create", "notes"]) == 0
    capsys.readouterr()
    assert main(argv(command)) == 0
    actual = capsys.readouterr().out.splitlines()

    def shape(line: str) -> str:  # size, date and home folder differ
        return re.sub(r"  /\S*/notes$", "  HOME/notes", re.sub(r"\d", "0", line))

    assert [shape(x) for x in actual] == [shape(x) for x in expected], "\n".join(actual)


def test_optimize_sample_has_the_shape_optimize_prints(capsys, monkeypatch, tmp_path):
    from clanker_rag._storage import _segments

    monkeypatch.setenv("CLANKER_RAG_HOME", str(tmp_path / "home"))
    # Saves that never merge, so the index has several segments to optimize.
    monkeypatch.setattr(_segments, "POLICY", _segments.Policy(full_below=0, full_share=1.0))
    (command, expected), *_ = [(c, lines) for c, lines in samples().items() if argv(c)[0] == "optimize"]
    assert main(["create", "notes"]) == 0
    for i in range(3):
        with KnowledgeBase.edit(tmp_path / "home" / "notes") as kb:
            kb.add_text(f"note {i} about lanterns", f"n{i}.md")
    capsys.readouterr()
    assert main(argv(command)) == 0
    actual = capsys.readouterr().out.splitlines()

    def shape(line: str) -> str:  # the home folder and the counts differ
        return re.sub(r" /\S*/notes:", " HOME/notes:", re.sub(r"\d+", "0", line))

    assert [shape(x) for x in actual] == [shape(x) for x in expected], "\n".join(actual)


def test_serve_sample_has_the_shape_serve_prints(tmp_path):
    (command, expected), *_ = [(c, lines) for c, lines in samples().items() if argv(c)[0] == "serve"]
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("a note", "a.md")
    kb.save(tmp_path / "kb")
    args = argv(command)
    args[args.index("--kb") : args.index("--kb") + 2] = ["--index", str(tmp_path / "kb")]
    args[args.index("--port") + 1] = "0"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "clanker_rag", *args]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint)
    stderr = proc.stderr
    assert stderr is not None
    try:
        banner = stderr.readline().rstrip("\n")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            stderr.close()

    def shape(line: str) -> str:  # the port, the folder and its size differ
        line = re.sub(r"127\.0\.0\.1:\d+/v1", "127.0.0.1:PORT/v1", line)
        return re.sub(r" with \S+ \(\d+ chunks?\)", " with KB (N chunks)", line)

    assert [shape(banner)] == [shape(x) for x in expected], banner


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_docs_name_no_lock_file_that_comes_and_goes(doc):
    # .lock is created once and stays; only the lock on it comes and goes.
    assert "while a writer is active, a `.lock`" not in doc.read_text(encoding="utf-8")
