"""HTTP backends against a real local HTTP server speaking the OpenAI and
llama.cpp streaming protocols (SSE), plus the failure cases."""

from __future__ import annotations

import json
import math
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._exceptions import BackendError, ConfigError
from clanker_rag._kb import KnowledgeBase
from clanker_rag._sse import iter_sse
from clanker_rag._stream._controller import InjectEvent, RagController, RetrieveEvent
from clanker_rag._stream._generate import RETRIEVE_TOOL, ToolCallDeltas, render_tool_call
from clanker_rag.backends import ChatBackend, CompletionsBackend, LlamaCppBackend, Token
from tests.helpers._fake_server import Exchange, FakeServer, Handle

ANSWER_BEFORE = ' Checking. <tool name="retrieve">default port</tool> never seen'
CHECKOUT = Path(__file__).resolve().parents[2]  # the clone the tests run from: install hints name it


def model(prompt: str) -> str:
    """The fake server's 'model': call the tool, then answer from the block."""
    if "<result>" not in prompt:
        return ANSWER_BEFORE
    m = re.search(r"port (\d+)", prompt.rsplit("<result>", 1)[1])
    return f" The port is {m.group(1) if m else 'unknown'}."


def apply_stop(text: str, stop: list[str]) -> tuple[str, str | None]:
    hits = [(text.find(s), s) for s in stop if s in text]
    if not hits:
        return text, None
    at, word = min(hits)
    return text[:at], word


class FakeModelServer:
    """OpenAI completions and chat, and llama.cpp's /completion, streamed as SSE by the ``model`` above."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []  # (path, body) of each POST
        self.cached_prefix = ""  # llama.cpp-style prompt cache (characters play tokens)
        self.url = ""  # set once it is served

    def _sse(self, ex: Exchange, events: list[str], content_type: str = "text/event-stream") -> None:
        ex.stream(content_type)
        for ev in events:
            ex.write(ev.encode())

    def __call__(self, ex: Exchange) -> None:
        body = ex.body
        self.requests.append((ex.path, body))
        path = ex.path
        if path.startswith("/garbage/"):
            return self._sse(ex, ["data: this is not json\n\n"])
        if path.startswith("/html/"):
            return self._sse(ex, ["<html>gateway</html>"], "text/html")
        if path.startswith("/nodata/"):
            return self._sse(ex, ["hello world\n\n"])
        if path.startswith("/fail/"):
            ex.send(503, b'{"error": {"message": "model not loaded"}}')
            return None
        if path.startswith("/slow/"):
            time.sleep(1.5)
            return self._sse(ex, ["data: [DONE]\n\n"])
        if path.startswith("/plainjson/"):
            ex.json(200, {"choices": [{"text": "whole answer", "finish_reason": "stop"}]})
            return None
        if path.endswith("/v1/completions"):
            return self._completions(ex, body)
        if path.endswith("/v1/chat/completions"):
            return self._chat(ex, body)
        if path.endswith("/completion"):
            return self._llama(ex, body)
        ex.json(404, {"error": {"message": f"no route {path}"}})
        return None

    def _completions(self, ex: Exchange, body: dict[str, Any]) -> None:
        text, _ = apply_stop(model(body["prompt"]), body.get("stop", []))
        events = []
        for i in range(0, len(text), 4):
            choice: dict[str, Any] = {"index": 0, "text": text[i : i + 4], "finish_reason": None}
            if body.get("logprobs"):
                choice["logprobs"] = {"tokens": [text[i : i + 4]], "token_logprobs": [-0.25 if i else -3.0]}
            events.append("data: " + json.dumps({"choices": [choice]}) + "\n\n")
        events.append("data: " + json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}) + "\n\n")
        usage = {"prompt_tokens": 40, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 32}}
        events.append("data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n")
        events.append("data: [DONE]\n\n")
        self._sse(ex, events)

    def _chat(self, ex: Exchange, body: dict[str, Any]) -> None:
        user = body["messages"][-1]["content"]
        events = []
        if body.get("tools") and "<result>" not in user:
            deltas = [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "retrieve", "arguments": ""}},
                {"index": 0, "function": {"arguments": '{"que'}},
                {"index": 0, "function": {"arguments": 'ry": "default port"}'}},
            ]
            events.append(
                "data: " + json.dumps({"choices": [{"delta": {"role": "assistant", "content": "Checking."}}]}) + "\n\n"
            )
            for d in deltas:
                events.append(
                    "data: " + json.dumps({"choices": [{"delta": {"tool_calls": [d]}, "finish_reason": None}]}) + "\n\n"
                )
            events.append("data: " + json.dumps({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}) + "\n\n")
        else:
            text = model(user) if "<result>" in user else " Hello there."
            for i in range(0, len(text), 5):
                events.append("data: " + json.dumps({"choices": [{"delta": {"content": text[i : i + 5]}}]}) + "\n\n")
            events.append("data: " + json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]}) + "\n\n")
        events.append("data: [DONE]\n\n")
        self._sse(ex, events)

    def _llama(self, ex: Exchange, body: dict[str, Any]) -> None:
        prompt = body["prompt"]
        cache_n, cached = 0, self.cached_prefix
        if body.get("cache_prompt"):
            while cache_n < min(len(prompt), len(cached)) and prompt[cache_n] == cached[cache_n]:
                cache_n += 1
        text, word = apply_stop(model(prompt), body.get("stop", []))
        self.cached_prefix = prompt + text
        events = []
        for i in range(0, len(text), 3):
            ev: dict[str, Any] = {"content": text[i : i + 3], "stop": False}
            if body.get("n_probs"):
                ev["completion_probabilities"] = [
                    {"id": 1, "token": text[i : i + 3], "logprob": -0.5, "top_logprobs": []}
                ]
            events.append("data: " + json.dumps(ev) + "\n\n")
        final = {
            "content": "",
            "stop": True,
            "stop_type": "word" if word else "eos",
            "stopping_word": word or "",
            "tokens_cached": len(prompt) + len(text),
            "timings": {
                "cache_n": cache_n,
                "prompt_n": len(prompt) - cache_n,
                "prompt_ms": 1.5,
                "predicted_n": len(text),
                "predicted_ms": 3.0,
            },
        }
        events.append("data: " + json.dumps(final) + "\n\n")
        self._sse(ex, events)


@pytest.fixture()
def fake(fake_server: Callable[[Handle], FakeServer]) -> FakeModelServer:
    handler = FakeModelServer()
    handler.url = fake_server(handler).url
    return handler


@pytest.fixture()
def server(fake: FakeModelServer) -> str:
    """The fake model server's base URL."""
    return fake.url


def make_kb() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("The server listens on port 8080 by default.", "docs/server.md")
    kb.add_text("Install with pip.", "docs/install.md")
    return kb


# -- protocol ------------------------------------------------------------------------


def test_sse_parser_handles_multiline_comments_and_unterminated_events() -> None:
    lines = [
        b": keep-alive\n",
        b"data: a\n",
        b"data: b\r\n",
        b"\n",
        b"event: x\n",
        b"data: c\n",
        b"error: boom\n",
        b"data: tail",
    ]
    assert list(iter_sse(iter(lines))) == [("message", "a\nb"), ("error", "boom"), ("x", "c\ntail")]


def test_completions_streams_tokens_with_logprobs_and_usage(server: str, fake: FakeModelServer) -> None:
    backend = CompletionsBackend(server, "m", logprobs=True)
    pieces = list(backend("Q:", ["</tool>"]))
    assert "".join(p.text for p in pieces) == ' Checking. <tool name="retrieve">default port'
    assert pieces[0].logprob == -3.0 and pieces[1].logprob == -0.25
    assert pieces[-1].finish_reason == "stop"
    path, body = fake.requests[-1]
    assert path == "/v1/completions"
    assert body["prompt"] == "Q:" and body["stop"] == ["</tool>"] and body["stream"] is True and body["model"] == "m"
    assert backend.last_stats is not None
    assert backend.last_stats.cached_tokens == 32 and backend.last_stats.prompt_tokens == 40


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_base_url_with_or_without_v1_reaches_the_same_endpoints(
    server: str, suffix: str, fake: FakeModelServer
) -> None:
    fake.requests.clear()
    list(CompletionsBackend(server + suffix, "m")("Q:", []))
    list(ChatBackend(server + suffix, "m")("Q:", []))
    list(LlamaCppBackend(server + suffix)("Q:", []))
    assert [path for path, _ in fake.requests] == ["/v1/completions", "/v1/chat/completions", "/completion"]
    assert CompletionsBackend(server + suffix).base_url == server


def test_llama_completion_reports_stop_word_cache_and_logprobs(server: str, fake: FakeModelServer) -> None:
    backend = LlamaCppBackend(server, n_probs=1)
    pieces = list(backend("Q:", ["</tool>"]))
    assert pieces[-1].finish_reason == "stop" and pieces[-1].stop == "</tool>"
    assert all(p.logprob == -0.5 for p in pieces[:-1])
    body = fake.requests[-1][1]
    assert body["cache_prompt"] is True and body["n_probs"] == 1 and body["stop"] == ["</tool>"]
    list(backend("Q: again", []))
    # "Q:" plus the generated " Checking..." share "Q: " with the new prompt.
    assert backend.last_stats is not None and backend.last_stats.cached_tokens == 3
    assert backend.last_stats.prompt_tokens == len("again")


def test_controller_over_llama_http_resumes_with_the_cache(server: str, fake: FakeModelServer) -> None:
    backend = LlamaCppBackend(server)
    prompt = "Answer with the knowledge base.\nQ: Which port?\nA:"
    events = list(RagController(make_kb()).events(backend, prompt))
    assert [e.query for e in events if isinstance(e, RetrieveEvent)] == ["default port"]
    block = next(e.block for e in events if isinstance(e, InjectEvent))
    prompts = [b["prompt"] for p, b in fake.requests if p == "/completion"]
    assert len(prompts) == 2
    first_out = ' Checking. <tool name="retrieve">default port'
    assert prompts[1] == prompt + first_out + "</tool>" + block
    stats = backend.last_stats
    assert stats is not None
    # Everything the server had seen is reused; only the close tag and block are new.
    assert stats.cached_tokens == len(prompt + first_out)
    assert stats.prompt_tokens == len("</tool>" + block)
    text = "".join(e.text for e in events if hasattr(e, "text"))
    assert text.endswith("The port is 8080.")


def test_chat_backend_turns_native_tool_calls_into_a_retrieval(server: str, fake: FakeModelServer) -> None:
    backend = ChatBackend(server, "m", tools=True, system="Be brief.")
    events = list(RagController(make_kb()).events(backend, "Which port?"))
    assert [e.query for e in events if isinstance(e, RetrieveEvent)] == ["default port"]
    chats = [b for p, b in fake.requests if p == "/v1/chat/completions"]
    assert chats[0]["tools"][0]["function"]["name"] == "retrieve"
    assert chats[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert len(chats) == 2 and "<result>" in chats[1]["messages"][-1]["content"]
    text = "".join(e.text for e in events if hasattr(e, "text"))
    assert text.startswith("Checking.") and text.endswith("The port is 8080.")


def test_async_backend_generation(server: str) -> None:
    import asyncio

    async def run() -> str:
        backend = LlamaCppBackend(server)
        ctl = RagController(make_kb())
        return "".join([p async for p in ctl.astream(backend.agenerate, "Q:")])

    assert asyncio.run(run()).endswith("The port is 8080.")


def test_non_streaming_json_answer_is_accepted(server: str) -> None:
    pieces = list(CompletionsBackend(server + "/plainjson")("x", []))
    assert [p.text for p in pieces] == ["whole answer"] and pieces[0].finish_reason == "stop"


# -- failures --------------------------------------------------------------------------------


def test_server_down_is_a_backend_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BackendError, match="cannot reach"):
        list(LlamaCppBackend(f"http://127.0.0.1:{port}", timeout=2)("x", []))


@pytest.mark.parametrize(
    ("prefix", "message"),
    [("/garbage", "not JSON"), ("/html", "not JSON"), ("/nodata", "no data events"), ("/fail", "HTTP 503")],
)
def test_garbage_answers_are_backend_errors(server: str, prefix: str, message: str) -> None:
    for backend in (
        CompletionsBackend(server + prefix),
        LlamaCppBackend(server + prefix),
        ChatBackend(server + prefix),
    ):
        with pytest.raises(BackendError, match=message):
            list(backend("x", []))


def test_timeout_is_a_backend_error(server: str) -> None:
    with pytest.raises(BackendError, match="timed out"):
        list(LlamaCppBackend(server + "/slow", timeout=0.3)("x", []))


def test_bad_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        LlamaCppBackend("localhost:8080")


# -- tool schema -------------------------------------------------------------------------------


def test_retrieve_tool_schema_shape() -> None:
    fn = RETRIEVE_TOOL["function"]
    assert RETRIEVE_TOOL["type"] == "function" and fn["name"] == "retrieve"
    assert fn["parameters"]["required"] == ["query"]
    assert fn["parameters"]["properties"]["query"]["type"] == "string"


def test_tool_call_deltas_assemble_and_render_safely() -> None:
    acc = ToolCallDeltas()
    acc.add([{"index": 1, "function": {"name": "retrieve", "arguments": '{"query": "b'}}])
    acc.add([{"index": 0, "function": {"name": "retrieve", "arguments": '{"query": "a </tool> x"}'}}])
    acc.add([{"index": 1, "function": {"arguments": '"}'}}, "junk"])
    acc.add("not a list")
    assert acc.render() == '<tool name="retrieve">a &lt;/tool> x</tool><tool name="retrieve">b</tool>'
    assert not acc
    assert render_tool_call("retrieve", "not json") == '<tool name="retrieve">not json</tool>'


def test_token_logprob_values_are_probabilities() -> None:
    # n_probs answers from older servers give probabilities, not log-probs.
    from clanker_rag.backends._openai_http import _llama_logprob

    assert _llama_logprob({"completion_probabilities": [{"probs": [{"tok_str": "a", "prob": 0.5}]}]}) == pytest.approx(
        math.log(0.5)
    )
    assert _llama_logprob({"completion_probabilities": [{"logprob": -2.0}]}) == -2.0
    assert _llama_logprob({}) is None
    assert Token("x").logprob is None


# -- lazy imports and the in-process backends -------------------------------------------------


def test_backends_package_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = (
        "import sys, clanker_rag.backends as b\n"
        "heavy = [m for m in ('torch', 'transformers', 'llama_cpp', 'clanker_rag.backends._openai_http',"
        " 'clanker_rag.backends._transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "b.LlamaCppBackend\n"
        "assert 'clanker_rag.backends._openai_http' in sys.modules\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_llama_cpp_python_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from clanker_rag._exceptions import MissingExtraError
    from clanker_rag.backends import LlamaCppPythonBackend

    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingExtraError, match=re.escape(f"pip install -e '{CHECKOUT}[llama-cpp]'")):
        LlamaCppPythonBackend(model_path="model.gguf")
    with pytest.raises(ConfigError):
        LlamaCppPythonBackend()


def test_llama_cpp_python_stream_is_converted() -> None:
    from clanker_rag.backends import LlamaCppPythonBackend

    class FakeLlama:
        def __init__(self) -> None:
            self.kwargs: dict[str, Any] = {}

        def create_completion(self, prompt: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
            self.kwargs = {"prompt": prompt, **kwargs}
            yield {"choices": [{"text": "Hel", "finish_reason": None, "logprobs": {"token_logprobs": [-0.2]}}]}
            yield {"choices": [{"text": "lo", "finish_reason": None, "logprobs": {"token_logprobs": [-1.5]}}]}
            yield {"choices": [{"text": "", "finish_reason": "stop", "logprobs": None}]}

    llm = FakeLlama()
    backend = LlamaCppPythonBackend(llm, logprobs=True)
    pieces = list(backend("Say hi", ["</tool>"]))
    assert pieces == [Token("Hel", -0.2), Token("lo", -1.5), Token("", None, "stop")]
    assert llm.kwargs["stop"] == ["</tool>"] and llm.kwargs["stream"] is True and llm.kwargs["logprobs"] == 1
    assert backend.last_stats is not None and backend.last_stats.finish_reason == "stop"
