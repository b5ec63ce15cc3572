"""A served index whose data file is rewritten in place (issue 27, item 4).

``cp -a backup/. index/``, ``rsync --inplace`` and ``truncate`` change the
mapped file under a serving process: touching a page past its new end kills
the process with SIGBUS.  The proxy's and the MCP server's retrievers notice
the change (one fstat per search) and load the folder again, or refuse
cleanly while it does not load.  Each case runs in a child process, so a
SIGBUS shows as a failed test, not a dead test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clanker_rag import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]


def build(folder: Path) -> None:
    kb = KnowledgeBase()
    for i in range(400):
        kb.add_text(f"passage {i} on harbour lanterns number{i % 13} and keepers of the light", f"doc{i:03d}.md")
    kb.save(folder)


SCRIPT = """
import os, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from clanker_rag import ClankerRagError, KnowledgeBase
from clanker_rag._serve._proxy import SharedRetriever
from clanker_rag.integrations._mcp import KnowledgeService

folder = Path({folder!r})
(data,) = folder.glob("data-*.bin")
original = data.read_bytes()
served = {{
    "proxy": SharedRetriever(KnowledgeBase.load(folder), folder),
    "mcp": KnowledgeService(KnowledgeBase.load(folder), folder),
}}

def ask(name):
    try:
        if name == "proxy":
            return [h.source for h in served[name].search("harbour lanterns number7", 3)]
        return [r["source"] for r in served[name].search("harbour lanterns number7", 3)["results"]]
    except ClankerRagError as exc:
        return "refused: " + type(exc).__name__

before = {{name: ask(name) for name in served}}
{damage}
during = {{name: ask(name) for name in served}}
with open(data, "r+b") as fh:  # written back in place, as cp -a would finish doing
    fh.truncate(0)
    fh.write(original)
after = {{name: ask(name) for name in served}}
print(repr((before, during, after)))
"""

DAMAGE = {
    "truncate to nothing": "os.truncate(data, 0)",
    "truncate to half": "os.truncate(data, len(original) // 2)",
    "rewritten with other bytes": (
        "with open(data, 'r+b') as fh:\n    fh.truncate(0)\n    fh.write(bytes(len(original)))"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_served_index_survives_its_data_file_being_rewritten_in_place(tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "index"
    build(folder)
    script = SCRIPT.format(root=str(ROOT), folder=str(folder), damage=DAMAGE[damage])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"the serving process died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    before, during, after = eval(proc.stdout)  # our own repr of plain lists and strings
    for name in ("proxy", "mcp"):
        assert len(before[name]) == 3
        assert during[name] == "refused: IndexFormatError", (name, during)
        assert after[name] == before[name], (name, after)
