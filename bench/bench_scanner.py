"""Scanner speed: microseconds per piece over a 1M-piece stream, 1% inside tags.

Target: median <= 1 us per piece.  Pieces look like model tokens (1-6
characters, some with "<" that is not a tag); every ~1000 pieces a retrieve
call arrives split over ~10 pieces, so about 1% of the pieces are inside tags.

    python bench/bench_scanner.py [--pieces 1000000]

Prints the median and p99 of per-piece timings (each feed timed alone, with
the timer's own cost measured and subtracted), and the mean from the total.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clanker_rag._stream._scanner import TagScanner

WORDS = [" the", " model", " writes", " text", ",", ".", " a", " <", "b", " x<y", " token", "\n", " cache", " is"]
CALL = ["<", "tool", " name", '="', "retrieve", '">', "kv cache", " reuse", "</", "tool>"]


def make_stream(n: int, seed: int = 7) -> tuple[list[str], int]:
    rnd = random.Random(seed)
    pieces: list[str] = []
    in_tag = 0
    while len(pieces) < n:
        if rnd.random() < 0.001:
            pieces.extend(CALL)
            in_tag += len(CALL)
        else:
            pieces.append(rnd.choice(WORDS))
    return pieces[:n], in_tag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pieces", type=int, default=1_000_000)
    args = parser.parse_args()
    pieces, in_tag = make_stream(args.pieces)

    clock = time.perf_counter_ns
    overhead = statistics.median(-(clock() - clock()) for _ in range(200_000))

    scanner = TagScanner()
    feed = scanner.feed
    timings = []
    calls = 0
    for piece in pieces:
        t0 = clock()
        _, events = feed(piece)
        timings.append(clock() - t0)
        calls += len(events)
    timings.sort()

    scanner = TagScanner()
    feed = scanner.feed
    t0 = clock()
    for piece in pieces:
        feed(piece)
    total = clock() - t0

    n = len(pieces)
    median = max(timings[n // 2] - overhead, 0) / 1000
    p99 = max(timings[int(n * 0.99)] - overhead, 0) / 1000
    print(f"pieces: {n:,}  inside tags: {in_tag / n:.2%}  calls found: {calls:,}")
    print(f"timer overhead: {overhead / 1000:.3f} us (subtracted)")
    print(f"median per piece: {median:.3f} us   p99: {p99:.3f} us   (target: median <= 1 us)")
    print(f"mean per piece from total time: {total / n / 1000:.3f} us")


if __name__ == "__main__":
    main()
