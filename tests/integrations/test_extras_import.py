"""``import clanker_rag`` never imports an optional extra (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import json, sys
import clanker_rag, clanker_rag.integrations, clanker_rag.integrations._mcp, clanker_rag.integrations._adapters
from clanker_rag import KnowledgeBase, RagController, neutralize  # a few lazy names
from clanker_rag._cli._main import build_parser
build_parser()
heavy = ("mcp", "langchain_core", "llama_index", "pydantic", "anyio", "starlette")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_import_clanker_rag_imports_no_extra() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == []
