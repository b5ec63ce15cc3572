"""Requests answered through ``--native-tools`` are traced like the others: each retrieval and tool message.

The proxy runs the ``retrieve`` tool round itself; the trace keeps each
retrieval's query, passages with scores and timing, the ``tool`` message
exactly as sent upstream, and where in the answer it went.
"""

from __future__ import annotations

from typing import Any

from tests.helpers._chat_chunks import text_chunks, tool_call_chunks
from tests.helpers._web_site import native_site


def test_each_retrieve_call_of_a_native_round_is_traced_with_its_tool_message() -> None:
    answers = (
        tool_call_chunks([("call_1", "retrieve", '{"query": "gateway port"}')], [3, 5], text="Checking. "),
        tool_call_chunks([("call_2", "retrieve", '{"query": "licence of the library"}')], [4]),
        text_chunks("Port 7341 [1]", ", MIT licence [1]."),
    )
    with native_site(*answers) as (site, upstream):
        answer = site.chat("Which port and which licence?")
        (rec,) = site.finished_records()
        bodies: list[dict[str, Any]] = [r["body"] for r in upstream.requests]
    assert answer["choices"][0]["message"]["content"] == "Checking. Port 7341 [1], MIT licence [1]."
    assert rec["status"] == "done" and rec["http_status"] == 200
    assert rec["text"] == "Checking. Port 7341 [1], MIT licence [1]."
    first, second = rec["injections"]
    assert [first["trigger"], second["trigger"]] == ["tool", "tool"]
    assert [first["query"], second["query"]] == ["gateway port", "licence of the library"]
    assert first["passages"][0]["source"] == "docs/ports.md" and first["passages"][0]["score"] > 0
    assert second["passages"][0]["source"] == "docs/licence.md" and second["passages"][0]["score"] > 0
    assert "7341" in first["block"] and "MIT" in second["block"]
    # The blocks are the tool messages exactly as the upstream received them.
    assert len(bodies) == 3
    assert bodies[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": first["block"]}
    assert bodies[2]["messages"][-1] == {"role": "tool", "tool_call_id": "call_2", "content": second["block"]}
    for inj in (first, second):
        assert inj["retrieval_ms"] is not None and inj["retrieval_ms"] >= 0
    # Both tool messages went in after "Checking. "; the answer's text resumed after the second.
    assert first["offset"] == second["offset"] == len("Checking. ")
    assert second["first_token_ms"] is not None
    assert second["after"] == "Port 7341 [1], MIT licence [1]."
