"""Run ``clanker-rag serve`` in a subprocess, ask it one completion, stop it with Ctrl-C.

Also :func:`default_sigint`, for every test that stops a subprocess with SIGINT.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]


def default_sigint() -> None:
    """``preexec_fn`` for a subprocess a test stops with SIGINT: the child takes Ctrl-C as in a terminal.

    A run in the background (``scripts/test &``, ``nohup``, a CI step ending in ``&``) starts
    with SIGINT ignored, and a child inherits that (Python then installs no KeyboardInterrupt
    handler): a ``serve`` would never stop.  Only the child's disposition changes, never pytest's.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Served(NamedTuple):
    banner: str  # the "serving ..." line
    answer: dict[str, Any]  # the completion's JSON body
    code: int  # exit code after SIGINT
    rest: str  # what it printed on stderr after the banner


def serve_and_ask(args: list[str], prompt: str, timeout: float = 60) -> Served:
    """Start ``clanker-rag serve ARGS --port 0``, post ``prompt`` to /v1/completions, then SIGINT it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "clanker_rag", "serve", *args, "--port", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint)
    assert proc.stderr is not None
    with proc.stderr:  # closed however the test ends: a pipe left open is a ResourceWarning in a later test
        try:
            banner = proc.stderr.readline()
            match = re.search(r"serving (http://127\.0\.0\.1:\d+)/v1", banner)
            assert match, banner
            req = urllib.request.Request(
                match.group(1) + "/v1/completions",
                data=json.dumps({"prompt": prompt}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                answer = json.loads(resp.read())
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        rest = proc.stderr.read()
    return Served(banner, answer, code, rest)
