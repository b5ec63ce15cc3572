"""Latency the ``serve`` proxy adds to each streamed chunk.

A scripted upstream (in this process) streams N chunks, each carrying the
``time.perf_counter()`` at which it was written; a client (in this process)
records when each chunk arrives.  The same stream is read directly from the
upstream and through ``clanker-rag serve`` running as a separate process
(so the proxy does not share this process's GIL).  The per-chunk latency is
arrival minus send time; the figure reported is the median difference
between the two paths.

Target: at most 5 ms added per chunk.

    python bench/bench_proxy.py [--chunks 400] [--interval 0.002] [--runs 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clanker_rag._kb import KnowledgeBase  # noqa: E402
from tests.helpers._fake_upstream import FakeUpstream, Reply  # noqa: E402


def read_stream(port: int, body: dict[str, object]) -> list[float]:
    """Latency (s) of every chunk: arrival time minus the send time it carries."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    latencies = []
    for raw in iter(resp.readline, b""):
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        now = time.perf_counter()
        obj = json.loads(line[6:])
        for m in re.finditer(r"t=(\d+\.\d+);", obj["choices"][0]["text"] if obj.get("choices") else ""):
            latencies.append(now - float(m.group(1)))
    conn.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--interval", type=float, default=0.002, help="seconds between upstream chunks")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    def stamped(path: str, body: dict[str, object]) -> Reply:
        return Reply(["t=0000000000.000000; "] * args.chunks, delay=args.interval, stamp=True)

    with tempfile.TemporaryDirectory() as tmp, FakeUpstream(stamped) as up:
        kb = KnowledgeBase(chunk_size=None)
        kb.add_text("The clanker server listens on port 7341 by default.", "docs/server.md")
        kb.save(tmp)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-m", "clanker_rag", "serve", "--upstream", up.url, "--index", tmp, "--port", "0"],
            stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
            assert m, line
            proxy_port = int(m.group(1))
            up_port = int(up.url.rsplit(":", 1)[1])
            body = {"model": "m", "prompt": "Stream timestamps.", "stream": True}
            direct: list[float] = []
            proxied: list[float] = []
            read_stream(proxy_port, body)  # warm-up
            for _ in range(args.runs):
                direct += read_stream(up_port, body)
                proxied += read_stream(proxy_port, body)
        finally:
            proc.terminate()
            proc.wait(10)
    d50, p50 = statistics.median(direct), statistics.median(proxied)
    d95 = statistics.quantiles(direct, n=20)[-1]
    p95 = statistics.quantiles(proxied, n=20)[-1]
    print(f"{args.runs} runs x {args.chunks} chunks, one every {args.interval * 1e3:.1f} ms, {os.cpu_count()} CPUs")
    print(f"  direct   median {d50 * 1e3:6.3f} ms   p95 {d95 * 1e3:6.3f} ms   ({len(direct)} chunks)")
    print(f"  proxied  median {p50 * 1e3:6.3f} ms   p95 {p95 * 1e3:6.3f} ms   ({len(proxied)} chunks)")
    print(
        f"  added by the proxy: median {(p50 - d50) * 1e3:.3f} ms, p95 {(p95 - d95) * 1e3:.3f} ms per chunk "
        "(target <= 5 ms)"
    )


if __name__ == "__main__":
    main()
