"""The proxy searches a user's whole question: dotted names and abbreviations do not cut it (issue 45)."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._handler import restated_question
from clanker_rag._serve._proxy import make_server
from tests.helpers._fake_upstream import FakeUpstream, Reply


@pytest.mark.parametrize(
    ("content", "question"),
    [
        ("What does json.tool do?", "What does json.tool do?"),
        (
            "I use Python 3.10.2. How do I call os.path.join on Windows? Thanks.",
            "How do I call os.path.join on Windows?",
        ),
        ("Why does e.g. the parser fail?", "Why does e.g. the parser fail?"),
    ],
)
def test_the_chat_question_is_retrieved_for_whole(content: str, question: str) -> None:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("json.tool pretty-prints JSON; os.path.join joins paths; the parser fails on tabs.", "docs/a.md")
    with FakeUpstream(lambda path, body: Reply(["Fine."])) as up:
        server = make_server(kb, up.url, port=0)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
            body = {"model": "m", "messages": [{"role": "user", "content": content}]}
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            conn.close()
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)
    assert [r["query"] for r in answer["clanker_rag"]["retrievals"]] == [question]


@pytest.mark.parametrize(
    ("prompt", "tail"),
    [
        # A question wrapped over lines: the block goes before all of it, not between its lines.
        ("Notes.\nQ: How do I call\nos.path.join on Windows?\nA:", "Q: How do I call\nos.path.join on Windows?\nA:"),
        ("Context: json.tool.\nQ: What does json.tool do?\nA:", "Q: What does json.tool do?\nA:"),
        ("Q: Why does e.g. the\nparser fail?\nA: ", "Q: Why does e.g. the\nparser fail?\nA: "),
        ("x" * 700 + " Why?\nA:", ""),  # the question's line is longer than a restated tail may be
    ],
)
def test_the_restated_question_is_the_whole_question_s_lines(prompt: str, tail: str) -> None:
    assert restated_question(prompt) == tail
