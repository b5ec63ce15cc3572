"""``serve --native-tools`` end to end: the official openai client, the proxy, a fake upstream.

The fake upstream streams ``tool_calls`` the way OpenAI-compatible servers do:
the call's id and name first, then its JSON arguments in small fragments, each
chunk written and flushed on its own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from clanker_rag import KnowledgeBase
from clanker_rag._serve._proxy import make_server
from tests.helpers._chat_chunks import CLIENT_TOOL, text_chunks, tool_call_chunks
from tests.helpers._fake_server import Exchange, FakeServer, Handle


class ChunkUpstream:
    """Answers each POST with the next scripted list of chunks, as SSE."""

    def __init__(self, answers: list[list[dict[str, Any]] | dict[str, Any]]) -> None:
        self.answers = answers
        self.server: FakeServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The request bodies, in order."""
        assert self.server is not None
        return [r["body"] for r in self.server.requests]

    def __call__(self, ex: Exchange) -> None:
        chunks = self.answers.pop(0)
        if isinstance(chunks, dict):  # an error answer: {"status": ..., "error": {...}}
            ex.json(chunks["status"], {"error": chunks["error"]})
            return
        ex.stream()
        for chunk in chunks:
            ex.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        ex.write(b"data: [DONE]\n\n")


Upstream = Callable[..., ChunkUpstream]


@pytest.fixture()
def upstream(fake_server: Callable[[Handle], FakeServer]) -> Upstream:
    """``upstream(*answers)``: a fake upstream on loopback answering with ``answers`` in turn."""

    def start(*answers: list[dict[str, Any]] | dict[str, Any]) -> ChunkUpstream:
        fake = ChunkUpstream(list(answers))
        fake.server = fake_server(fake)
        return fake

    return start


@pytest.fixture()
def kb() -> KnowledgeBase:
    kb = KnowledgeBase()
    kb.add_text("The backup job runs at 02:00 UTC every night.\n", "ops/backup.md")
    return kb


@pytest.fixture()
def proxy(kb: KnowledgeBase) -> Iterator[Any]:
    started: list[tuple[Any, threading.Thread, Any]] = []

    def start(upstream: str) -> Any:
        server = make_server(kb, upstream, host="127.0.0.1", port=0, native_tools=True)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=30)
        started.append((server, thread, client))
        return client

    yield start
    for server, thread, client in started:
        client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _retrieve_then_answer(upstream: Upstream) -> ChunkUpstream:
    return upstream(
        tool_call_chunks([("call_7", "retrieve", '{"query": "backup schedule"}')], [1, 2, 3, 5]),
        text_chunks("The backup runs", " at 02:00 UTC [1]."),
    )


def test_streamed_retrieve_call_is_run_by_the_proxy(proxy: Any, upstream: Upstream) -> None:
    up = _retrieve_then_answer(upstream)
    client = proxy(up.url)
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "When is the backup?"}],
        tools=[CLIENT_TOOL],
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The backup runs at 02:00 UTC [1]."
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    extension = chunks[-1].model_extra["clanker_rag"]
    assert extension["retrievals"] == [{"kind": "tool", "query": "backup schedule", "sources": ["ops/backup.md"]}]

    first, second = up.bodies
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather", "retrieve"]
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_7"
    assert "[1] ops/backup.md:1-1\nThe backup job runs at 02:00 UTC" in tool_message["content"]


def test_non_streamed_answer(proxy: Any, upstream: Upstream) -> None:
    up = _retrieve_then_answer(upstream)
    response = proxy(up.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "When is the backup?"}]
    )
    assert response.choices[0].message.content == "The backup runs at 02:00 UTC [1]."
    assert response.choices[0].finish_reason == "stop"
    assert response.model_extra["clanker_rag"]["injections"] == 1
    assert all(body["stream"] is True for body in up.bodies)


def test_client_tool_calls_reach_the_client(proxy: Any, upstream: Upstream) -> None:
    arguments = '{"city": "Oslo"}'
    up = upstream(tool_call_chunks([("call_w", "get_weather", arguments)], [2, 3]))
    client = proxy(up.url)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Weather?"}], tools=[CLIENT_TOOL], stream=True
    )
    chunks = list(stream)
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id == "call_w" and deltas[0].function.name == "get_weather"
    assert "".join(d.function.arguments or "" for d in deltas) == arguments
    assert {d.index for d in deltas} == {0}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert len(up.bodies) == 1


def test_cli_flag_reaches_the_proxy(monkeypatch: pytest.MonkeyPatch, kb: KnowledgeBase, tmp_path: Any) -> None:
    import clanker_rag._serve._proxy as proxy_module
    from clanker_rag import ConfigError
    from clanker_rag._cli._main import main

    seen: dict[str, Any] = {}

    def capture(retriever: Any, upstream: str, **options: Any) -> Any:
        seen.update(options)
        raise ConfigError("captured")  # stop before serving

    monkeypatch.setattr(proxy_module, "make_server", capture)
    kb.save(tmp_path / "idx")
    argv = ["serve", "--upstream", "http://127.0.0.1:9", "--index", str(tmp_path / "idx")]
    assert main([*argv, "--native-tools"]) == 1 and seen["native_tools"] is True
    assert main(argv) == 1 and seen["native_tools"] is False


def test_upstream_errors_reach_the_client_as_openai_errors(proxy: Any, upstream: Upstream) -> None:
    # The first request fails outright; the second fails after a retrieval, before any text was sent.
    refusal = {
        "status": 400,
        "error": {"message": "this model does not support tools", "type": "invalid_request_error"},
    }
    up = upstream(refusal)
    with pytest.raises(openai.BadRequestError, match="does not support tools"):
        proxy(up.url).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    retrieve = tool_call_chunks([("c", "retrieve", '{"query": "backup"}')], [4])
    up = upstream(retrieve, {"status": 500, "error": {"message": "boom", "type": "server_error"}})
    with pytest.raises(openai.APIStatusError) as info:
        proxy(up.url).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502 and len(up.bodies) == 2
