"""Rebuild the shipped knowledge base ``data/kb`` from the user guide in ``docs/``.

    python data/build_kb.py            # rebuild and save data/kb
    python data/build_kb.py --check    # exit 1 if data/kb is stale

The build is deterministic (no paths of this machine, no mtimes), so the test
suite can rebuild it in memory and compare it with the committed index.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clanker_rag import KnowledgeBase  # noqa: E402
from clanker_rag._ingest._readers import parse_text  # noqa: E402

DOCS = ROOT / "docs"
KB = ROOT / "data" / "kb"
CHUNK_SIZE = 180


def build() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=CHUNK_SIZE, stride=CHUNK_SIZE // 2)
    for path in sorted(DOCS.glob("*.md")):
        raw = path.read_bytes()
        text, sections = parse_text(raw.decode("utf-8"), "markdown", budget=CHUNK_SIZE)
        source = f"docs/{path.name}"
        meta = {"path": source, "format": "markdown", "sha256": hashlib.sha256(raw).hexdigest()}
        kb.add_text(text, source, meta, sections=sections)
    return kb


def fingerprints(kb: KnowledgeBase) -> dict[str, str]:
    """Each source's text and metadata, hashed: what a rebuild must reproduce (read through the public API)."""
    out = {}
    for name in kb.sources():
        record = json.dumps([kb.source_text(name), kb.source_metadata(name)], sort_keys=True)
        out[name] = hashlib.sha256(record.encode("utf-8")).hexdigest()
    return out


def main() -> int:
    fresh = build()
    if "--check" in sys.argv:
        shipped = KnowledgeBase.load(KB)
        if fingerprints(shipped) != fingerprints(fresh):
            print("data/kb is stale: run python data/build_kb.py", file=sys.stderr)
            return 1
        print("data/kb is up to date")
        return 0
    fresh.save(KB, overwrite=True)  # a rebuild replaces the shipped index on purpose
    print(f"saved {KB}: {len(fresh.sources())} sources, {len(fresh)} chunks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
