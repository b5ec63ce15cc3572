"""Makes upgrade_expected.json: what each tests/data/index_v<N> holds and finds, read by the OLD tree.

Run against a tree that still loads the older formats (``git archive 4d29a1d``), never against the
code under test::

    PYTHONPATH=/tmp/oldtree python tests/storage/upgrade_expected.py tests/data > tests/storage/upgrade_expected.json
"""

import json
import sys
from pathlib import Path

from clanker_rag import KnowledgeBase

QUERIES = ["lazy dog", "kappa", "echo w3 pad", "quick brown", "alpha", "echo", "w7 pad", "zeta theta", "fox jumps over"]


def main(data: Path) -> None:
    out = {}
    for version in range(1, 8):
        kb = KnowledgeBase.load(data / f"index_v{version}")
        sources = {s: {"text": kb.source_text(s), "metadata": kb.source_metadata(s)} for s in kb.sources()}
        hits = {q: [[h.source, h.chunk_index, h.start, h.end, h.score] for h in kb.search(q, 10)] for q in QUERIES}
        settings = {"analyzer": kb.analyzer.settings(), "bm25": kb.bm25.settings(), "chunking": kb.chunker.settings()}
        out[version] = {"settings": settings, "sources": sources, "hits": hits}
    json.dump(out, sys.stdout, indent=1, ensure_ascii=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
