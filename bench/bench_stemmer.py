"""Time ``clanker_rag._text._stemmer.stem`` over a real vocabulary.

Vocabulary: every distinct lowercase word of the Cranfield corpus (if
../shared/datasets/cranfield/corpus.jsonl exists) plus every distinct word
found in the Python standard library sources (identifiers split on
non-letters, so "get_item" gives "get" and "item").  Each word is stemmed
once per round with no caching, which is the caller's cost per new token.

Usage: python bench/bench_stemmer.py [--rounds N] [--max-stdlib-files N]

If the ``snowballstemmer`` package is installed its time is printed too, and
the number of words on which the two disagree (should be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clanker_rag._text._stemmer import stem  # noqa: E402

CRANFIELD = ROOT.parent / "shared" / "datasets" / "cranfield" / "corpus.jsonl"
_WORD = re.compile(r"[a-z']+")
_CHUNK = 1000


def cranfield_words() -> set[str]:
    words: set[str] = set()
    if not CRANFIELD.is_file():
        print(f"(no {CRANFIELD}; skipping Cranfield)")
        return words
    with CRANFIELD.open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            text = f"{doc.get('title', '')} {doc.get('text', '')}".lower()
            words.update(_WORD.findall(text))
    return words


def stdlib_words(max_files: int) -> set[str]:
    words: set[str] = set()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    # Not site-packages: what is installed there changes from machine to
    # machine, and the figures should be comparable between runs.
    paths = [p for p in sorted(stdlib.rglob("*.py")) if "site-packages" not in p.parts]
    for path in paths[:max_files]:
        try:
            text = path.read_text(encoding="utf-8", errors="replace").lower()
        except OSError:
            continue
        words.update(_WORD.findall(text))
    return words


def time_per_word(fn: Callable[[str], str], words: list[str], rounds: int) -> float:
    """Microseconds per word: sum over chunks of each chunk's best time.

    Taking the minimum per small chunk (rather than per whole pass) filters
    out bursts of CPU contention from other processes, which on a shared
    2-core machine otherwise dominate the figure.
    """
    total = 0.0
    for lo in range(0, len(words), _CHUNK):
        chunk = words[lo : lo + _CHUNK]
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for w in chunk:
                fn(w)
            best = min(best, time.perf_counter() - t0)
        total += best
    return total / len(words) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-stdlib-files", type=int, default=100_000)
    args = ap.parse_args()

    cran = cranfield_words()
    std = stdlib_words(args.max_stdlib_files)
    vocab = sorted(cran | std)
    print(f"vocabulary: {len(vocab)} words (cranfield {len(cran)}, stdlib {len(std)})")
    # Wall-clock figures on a shared machine swing with its load; say what it was.
    print("load average: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))

    for name, subset in (("cranfield", sorted(cran)), ("all", vocab)):
        if not subset:
            continue
        us = time_per_word(stem, subset, args.rounds)
        print(f"clanker_rag stem      {name:>9}: {us:6.2f} us/word (best of {args.rounds} per chunk)")

    try:
        import snowballstemmer  # type: ignore[import-untyped]
        from snowballstemmer.english_stemmer import EnglishStemmer  # type: ignore[import-untyped]
    except ImportError:
        print("snowballstemmer not installed; no reference timing")
        return
    # snowballstemmer.stemmer() hands out PyStemmer's C extension when that
    # is installed; the pure-Python class is the fair like-for-like figure.
    fast_ref = snowballstemmer.stemmer("english")
    pure_ref = EnglishStemmer()
    sample = sorted(cran) or vocab[:5000]
    us_ours = time_per_word(stem, sample, args.rounds)
    us_pure = time_per_word(pure_ref.stemWord, sample, args.rounds)
    print(
        f"snowballstemmer pure Python, {len(sample)} words: {us_pure:6.2f} us/word "
        f"(ours {us_ours:.2f}, {us_pure / us_ours:.1f}x faster)"
    )
    us = time_per_word(fast_ref.stemWord, vocab, args.rounds)
    print(f"{type(fast_ref).__module__}.{type(fast_ref).__name__} {'all':>9}: {us:6.2f} us/word")
    # Only words we promise to stem like the reference (a-z and ').
    comparable = [w for w in vocab if w.isascii()]
    diff = [w for w in comparable if stem(w) != pure_ref.stemWord(w)]
    print(f"disagreements with reference: {len(diff)} of {len(comparable)}" + (f" e.g. {diff[:5]}" if diff else ""))


if __name__ == "__main__":
    main()
