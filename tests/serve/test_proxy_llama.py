"""The ``serve`` proxy in front of a real llama.cpp server running Gemma-3-270M.

The fixture starts ``llama-server`` itself (see ``_llama_server.py``); a
missing binary or model fails the tests unless CLANKER_SKIP_LLAMA=1.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._proxy import ProxyServer, make_server
from tests.helpers._llama_server import FEW_SHOT, KB_DOCS, LlamaServer

if TYPE_CHECKING:
    from openai import OpenAI

openai = pytest.importorskip(
    "openai", reason="these tests talk to the proxy with the OpenAI client: pip install 'clanker-rag[test]'"
)

pytestmark = [pytest.mark.llama, pytest.mark.slow]


@pytest.fixture(scope="module")
def llama(llama_server: LlamaServer) -> LlamaServer:
    return llama_server


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    base = KnowledgeBase(chunk_size=None)
    for source, text in KB_DOCS.items():
        base.add_text(text, source)
    return base


@contextmanager
def running(kb: KnowledgeBase, upstream: str, **options: Any) -> Iterator[tuple[ProxyServer, OpenAI]]:
    """A serving proxy and a client of it; both closed on exit (an open keep-alive holds a handler thread)."""
    server = make_server(kb, upstream, **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    try:
        yield server, client
    finally:
        client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_completions_stream_with_a_tool_call(llama: LlamaServer, kb: KnowledgeBase) -> None:
    with running(kb, llama.url, questions=False) as (_, client):
        stream = client.completions.create(
            model="gemma", prompt=FEW_SHOT, stream=True, temperature=0, max_tokens=60,
            stop=["\nQuestion:"],
        )  # fmt: skip
        chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    ext = (chunks[-1].model_extra or {}).get("clanker_rag") or {}
    # Gemma writes the retrieve call; the proxy answers it from the knowledge base and resumes.
    tool_calls = [r for r in ext["retrievals"] if r["kind"] == "tool"]
    assert tool_calls, f"no tool call detected; text was {text!r}"
    assert tool_calls[0]["sources"][0] == "docs/server.md"
    assert ext["injections"] >= 1
    assert "<tool" not in text  # the call is consumed, not shown
    assert text.strip(), "generation resumed after the result block"


def test_chat_injects_for_the_question(llama: LlamaServer, kb: KnowledgeBase) -> None:
    with running(kb, llama.url) as (_, client):
        out = client.chat.completions.create(
            model="gemma", temperature=0, max_tokens=40,
            messages=[{"role": "user", "content": "What port does the clanker server listen on?"}],
        )  # fmt: skip
    ext = (out.model_extra or {})["clanker_rag"]
    assert ext["retrievals"][0]["kind"] == "question"
    assert ext["retrievals"][0]["sources"][0] == "docs/server.md"
    assert ext["injections"] >= 1
    assert out.choices[0].message.content
    assert out.usage is not None and out.usage.prompt_tokens > 0


def slots_busy(url: str) -> bool | None:
    try:
        with urllib.request.urlopen(url + "/slots", timeout=5) as resp:
            slots = json.loads(resp.read())
    except Exception:
        return None
    return any(s.get("is_processing") for s in slots)


def test_client_disconnect_stops_the_generation(llama: LlamaServer, kb: KnowledgeBase) -> None:
    with running(kb, llama.url, questions=False, tools=False) as (server, client):
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=120)
        body = {
            "prompt": "Count: one, two, three,",
            "stream": True,
            "max_tokens": 4000,
            "temperature": 0,
            "ignore_eos": True,
        }
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        got = b""
        while got.count(b"data:") < 5:
            got += resp.read1(4096)
        assert slots_busy(llama.url) in (True, None)
        conn.close()
        # Without the proxy closing its upstream request, 4000 tokens would keep the slot busy for minutes.
        deadline = time.monotonic() + 30
        busy = slots_busy(llama.url)
        while busy and time.monotonic() < deadline:
            time.sleep(0.2)
            busy = slots_busy(llama.url)
        if busy is None:
            # No /slots endpoint: a new request must be served by the single slot right away.
            answer = client.completions.create(model="g", prompt="Hi", max_tokens=2, timeout=30)
            assert answer.choices
        else:
            assert busy is False


# Completion prompts a user sends a base model, each ending in its question or its answer cue.
PROMPTS = (
    "Q: What port does the clanker server listen on?\nA:",
    "Question: What port does the clanker server listen on?\nAnswer:",
    "What port does the clanker server listen on?\n",
    "Q: Which license is clanker released under?\nA:",
    "Q: Which Python version does clanker require?\nA:",
)


def test_completions_with_an_injected_block_answer_on_the_base_model(llama: LlamaServer, kb: KnowledgeBase) -> None:
    # issue 30: the block after "A:" made the base model answer '' five times in seven.
    with running(kb, llama.url, tools=False) as (_, client):
        outs = [client.completions.create(model="g", prompt=p, temperature=0, max_tokens=24) for p in PROMPTS]
    for prompt, out in zip(PROMPTS, outs):
        ext = (out.model_extra or {})["clanker_rag"]
        assert ext["injections"] == 1, prompt
        assert out.choices[0].text.strip(), f"empty answer to {prompt!r}"
    assert "7341" in outs[0].choices[0].text
