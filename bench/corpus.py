"""The speed corpus of DEVELOPERS.md, generated from the running interpreter.

Every ``.py`` file of the standard library (``sysconfig.get_paths()["stdlib"]``,
``site-packages`` excluded, sorted walk), split on whitespace into 180-word
windows with a 90-word stride; 500 queries of 2-6 lowercase word tokens drawn
from random chunks with ``random.Random(0)``.
"""

from __future__ import annotations

import os
import random
import re
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

WINDOW = 180
STRIDE = 90


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "site-packages")
        for name in sorted(filenames):
            if name.endswith(".py"):
                out.append(Path(dirpath) / name)
    return out


def text_windows(text: str) -> Iterator[str]:
    """One file's words in WINDOW-word windows, STRIDE words apart (none for an empty file)."""
    words = text.split()
    start = 0
    while words:
        yield " ".join(words[start : start + WINDOW])
        if start + WINDOW >= len(words):
            break
        start += STRIDE


def windows(paths: list[Path]) -> list[str]:
    """The files' words in WINDOW-word windows, STRIDE words apart (unreadable files skipped)."""
    out = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out.extend(text_windows(text))
    return out


def chunks() -> list[str]:
    return windows(stdlib_files())


def queries(corpus: Sequence[str], n: int = 500) -> list[str]:
    rng = random.Random(0)
    out = []
    while len(out) < n:
        tokens = re.findall(r"\w+", rng.choice(corpus).lower())
        length = rng.randint(2, 6)
        if len(tokens) < length:
            continue
        start = rng.randrange(len(tokens) - length + 1)
        out.append(" ".join(tokens[start : start + length]))
    return out


if __name__ == "__main__":
    c = chunks()
    print(len(c), "chunks", sum(len(x.split()) for x in c) // 2, "words (approx, overlap halved)")
    print(queries(c)[:10])
