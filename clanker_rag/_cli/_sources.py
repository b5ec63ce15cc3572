"""``clanker-rag sources [GLOB]``: the names of an index's sources, or with ``--json`` their sizes and metadata.

Works on any object with the knowledge base's read methods (``sources``,
``chunks``, ``source_text``, ``source_metadata``): one index or a sharded one.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .._types import KnowledgeBaseLike, glob_matches, has_wildcard
from ._terminal import one_line

__all__ = ["matching", "print_sources", "source_info"]


def matching(names: list[str], pattern: str | None) -> list[str]:
    """``names`` that ``pattern`` selects: a glob if it has a wildcard, else the name itself or a prefix of names."""
    if pattern is None:
        return list(names)
    if has_wildcard(pattern):
        return [n for n in names if glob_matches(n, pattern)]
    return [n for n in names if n == pattern or n.startswith(pattern)]


def line_count(text: str) -> int:
    """Lines as an editor numbers them: a last line without a newline still counts, an empty text has none."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def source_info(kb: KnowledgeBaseLike, name: str) -> dict[str, Any]:
    """One source as ``sources --json`` prints it."""
    text = kb.source_text(name) or ""
    return {
        "source": name,
        "chunks": sum(1 for _ in kb.chunks(name)),
        "lines": line_count(text),
        "chars": len(text),
        "metadata": kb.source_metadata(name) or {},
    }


def print_sources(kb: KnowledgeBaseLike, pattern: str | None, *, as_json: bool, where: str) -> int:
    """Print the sources ``pattern`` selects (one name a line, or a JSON list); the exit code."""
    names = matching(kb.sources(), pattern)
    if as_json:
        print(json.dumps([source_info(kb, name) for name in names], ensure_ascii=False))
    else:
        # Names may hold control characters: escaped, one source a line.
        for name in names:
            print(one_line(name))
    if names:
        return 0
    if pattern is None:
        print(f"clanker-rag: no sources in {where} (add some with: clanker-rag ingest PATH)", file=sys.stderr)
        return 0
    print(f"clanker-rag: no source in {where} matches {pattern!r}", file=sys.stderr)
    return 1
