"""The proxy's answer to each failure of the one HTTP client (``upstream_error``), and the
upstream side against a loopback server without the OpenAI client in between."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import pytest

from clanker_rag._exceptions import ServerAnswerError, ServerStatusError, ServerTimeoutError, ServerUnreachableError
from clanker_rag._serve._upstream import Upstream, UpstreamError, UpstreamTurn, event_stream, upstream_error
from clanker_rag._urls import parse_base_url
from tests.helpers._fake_server import Exchange, FakeServer, Handle

URL = "http://127.0.0.1:8080/v1/completions"


@pytest.mark.parametrize(
    ("exc", "status", "err_type"),
    [
        (ServerUnreachableError(f"cannot reach upstream {URL}: refused", URL), 502, "upstream_unreachable"),
        (ServerTimeoutError(f"upstream {URL} timed out after 3 s", URL), 504, "upstream_timeout"),
        (ServerAnswerError(f"connection to upstream {URL} broke: reset", URL), 502, "upstream_error"),
        (ServerStatusError("HTTP 500", URL, 500, b"segfault in kernel"), 502, "upstream_error"),
        (ServerStatusError("HTTP 503", URL, 503, b"loading model"), 503, "upstream_error"),
        (ServerStatusError("HTTP 413", URL, 413, b"too large"), 413, "upstream_error"),
    ],
)
def test_each_client_failure_becomes_its_answer(exc: Exception, status: int, err_type: str) -> None:
    mapped = upstream_error(exc)  # type: ignore[arg-type]
    assert (mapped.status, mapped.err_type) == (status, err_type)
    payload = mapped.payload([])
    assert payload["error"]["type"] == err_type
    if isinstance(exc, ServerStatusError):
        assert f"upstream {URL} answered HTTP {exc.status}: {exc.body.decode()}" == payload["error"]["message"]
    else:
        assert payload["error"]["message"] == str(exc)


def test_an_upstream_openai_error_is_passed_on_with_its_status() -> None:
    body = {"error": {"message": "model 'm' not found", "type": "invalid_request_error", "code": "model_not_found"}}
    mapped = upstream_error(ServerStatusError("HTTP 404", URL, 404, json.dumps(body).encode()))
    assert mapped.status == 404 and mapped.payload([]) == body


def upstream_at(url: str, timeout: float = 10) -> Upstream:
    return Upstream(parse_base_url(url, what="upstream"), timeout)


def test_nothing_listening_is_502_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UpstreamError) as info:
        upstream_at(f"http://127.0.0.1:{port}").open("GET", "/v1/models", None, {})
    assert (info.value.status, info.value.err_type) == (502, "upstream_unreachable")
    assert f"cannot reach upstream http://127.0.0.1:{port}/v1/models" in info.value.message


def test_a_stream_cut_before_its_answer_ended_is_502(fake_server: Callable[[Handle], FakeServer]) -> None:
    def handle(ex: Exchange) -> None:
        ex.stream()  # not chunked: the body ends when the connection does
        ex.write(b'data: {"choices": [{"text": "one "}]}\n\n')

    turn = UpstreamTurn("completions", {"prompt": "x"}, upstream_at(fake_server(handle).url), {})
    pieces = []
    with pytest.raises(UpstreamError, match="ended the stream before finishing the answer") as info:
        for tok in turn.generate("count:", []):
            pieces.append(tok.text)
    assert pieces == ["one "] and info.value.status == 502


def test_event_stream_yields_chunks_until_done(fake_server: Callable[[Handle], FakeServer]) -> None:
    def handle(ex: Exchange) -> None:
        ex.stream(chunked=True)
        ex.write(b'data: {"n": 1}\n\ndata: {"n": 2}\n\ndata: [DONE]\n\n')
        ex.end()

    server = fake_server(handle)
    assert list(event_stream(upstream_at(server.url), "/v1/chat/completions", {"stream": True}, {})) == [
        {"n": 1},
        {"n": 2},
    ]
    assert server.requests[0]["body"] == {"stream": True}
