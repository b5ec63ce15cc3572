"""``clanker-rag demo`` for real: llama.cpp + Gemma-3-270M over the shipped knowledge base."""

from __future__ import annotations

import io
import os
import re
import socket

import pytest

from clanker_rag._cli._demo import run_demo
from clanker_rag._kb import KnowledgeBase

pytestmark = [pytest.mark.llama, pytest.mark.slow]


def test_demo_runs_the_whole_loop_and_stops_the_server() -> None:
    if os.environ.get("CLANKER_SKIP_LLAMA") == "1":
        pytest.skip("CLANKER_SKIP_LLAMA=1")
    out, err = io.StringIO(), io.StringIO()
    code = run_demo(KnowledgeBase.default(), out=out, err=err, color="never")
    progress = err.getvalue()
    assert code == 0, progress
    assert "model ready" in progress and "server ready" in progress
    # The model called retrieve; the block came from the shipped guide.
    assert re.search(r"\[retrieved \d+ passages for '.+'", progress), progress
    assert re.search(r"<(context|result)>\n\[1\] docs/", progress), progress
    summary = re.search(r"(\d+) retrievals, (\d+) injected blocks", progress)
    assert summary and int(summary.group(2)) >= 1
    assert out.getvalue().strip(), "an answer was streamed after the block"
    # The default question is answered from the guide (docs/proxy.md), on one line: the answer names the
    # proxy's own default port and no other port (an upstream's, such as Ollama's 11434, would be wrong).
    answer = out.getvalue().strip()
    assert len(answer.splitlines()) == 1, answer
    assert re.findall(r"\d{4,5}", answer) == ["8765"], answer
    assert re.search(r"\bport\b", answer, re.IGNORECASE), answer
    assert "stopping the llama.cpp server" in progress
    # A run that went well leaves no server log in the temporary folder.
    log = re.search(r"\(log: (\S+)\)", progress)
    assert log and not os.path.exists(log.group(1)), progress
    port = int(re.search(r"server on 127\.0\.0\.1:(\d+)", progress).group(1))  # type: ignore[union-attr]
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
