"""``clanker-rag serve`` and its web options, run as a command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers._fake_upstream import FakeUpstream, Reply
from tests.helpers._serve import ROOT, default_sigint
from tests.helpers._web_site import answer, knowledge


@contextmanager
def serving(args: list[str], banner_pattern: str) -> Iterator[tuple[str, str]]:
    """``clanker-rag serve ARGS --port 0`` until the block ends (then Ctrl-C); yields (base URL, banner)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CLANKER_RAG_BASE_URL", "CLANKER_RAG_TOKEN")}
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "clanker_rag", "serve", *args, "--port", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint)
    assert proc.stderr is not None
    with proc.stderr:
        try:
            banner = proc.stderr.readline()
            match = re.search(banner_pattern, banner)
            assert match, banner
            yield match.group(1), banner
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                assert proc.wait(30) == 130
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def test_serve_without_an_upstream_serves_the_pages_for_browsing(tmp_path: Path) -> None:
    knowledge().save(tmp_path / "kb")
    with serving(["--index", str(tmp_path / "kb")], r"browsing at (http://127\.0\.0\.1:\d+)/ \(no upstream\)") as (
        url,
        _,
    ):
        with urllib.request.urlopen(url + "/", timeout=30) as resp:
            assert b'<script src="/clanker-rag/static/search.js"' in resp.read()
        with urllib.request.urlopen(url + "/clanker-rag/search?q=gateway", timeout=30) as resp:
            assert json.loads(resp.read())["hits"][0]["source"] == "docs/ports.md"


def test_serve_takes_base_url_as_its_upstream_and_writes_the_trace_file(tmp_path: Path) -> None:
    knowledge().save(tmp_path / "kb")
    trace = tmp_path / "trace.jsonl"
    args = ["--index", str(tmp_path / "kb"), "--trace", str(trace), "--trace-size", "5"]
    pattern = r"serving (http://127\.0\.0\.1:\d+)/v1"
    with (
        FakeUpstream(lambda path, body: Reply(answer(" 7341."))) as up,
        serving([*args, "--base-url", up.url], pattern) as (url, banner),
    ):
        assert f"serving {url}/v1 -> {up.url} (pages: / /trace) with " in banner
        req = urllib.request.Request(
            url + "/v1/completions",
            data=json.dumps({"prompt": "Which port does the gateway use?\nA:"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.loads(resp.read())["choices"][0]["text"] == " 7341."
        # The record is written as the request's thread finishes, just after the answer went out.
        deadline = time.monotonic() + 10
        while not trace.exists() or not trace.read_text(encoding="utf-8").endswith("\n"):
            assert time.monotonic() < deadline, "no trace line within 10 s"
            time.sleep(0.02)
    (record,) = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert record["kind"] == "completions" and record["status"] == "done"
    assert record["injections"][0]["passages"][0]["source"] == "docs/ports.md"
