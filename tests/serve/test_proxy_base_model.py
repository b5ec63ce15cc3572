"""``serve`` in front of a base model: chat requests rendered into ``ask``'s few-shot completion prompt.

A scripted upstream stands in for llama.cpp: it serves ``/props`` with an
empty ``chat_template`` (a base model), a template (a chat model), or no such
route (another server).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from clanker_rag._answer._prompts import after_block
from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._proxy import ProxyServer, make_server
from tests.helpers._fake_upstream import FakeUpstream, Reply

openai = pytest.importorskip(
    "openai", reason="the proxy tests drive it with the OpenAI client: pip install 'clanker-rag[test]'"
)

DOCS = {
    "docs/server.md": "The clanker server listens on port 7341 by default. Change it with the --port flag.",
    "docs/license.md": "clanker is released under the MIT license.",
}
QUESTION = "What port does the clanker server listen on?"
BASE = {"chat_template": ""}
# What the base model writes: the answer, then (as base models do) the next question of the pattern.
SAID = [" It listens", " on port 7341.", "\nQuestion:", " what else?"]


@pytest.fixture()
def proxy() -> Iterator[Any]:
    kb = KnowledgeBase(chunk_size=None)
    for source, text in DOCS.items():
        kb.add_text(text, source)
    started: list[tuple[ProxyServer, threading.Thread]] = []
    clients: list[Any] = []

    def run(upstream: str, **options: Any) -> Any:
        server = make_server(kb, upstream, **options)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, thread))
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=30)
        clients.append(client)
        return client

    yield run
    for client in clients:
        client.close()
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def said(path: str, body: dict[str, Any]) -> Reply:
    return Reply(SAID)


def test_chat_to_a_base_model_is_sent_as_the_few_shot_completion(proxy: Any) -> None:
    with FakeUpstream(said, props=BASE) as up:
        client = proxy(up.url, base_model=None)
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
        out = client.chat.completions.create(model="m", messages=messages, max_tokens=40)
    assert [r["path"] for r in up.requests] == ["/props", "/v1/completions"]
    body = up.requests[1]["body"]
    assert "messages" not in body and body["max_tokens"] == 40 and "\n" in body["stop"]
    prompt = body["prompt"]
    assert prompt.startswith("Be brief.\n\n")
    # The question, the passages injected after it, the question restated, the answer label.
    question_at = prompt.rindex(f"Question: {QUESTION}\n\n<context>\n")
    assert "docs/server.md" in prompt[question_at:] and prompt.endswith(after_block(QUESTION))
    # A probed llama.cpp: as in `ask`, the answer may only copy words of the block (and the question).
    assert 'typed ::= "7341"' in body["grammar"] and '"lumen"' not in body["grammar"]
    # The answer ends at its line; the label and the leading space are not shown.
    assert out.choices[0].message.content == "It listens on port 7341."
    assert out.object == "chat.completion"
    assert (out.model_extra or {})["clanker_rag"]["injections"] == 1


def test_streamed_chat_to_a_base_model(proxy: Any) -> None:
    with FakeUpstream(said, props=BASE) as up:
        client = proxy(up.url, base_model=True)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": QUESTION}], stream=True
        )
        chunks = list(stream)
    assert [r["path"] for r in up.requests] == ["/v1/completions"]  # told, not probed
    assert "grammar" not in up.requests[0]["body"]  # not known to be llama.cpp: no grammar field
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "It listens on port 7341."
    assert chunks[-1].object == "chat.completion.chunk"


def test_earlier_turns_are_written_in_the_examples_layout_and_the_server_is_probed_once(proxy: Any) -> None:
    with FakeUpstream(said, props=BASE) as up:
        client = proxy(up.url, base_model=None)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Which license?"}])
        messages = [
            {"role": "user", "content": "Which license?"},
            {"role": "assistant", "content": "The MIT\nlicense."},
            {"role": "user", "content": QUESTION},
        ]
        client.chat.completions.create(model="m", messages=messages)
    paths = [r["path"] for r in up.requests]
    assert paths == ["/props", "/v1/completions", "/v1/completions"]
    prompt = up.requests[2]["body"]["prompt"]
    assert f"Question: Which license?\nAnswer: The MIT license.\n\nQuestion: {QUESTION}\n\n<context>" in prompt


@pytest.mark.parametrize(
    ("props", "messages"),
    [
        ({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}, None),  # a chat model
        (None, None),  # no /props: not llama.cpp, a chat server
        # a base model, but a tool result has no place in the few-shot layout
        (
            BASE,
            [
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": "Looking."},
                {"role": "tool", "content": "port 7341", "tool_call_id": "c"},
            ],
        ),
    ],
)
def test_other_upstreams_and_chats_keep_the_chat_endpoint(
    proxy: Any, props: dict[str, Any] | None, messages: list[dict[str, Any]] | None
) -> None:
    with FakeUpstream(lambda path, body: Reply(["Port 7341."]), props=props) as up:
        client = proxy(up.url, base_model=None)
        out = client.chat.completions.create(model="m", messages=messages or [{"role": "user", "content": QUESTION}])
    paths = [r["path"] for r in up.requests]
    assert paths[-1] == "/v1/chat/completions" and "/v1/completions" not in paths
    assert out.choices[0].message.content == "Port 7341."


def test_the_default_config_never_probes(proxy: Any) -> None:
    with FakeUpstream(lambda path, body: Reply(["Port 7341."]), props=BASE) as up:
        proxy(up.url).chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
    assert [r["path"] for r in up.requests] == ["/v1/chat/completions"]


def test_serve_detects_base_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import clanker_rag._serve._proxy as proxy_module
    from clanker_rag import ConfigError
    from clanker_rag._cli._main import main

    seen: dict[str, Any] = {}

    def capture(retriever: Any, upstream: str, **options: Any) -> Any:
        seen.update(options)
        raise ConfigError("captured")  # stop before serving

    monkeypatch.setattr(proxy_module, "make_server", capture)
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text(DOCS["docs/server.md"], "docs/server.md")
    kb.save(tmp_path / "idx")
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--index", str(tmp_path / "idx")]) == 1
    assert "base_model" in seen and seen["base_model"] is None


@pytest.mark.parametrize(
    ("asked", "sent"),
    [
        ({}, {"temperature": 0.0, "max_tokens": 512}),  # unset: greedy and bounded, as `ask` asks
        ({"temperature": 0.7, "max_tokens": 30}, {"temperature": 0.7, "max_tokens": 30}),  # the client's own
        ({"max_completion_tokens": 25}, {"temperature": 0.0, "max_tokens": 25}),  # chat's newer length field
    ],
)
def test_a_base_model_answers_greedily_within_a_limit_unless_the_client_says_otherwise(
    proxy: Any, asked: dict[str, Any], sent: dict[str, Any]
) -> None:
    with FakeUpstream(said, props=BASE) as up:
        client = proxy(up.url, base_model=None)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}], **asked)
    body = up.requests[1]["body"]
    assert {key: body.get(key) for key in sent} == sent
    assert "max_completion_tokens" not in body
