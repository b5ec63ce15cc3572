"""Ingest time and peak memory of one big text file, against its size.

Run: ``python bench/bench_bigfile.py [--sizes 1 2 4 8 16 32 64 100] [--split-mb 8] [--jobs N]``

For each size, a generated prose file of that many MB is ingested by the
command a user would run, in a fresh process::

    clanker-rag ingest DIR --index IDX --no-progress --max-file-size BYTES

and the wall time, the time per MB and the process's peak RSS are printed.
Time per MB stays flat when ingest is linear in a file's size (it once grew
with the square: a line counter restarted at every overlapping window).
Then the same ``--split-mb`` MB of text is ingested once as one file and
once split at line ends over 8 files; the ratio is the figure the issue's
contract bounds (one file at most 2.5x the time of 8).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20


def prose(n_bytes: int, seed: int = 1) -> str:
    """About ``n_bytes`` of ASCII prose: sentences on lines, blank lines between paragraphs."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10))) for _ in range(8000)]
    vocab += [f"{w}{i}" for i, w in enumerate(vocab[:500])]  # some identifiers with digits
    paragraphs: list[str] = []
    size = 0
    while size < n_bytes:
        lines = []
        for _ in range(rng.randint(2, 12)):
            words = rng.choices(vocab, k=rng.randint(6, 16))
            lines.append(" ".join(words).capitalize() + ".")
        paragraph = "\n".join(lines)
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs)[:n_bytes]


def split_lines(text: str, parts: int) -> list[str]:
    """``text`` cut into ``parts`` pieces of about equal size, each at a line end."""
    out, start = [], 0
    for i in range(1, parts):
        cut = text.find("\n", len(text) * i // parts)
        cut = len(text) if cut < 0 else cut + 1
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def ingest(folder: Path, max_file_size: int, jobs: int | None) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one ``clanker-rag ingest`` of ``folder`` into a new index."""
    index = folder.parent / f"{folder.name}-index"
    shutil.rmtree(index, ignore_errors=True)
    cmd = [sys.executable, "-m", "clanker_rag", "ingest", str(folder), "--index", str(index), "--no-progress"]
    cmd += ["--max-file-size", str(max_file_size)]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"ingest failed ({proc.returncode}): {err.decode(errors='replace')}")
    shutil.rmtree(index, ignore_errors=True)
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    rss = usage.ru_maxrss / (MB if sys.platform == "darwin" else 1024)
    return seconds, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=[1, 2, 4, 8, 16], help="file sizes in MB")
    parser.add_argument("--split-mb", type=float, default=8, help="size of the one-file against 8-files comparison")
    parser.add_argument("--jobs", type=int, default=None, help="passed to ingest as --jobs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bigfile-") as tmp:
        base = Path(tmp)
        print(f"{'MB':>6} {'seconds':>8} {'s/MB':>6} {'peak RSS MB':>12}")
        for mb in args.sizes:
            n = int(mb * MB)
            folder = base / f"one-{mb:g}"
            folder.mkdir()
            (folder / "big.txt").write_text(prose(n), encoding="ascii")
            seconds, rss = ingest(folder, n + 1, args.jobs)
            print(f"{mb:6g} {seconds:8.2f} {seconds / mb:6.2f} {rss:12.0f}", flush=True)
            shutil.rmtree(folder)

        n = int(args.split_mb * MB)
        text = prose(n, seed=2)
        one, eight = base / "split-one", base / "split-eight"
        one.mkdir()
        eight.mkdir()
        (one / "all.txt").write_text(text, encoding="ascii")
        for i, part in enumerate(split_lines(text, 8)):
            (eight / f"part{i}.txt").write_text(part, encoding="ascii")
        t_eight, _ = ingest(eight, n + 1, args.jobs)
        t_one, _ = ingest(one, n + 1, args.jobs)
        print(
            f"{args.split_mb:g} MB as 1 file: {t_one:.2f} s; as 8 files: {t_eight:.2f} s; "
            f"ratio {t_one / t_eight:.2f} (contract: <= 2.5)"
        )


if __name__ == "__main__":
    main()
