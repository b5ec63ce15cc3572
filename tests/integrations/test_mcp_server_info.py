"""The MCP server names its version in ``initialize`` (issue 45): clients show and log it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP tests need the mcp extra: pip install 'clanker-rag[mcp]'")

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

import clanker_rag
from clanker_rag import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]


def test_initialize_answers_with_the_package_version(tmp_path: Path) -> None:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("a note", "a.md")
    kb.save(tmp_path / "kb")
    path = os.environ.get("PYTHONPATH")
    env = {"PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "clanker_rag", "mcp", "--index", str(tmp_path / "kb")], env=env
    )
    seen = {}

    async def run() -> None:
        with anyio.fail_after(60):
            async with stdio_client(params, errlog=sys.stderr) as (read, write), ClientSession(read, write) as session:
                seen["init"] = await session.initialize()

    anyio.run(run)
    info = seen["init"].server_info
    assert (info.name, info.version) == ("clanker-rag", clanker_rag.__version__)
    assert clanker_rag.__version__  # not the SDK's empty default
