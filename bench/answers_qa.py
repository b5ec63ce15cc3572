"""The answer-accuracy QA set (``bench/answers_qa.jsonl``): loading, matching, checks.

Each line is one question about clanker-rag answered in ``docs/``::

    {"id": "q01", "doc": "docs/cli.md", "question": "...", "answers": ["8765"], "split": "tune"}

``answers`` are the accepted answer strings; an answer is correct when its
normalised text contains one of them as a whole token run (``8765`` matches
"port 8765." but not "87650").  ``split`` halves the set: changes are tuned
on ``tune`` only and ``test`` is held out, so the figures on ``test`` say
whether a change generalises.

    python bench/answers_qa.py            # check every answer against its doc
    python bench/answers_qa.py --oracle   # is the answer in the top-k passages?
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QA_PATH = Path(__file__).resolve().parent / "answers_qa.jsonl"

_DROP_RE = re.compile(r"[`*\"\u201c\u201d\u2018\u2019]")
_SECONDS_RE = re.compile(r"(\d)\s*(?:seconds?|secs?)\b")
_UNIT_RE = re.compile(r"(\d)\s+(?=(?:s|ms|mib|mb|kib|kb|gib|gb|k|m|g)\b)")
_WS_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class QA:
    id: str
    doc: str
    question: str
    answers: tuple[str, ...]
    split: str


def load(path: Path = QA_PATH, split: str | None = None) -> list[QA]:
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            items.append(QA(obj["id"], obj["doc"], obj["question"], tuple(obj["answers"]), obj["split"]))
    return [qa for qa in items if split in (None, "all", qa.split)]


def normalise(text: str) -> str:
    """Lower case, no markdown quoting, one space, units written one way ("10 seconds" -> "10s")."""
    text = _DROP_RE.sub("", text.lower())
    text = _SECONDS_RE.sub(r"\1s", text)
    text = _UNIT_RE.sub(r"\1", text)
    return _WS_RE.sub(" ", text).strip()


def contains(text: str, answer: str) -> bool:
    """``answer`` occurs in ``text`` (both normalised) not glued to letters or digits."""
    needle = normalise(answer)
    if not needle:
        return False
    head = r"(?<![a-z0-9])" if needle[0].isalnum() else ""
    tail = r"(?![a-z0-9])" if needle[-1].isalnum() else ""
    return re.search(head + re.escape(needle) + tail, normalise(text)) is not None


def correct(text: str, qa: QA) -> bool:
    return any(contains(text, answer) for answer in qa.answers)


def problems(items: list[QA], root: Path = ROOT) -> list[str]:
    """Every way the QA set disagrees with the docs (empty when it is sound)."""
    out = []
    seen: set[str] = set()
    for qa in items:
        if qa.id in seen:
            out.append(f"{qa.id}: duplicate id")
        seen.add(qa.id)
        if qa.split not in ("tune", "test"):
            out.append(f"{qa.id}: split {qa.split!r} is not tune or test")
        path = root / qa.doc
        if not path.is_file():
            out.append(f"{qa.id}: {qa.doc} does not exist")
            continue
        text = path.read_text(encoding="utf-8")
        if not qa.answers:
            out.append(f"{qa.id}: no accepted answers")
        for answer in qa.answers:
            if not contains(text, answer):
                out.append(f"{qa.id}: {answer!r} is not in {qa.doc}")
            if contains(qa.question, answer):
                out.append(f"{qa.id}: {answer!r} is given away by the question")
    return out


def oracle(items: list[QA], k_values: tuple[int, ...] = (1, 2, 3, 4)) -> dict[int, int]:
    """How many questions have an accepted answer in the top-k passages (question as query)."""
    sys.path.insert(0, str(ROOT))
    from clanker_rag import KnowledgeBase

    kb = KnowledgeBase.default()
    found = dict.fromkeys(k_values, 0)
    for qa in items:
        hits = kb.search(qa.question, max(k_values))
        for k in k_values:
            if any(correct(hit.text, qa) for hit in hits[:k]):
                found[k] += 1
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oracle", action="store_true", help="retrieval-only check: answer in the top-k passages")
    parser.add_argument("--split", default="all", choices=("all", "tune", "test"))
    args = parser.parse_args()
    items = load(split=args.split)
    bad = problems(items)
    for line in bad:
        print(line)
    print(f"{len(items)} questions, {len(bad)} problems")
    if args.oracle:
        for k, n in oracle(items).items():
            print(f"answer in top {k}: {n}/{len(items)} ({n / len(items):.0%})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
