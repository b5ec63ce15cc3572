"""Answers of ``clanker-rag ask`` on documentation no default was decided on, and on our own guide.

Question sets (``--set``):

* ``man``: ``bench/heldout_man_qa.jsonl``, about twelve man pages of this
  machine (gzip, bzip2, zstd, grep, xz, wget, ssh, less, strace, file, find,
  valgrind) rendered with ``man --nh --nj -P cat`` at 80 columns into a cache
  folder (``--cache``) and ingested as ``clanker-rag ingest`` would.  The
  questions were written from the pages alone, before any answering path ran
  on them; nothing is tuned on them.
* ``man2``: ``bench/heldout_man2_qa.jsonl``, 34 questions from eleven more
  pages (timeout, split, sort, diff, xargs, make, sed, tar, ssh-keygen, rsync,
  jq), written the same way (issue 39, run once on the trees before and after).
* ``man3``: ``bench/heldout_man3_qa.jsonl``, 50 questions from eleven more
  pages (dd, cut, nl, shuf, uniq, head, tail, mktemp, touch, du, flock),
  written the same way and checked only for the answers' presence in the
  pages (issue 39, run once on the path before the issue and on today's).
* ``man4``: ``bench/heldout_man4_qa.jsonl``, 50 questions from twelve pages
  (dd, date, du, df, tail, stat, touch, flock, ln, tr, free, column), written
  by a helper from the rendered pages alone, at the same time as ``man3`` and
  without seeing it; seven of its pages are in no other set.
* ``man5``: ``bench/heldout_man5_qa.jsonl``, 50 questions from twelve pages in
  no other set (cp, ls, chmod, env, wc, seq, install, csplit, kill, patch,
  git-commit, unzip), written by a helper from the rendered pages alone,
  before any answering path ran on them; 26 are answered in the lower half
  of their page (exit status, environment, later options).
* ``man6``: ``bench/heldout_man6_qa.jsonl``, 50 questions from twelve pages in
  no other set (mv, rm, tee, truncate, od, watch, ps, zip, git-branch,
  journalctl, apt-get, python3), written by a helper from the rendered pages
  alone, before any answering path ran on them; 29 are answered from the
  lower half of their page (exit status, environment, files, later options).
* How they are used now: ``man`` to ``man4`` are development data (the window
  chooser's weights are fitted on them, ``bench/train_selector.py``);
  ``man5`` chose between candidate changes (validation); ``man6`` was run
  once per tree on the final candidate (test).  A new change needs a new set.
* ``own``: ``bench/answers_qa.jsonl`` (our own guide, both halves) against the
  shipped guide index (``KnowledgeBase.default()``).

Each question goes through :func:`clanker_rag._answer._ask.ask_events` (the
``ask`` path, ``max_tokens=96``), so one script measures any tree that has
that function: run it with ``PYTHONPATH`` naming the tree, against one
running llama.cpp server, alternating trees.  It reports how many answers hold
an accepted answer (``bench/answers_qa.py``'s ``correct``), how many injected
blocks do, and the median seconds per question; ``--out`` keeps every record
(the injected block with it), to compare two trees question by question.

    PYTHONPATH=$PWD python bench/bench_heldout.py --set man --url http://127.0.0.1:8080
    PYTHONPATH=/tmp/old python bench/bench_heldout.py --set own --url http://127.0.0.1:8080 --out old.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Appended, not prepended: PYTHONPATH says which tree's clanker_rag is measured.
sys.path.append(str(ROOT))

from bench.answers_qa import QA, correct  # noqa: E402
from bench.answers_qa import load as load_own  # noqa: E402
from clanker_rag._answer._ask import ask_events  # noqa: E402
from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._stream._controller import InjectEvent, TextEvent  # noqa: E402

# Set -> (questions, man pages they were written from).
MAN_SETS = {
    "man": (
        ROOT / "bench" / "heldout_man_qa.jsonl",
        ("gzip", "bzip2", "zstd", "grep", "xz", "wget", "ssh", "less", "strace", "file", "find", "valgrind"),
    ),
    "man2": (
        ROOT / "bench" / "heldout_man2_qa.jsonl",
        ("timeout", "split", "sort", "diff", "xargs", "make", "sed", "tar", "ssh-keygen", "rsync", "jq"),
    ),
    "man3": (
        ROOT / "bench" / "heldout_man3_qa.jsonl",
        ("dd", "cut", "nl", "shuf", "uniq", "head", "tail", "mktemp", "touch", "du", "flock"),
    ),
    "man4": (
        ROOT / "bench" / "heldout_man4_qa.jsonl",
        ("dd", "date", "du", "df", "tail", "stat", "touch", "flock", "ln", "tr", "free", "column"),
    ),
    "man5": (
        ROOT / "bench" / "heldout_man5_qa.jsonl",
        ("cp", "ls", "chmod", "env", "wc", "seq", "install", "csplit", "kill", "patch", "git-commit", "unzip"),
    ),
    "man6": (
        ROOT / "bench" / "heldout_man6_qa.jsonl",
        ("mv", "rm", "tee", "truncate", "od", "watch", "ps", "zip", "git-branch", "journalctl", "apt-get", "python3"),
    ),
}


def render_pages(cache: Path, name: str = "man") -> Path:
    """The man pages of set ``name`` as plain text (no hyphenation, no justification), in ``cache/NAME``, once."""
    out = cache / name
    if out.is_dir():
        return out
    tmp = cache / f"{name}.part"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MANWIDTH": "80"}
    for page in MAN_SETS[name][1]:
        shown = subprocess.run(["man", "--nh", "--nj", "-P", "cat", page], env=env, capture_output=True, check=True)
        text = subprocess.run(["col", "-bx"], input=shown.stdout, capture_output=True, check=True).stdout
        (tmp / f"{page}.txt").write_bytes(text)
    tmp.rename(out)
    return out


def questions(name: str) -> list[QA]:
    if name == "own":
        return load_own()
    items = [json.loads(line) for line in MAN_SETS[name][0].read_text(encoding="utf-8").splitlines() if line.strip()]
    return [QA(item["id"], item["collection"], item["question"], tuple(item["answers"]), "test") for item in items]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="a running llama.cpp server")
    parser.add_argument("--set", dest="qa_set", default="man", choices=(*MAN_SETS, "own"))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-heldout")
    parser.add_argument("--out", type=Path, help="write every record to this JSON file")
    parser.add_argument(
        "--ids", nargs="+", help="only these questions (e.g. those whose prompt two trees build differently)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every answer")
    args = parser.parse_args()
    if args.qa_set == "own":
        kb = KnowledgeBase.default()
    else:
        kb = KnowledgeBase()
        kb.ingest(render_pages(args.cache, args.qa_set))
    records = []
    for qa in questions(args.qa_set):
        if args.ids and qa.id not in args.ids:
            continue
        started = time.perf_counter()
        blocks, text = [], []
        for ev in ask_events(kb, qa.question, args.url, max_tokens=96):
            if isinstance(ev, InjectEvent):
                blocks.append(ev.block)
            elif isinstance(ev, TextEvent):
                text.append(ev.text)
        answer = "".join(text).strip()
        block = "".join(blocks)
        rec = {
            "id": qa.id,
            "answer": answer,
            "correct": correct(answer, qa),
            "injected": correct(block, qa),
            "seconds": time.perf_counter() - started,
            "block": block,
        }
        records.append(rec)
        if args.verbose:
            mark = "ok " if rec["correct"] else "BAD"
            print(f"{mark} {qa.id:<8} inj={rec['injected']:d} {answer[:100]!r}", flush=True)
    answered = sum(r["correct"] for r in records)
    held = sum(r["injected"] for r in records)
    median = statistics.median(r["seconds"] for r in records)
    print(f"{args.qa_set:<5} n={len(records)} answered={answered} injected={held} median_s={median:.2f}")
    if args.out:
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
