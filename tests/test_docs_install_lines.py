"""Every ``pip install`` line in README.md and docs/ works as written from a clone's root (issue 30).

clanker_rag is on no package registry, so a line naming ``clanker-rag`` would fail for every
reader. Each line must install a path of this repository (``-e .``, ``'.[mcp]'``) with extras
``pyproject.toml`` defines, or a registry package the test extra has installed here; and pip
itself resolves the repository's lines (``pip install --dry-run --no-deps``, no network needed).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])


class InstallLine(NamedTuple):
    doc: str
    line: int
    args: list[str]  # what follows "pip install"


def install_lines() -> list[InstallLine]:
    found = []
    for doc in DOCS:
        for number, text in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            # In a console block ("$ pip install ...  # note") or in inline code (`pip install ...`).
            for command in re.findall(r"`(pip install [^`]+)`", text) or (
                [text.lstrip("$ ").split("  #")[0]] if text.lstrip("$ ").startswith("pip install ") else []
            ):
                command = command.split(" && ")[0].split(";")[0].strip()
                found.append(InstallLine(doc.name, number, shlex.split(command)[2:]))
    return found


def targets(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-e", "--editable"):
            continue
        elif arg.startswith("-"):
            skip = arg in ("-r", "-c", "--index-url", "--extra-index-url")
        else:
            out.append(arg)
    return out


def test_the_docs_have_install_lines_to_check() -> None:
    lines = install_lines()
    assert len(lines) >= 15, lines  # the parser must find them, or this test checks nothing
    assert {line.doc for line in lines} >= {"README.md", "install.md", "integrations.md", "cli.md"}


@pytest.mark.parametrize("line", install_lines(), ids=lambda x: f"{x.doc}:{x.line}")
def test_each_install_line_names_something_that_exists(line: InstallLine) -> None:
    assert targets(line.args), f"{line}: installs nothing"
    for target in targets(line.args):
        path, _, extras = target.partition("[")
        if path.startswith("."):
            assert (ROOT / path).resolve() == ROOT, f"{line}: {target} is not the repository root"
            wanted = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
            assert wanted <= EXTRAS, f"{line}: no extra {sorted(wanted - EXTRAS)} in pyproject.toml"
        else:
            # A registry package: it must not be ourselves (not published), and the test extra installed it.
            name = re.split(r"[<>=!~\[ ]", target)[0]
            assert name.lower().replace("_", "-") != "clanker-rag", f"{line}: clanker-rag is on no registry"
            metadata.version(name)  # raises PackageNotFoundError for a name that is not a real package here


@pytest.mark.slow
def test_pip_resolves_the_repository_install_lines() -> None:
    # Every distinct form once (editable or not): with --no-deps pip builds the metadata and leaves the extras
    # unresolved (it does not even warn about an unknown one: the test above checks them against pyproject.toml),
    # so the extras of all lines ride on one call.
    lines = [line for line in install_lines() if any(t.startswith(".") for t in targets(line.args))]
    extras = sorted(
        {e for line in lines for t in targets(line.args) for e in re.findall(r"[\w-]+", t.partition("[")[2])}
    )
    forms = {("-e" in line.args or "--editable" in line.args) for line in lines}
    assert forms, "no line installs the repository"
    for editable in sorted(forms):
        spec = f".[{','.join(extras)}]" if extras else "."
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", *(["-e"] if editable else []), spec]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Would install clanker-rag" in done.stdout, done.stdout
