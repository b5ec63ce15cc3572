"""One answering path, every way users reach it: ``ask`` in process, ``clanker-rag ask`` as a program, the proxy.

The same questions of ``bench/docs_qa.jsonl`` (a sample: every ``--every``-th
of each collection) answered by the shipped Gemma-3-270M on one llama.cpp
server this script starts on 127.0.0.1, three ways:

* ``in-process``: :func:`clanker_rag._answer._ask.ask_events` (what
  ``bench_docs.py --model`` measures), ``max_tokens=96``;
* ``cli``: ``python -m clanker_rag ask Q --index IDX --base-url URL --no-blocks
  --max-tokens 96`` in a subprocess, over an index folder written by
  ``python -m clanker_rag ingest DOCS --index IDX`` (the acceptance contract);
* ``proxy``: ``clanker-rag serve``'s server (``make_server`` with the upstream
  probed, as the CLI configures it) on 127.0.0.1, asked a chat completion
  (``temperature=0``, ``max_tokens=96``): its base-model path.

Reported: accepted answers per path, and how many answers agree word for word
across the three.

    python bench/bench_paths.py --collections werkzeug clanker --every 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.answers_qa import correct  # noqa: E402
from bench.bench_docs import COLLECTIONS, OWN, fetch, load  # noqa: E402
from clanker_rag._answer._ask import ask_events  # noqa: E402
from clanker_rag._kb import KnowledgeBase  # noqa: E402
from clanker_rag._serve._proxy import make_server  # noqa: E402
from clanker_rag._stream._controller import TextEvent  # noqa: E402

PATHS = ("in-process", "cli", "proxy")


class _Running:
    """A llama.cpp server someone else started."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")


MAX_TOKENS = 96


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "clanker_rag", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)


def _chat(url: str, question: str) -> str:
    body = {
        "model": "gemma",
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": question}],
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        out = json.loads(resp.read())
    return str(out["choices"][0]["message"]["content"] or "").strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=["werkzeug", OWN], choices=COLLECTIONS)
    parser.add_argument("--every", type=int, default=3, help="ask every N-th question of each collection")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clanker-rag-bench-docs")
    parser.add_argument("--url", help="a running llama.cpp server to use instead of starting one")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    from tests.helpers._llama_server import LlamaServer

    items = [item for name in args.collections for item in load([name])[:: args.every]]
    work = Path(tempfile.mkdtemp(prefix="clanker-rag-paths-"))
    indexes: dict[str, Path] = {}
    for name in args.collections:
        docs = ROOT / "docs" if name == OWN else fetch(name, args.cache)
        indexes[name] = work / name
        done = _cli("ingest", str(docs), "--index", str(indexes[name]), "--no-progress")
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
    kbs = {name: KnowledgeBase.load(path) for name, path in indexes.items()}
    counts = dict.fromkeys(PATHS, 0)
    seconds: dict[str, list[float]] = {p: [] for p in PATHS}
    agree = 0
    with contextlib.nullcontext(_Running(args.url)) if args.url else LlamaServer() as llama:
        proxies = {}
        for name, kb in kbs.items():
            server = make_server(kb, llama.url, base_model=None)
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            proxies[name] = server
        try:
            for item in items:
                answers: dict[str, str] = {}
                started = time.perf_counter()
                events = ask_events(kbs[item.collection], item.question, llama.url, max_tokens=MAX_TOKENS)
                answers["in-process"] = "".join(ev.text for ev in events if isinstance(ev, TextEvent)).strip()
                seconds["in-process"].append(time.perf_counter() - started)
                started = time.perf_counter()
                done = _cli(
                    "ask", item.question, "--index", str(indexes[item.collection]), "--base-url", llama.url,
                    "--no-blocks", "--max-tokens", str(MAX_TOKENS),
                )  # fmt: skip
                answers["cli"] = done.stdout.strip() if done.returncode == 0 else f"(exit {done.returncode})"
                seconds["cli"].append(time.perf_counter() - started)
                started = time.perf_counter()
                answers["proxy"] = _chat(proxies[item.collection].url, item.question)
                seconds["proxy"].append(time.perf_counter() - started)
                for path in PATHS:
                    counts[path] += correct(answers[path], item.qa())
                same = len(set(answers.values())) == 1
                agree += same
                if args.verbose:
                    marks = " ".join(f"{p}={'ok' if correct(answers[p], item.qa()) else 'BAD'}" for p in PATHS)
                    print(f"{item.id:<11} {marks} {'same' if same else 'DIFF'} {answers!r}")
        finally:
            for server in proxies.values():
                server.shutdown()
                server.server_close()
    n = len(items)
    for path in PATHS:
        ordered = sorted(seconds[path])
        median = ordered[len(ordered) // 2] if ordered else 0.0
        print(f"{path:<11} {counts[path]:>3}/{n} correct, median {median:.2f} s")
    print(f"answers identical on all three paths: {agree}/{n}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("CLANKER_RAG_SHARED", str(ROOT.parent / "shared"))
    sys.exit(main())
