"""Searching and saving while the knowledge base changes, on the stdlib speed corpus.

An agent that keeps notes adds a text, then searches, again and again.  Every
add changes N and the average chunk length, so the impacts of the searched
terms are recomputed (exactly) before the search.  This bench times:

- a search with nothing added since the last one (the steady state);
- a search right after each add (add, search, add, search...);
- a save after one small change (refresh of every term, then the write).

    python bench/bench_incremental.py [--rounds 100]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402

from clanker_rag import KnowledgeBase  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    texts = corpus.chunks()
    queries = corpus.queries(texts, 500)
    folder = tempfile.mkdtemp(prefix="bench-incremental-")
    try:
        kb = KnowledgeBase(chunk_size=None)
        kb.add_texts((text, str(i)) for i, text in enumerate(texts))
        kb.save(folder)
        del kb, texts
        kb = KnowledgeBase.load(folder)
        for q in queries[:100]:  # warm the lookup tables
            kb.search(q, 10)
        rounds = queries[100 : 100 + args.rounds]

        start = time.perf_counter()
        for q in rounds:
            kb.search(q, 10)
        steady = (time.perf_counter() - start) / len(rounds)

        spent = 0.0
        for i, q in enumerate(rounds):
            kb.add_text(f"note {i}: while working on it, the agent learned that {q} matters", f"notes/{i}.md")
            start = time.perf_counter()
            kb.search(q, 10)
            spent += time.perf_counter() - start
        after_add = spent / len(rounds)

        kb.add_text(f"one more note {random.Random(1).random()}", "notes/last.md")
        start = time.perf_counter()
        kb._index.refresh()
        refresh = time.perf_counter() - start
        start = time.perf_counter()
        kb.save(folder)
        write = time.perf_counter() - start
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{len(kb)} chunks, {len(rounds)} rounds")
    print(f"search, nothing added in between : {1000 * steady:6.1f} ms")
    print(f"search right after each add      : {1000 * after_add:6.1f} ms")
    print(f"save after one small change      : {refresh + write:6.2f} s (refresh {refresh:.2f} s, write {write:.2f} s)")


if __name__ == "__main__":
    main()
