"""The answering path on the real llama.cpp server and Gemma-3-270M, over documents written for these tests.

The documents are about a made-up tool, so the model cannot know their facts:
an answer that states one copied it from the injected window.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from clanker_rag._answer._ask import ask_events, probe_server
from clanker_rag._cli._main import main
from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._controller import InjectEvent, TextEvent
from tests.helpers._llama_server import LlamaServer

pytestmark = [pytest.mark.llama, pytest.mark.slow]

DOCS = {
    "docs/server.md": (
        "# Server\n\nThe quillo server is started with `quillo serve` and reads quillo.toml.\n"
        "It listens on port 4817 by default; pass --port to change it.\n"
        "Requests are logged at INFO level. Stop it with Ctrl-C.\n"
    ),
    "docs/cache.md": (
        "# Cache\n\nThe cache lives in ~/.quillo/cache and is rebuilt on demand.\n"
        "Entries expire after 93 minutes unless --keep is given.\n"
        "A damaged cache file raises QuilloCacheError, which names the file.\n"
    ),
    "docs/workers.md": (
        "# Workers\n\nWorkers read the input files in parallel.\n"
        "The pool starts 6 workers unless --workers says otherwise.\n"
    ),
}
QUESTIONS = {
    "Which port does the quillo server listen on by default?": "4817",
    "After how many minutes do quillo cache entries expire?": "93",
    "Which error does quillo raise for a damaged cache file?": "QuilloCacheError",
}


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    for source, text in DOCS.items():
        kb.add_text(text, source)
    return kb


def test_the_shipped_model_is_detected_as_a_base_model(llama_server: LlamaServer) -> None:
    info = probe_server(llama_server.url)
    assert info.llama_cpp and info.base_model


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_the_answer_copies_the_fact_from_the_injected_window(
    llama_server: LlamaServer, kb: KnowledgeBase, question: str
) -> None:
    events = list(ask_events(kb, question, llama_server.url, max_tokens=48))
    [block] = [ev for ev in events if isinstance(ev, InjectEvent)]
    answer = "".join(ev.text for ev in events if isinstance(ev, TextEvent)).strip()
    assert QUESTIONS[question] in block.block
    # One line, and under the copying grammar every word is one of the window's (maybe without its punctuation).
    assert answer and "\n" not in answer
    shown = set(block.passages[0].text.split())
    assert all(word in shown or any(w.startswith(word) for w in shown) for word in answer.split()), answer
    assert QUESTIONS[question] in answer, answer


def test_ask_prints_only_the_answer(llama_server: LlamaServer, kb: KnowledgeBase, tmp_path: Path) -> None:
    index = tmp_path / "kb"
    kb.save(index)
    out, err = io.StringIO(), io.StringIO()
    question = "How many workers does the quillo pool start?"
    with redirect_stdout(out), redirect_stderr(err):
        code = main(
            ["ask", question, "--index", str(index), "--base-url", llama_server.url, "--no-blocks", "--color", "never"]
        )
    assert code == 0, err.getvalue()
    text = out.getvalue()
    assert "<context>" not in text and "Answer:" not in text and "\n" not in text.strip()
    assert "6" in text.split()  # the fact from docs/workers.md
