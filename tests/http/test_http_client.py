"""The one HTTP client (``clanker_rag._http``) against loopback servers: answers read as they
arrive, every failure mapped to its ``Server*Error``, kept-alive connections and their end."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable

import pytest

from clanker_rag._exceptions import (
    BackendError,
    ConfigError,
    ServerAnswerError,
    ServerStatusError,
    ServerTimeoutError,
    ServerUnreachableError,
)
from clanker_rag._http import ModelServer, Timeout
from tests.helpers._fake_server import Exchange, FakeServer, Handle

Start = Callable[[Handle], FakeServer]


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def sse(ex: Exchange, *events: bytes, chunked: bool = True) -> None:
    ex.stream(chunked=chunked)
    for event in events:
        ex.write(event)
    ex.end()


# -- timeouts ----------------------------------------------------------------------------------


def test_a_number_is_both_timeouts_and_a_timeout_passes_through() -> None:
    assert Timeout.of(7) == Timeout(connect=7, read=7)
    t = Timeout(connect=1.5, read=30)
    assert Timeout.of(t) is t
    assert ModelServer("http://127.0.0.1:1", 3).timeout == Timeout(3, 3)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5"])
def test_bad_timeouts_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        Timeout.of(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="read"):
        Timeout(connect=1, read=bad)  # type: ignore[arg-type]


def test_a_bad_base_url_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="upstream must be an http"):
        ModelServer("localhost:8080", what="upstream")


# -- reading answers ---------------------------------------------------------------------------


def test_json_round_trip_with_the_base_url_prefix_and_v1_dropped(fake_server: Start) -> None:
    server = fake_server(lambda ex: ex.json(200, {"path": ex.path, "got": ex.body}))
    client = ModelServer(server.url + "/api/v1/")
    assert client.json("POST", "/tokenize", {"content": "x"}) == {"path": "/api/tokenize", "got": {"content": "x"}}
    assert server.requests[0]["headers"]["content-type"] == "application/json"


def test_events_are_yielded_as_they_arrive(fake_server: Start) -> None:
    # The server sends its second event only once the client has read the first: a client that
    # waited for the whole body would wait forever (and the read timeout would fail the test).
    first_read = threading.Event()

    def handle(ex: Exchange) -> None:
        ex.stream(chunked=True)
        ex.write(b'data: {"n": 1}\n\n')
        assert first_read.wait(10)
        ex.write(b'data: {"n": 2}\n\ndata: [DONE]\n\n')
        ex.end()

    server = fake_server(handle)
    with ModelServer(server.url, 10).request("POST", "/v1/completions", b"{}") as resp:
        seen = []
        for obj in resp.objects():
            seen.append(obj["n"])
            first_read.set()
        assert seen == [1, 2] and resp.complete


def test_events_split_anywhere_across_chunks_decode_the_same(fake_server: Start) -> None:
    body = b'data: {"a": "x\\u00e9"}\r\n\r\n: comment\n\nevent: delta\ndata: {"b": 2}\n\ndata: [DONE]\n\n'

    def handle(ex: Exchange) -> None:
        cut = int(ex.path.strip("/"))  # the two chunks meet there
        sse(ex, body[:cut], body[cut:])

    client = ModelServer(fake_server(handle).url, 10)
    for cut in range(1, len(body)):
        with client.request("GET", f"/{cut}") as resp:
            assert list(resp.objects()) == [{"a": "x\u00e9"}, {"b": 2}] and resp.complete, cut


def test_a_server_that_ignores_stream_answers_one_json_body(fake_server: Start) -> None:
    server = fake_server(lambda ex: ex.json(200, {"choices": []}))
    with ModelServer(server.url).request("POST", "/v1/completions", b"{}") as resp:
        assert list(resp.objects()) == [{"choices": []}] and resp.complete


def test_a_stream_cut_without_done_ends_incomplete(fake_server: Start) -> None:
    # Without chunking, a body ends when the connection does: nothing tells a cut from an end.
    server = fake_server(lambda ex: sse(ex, b'data: {"n": 1}\n\n', chunked=False))
    with ModelServer(server.url).request("GET", "/s") as resp:
        assert list(resp.objects()) == [{"n": 1}] and not resp.complete


# -- failures ----------------------------------------------------------------------------------


def test_nothing_listening_is_unreachable() -> None:
    port = closed_port()
    with pytest.raises(ServerUnreachableError, match=f"cannot reach upstream http://127.0.0.1:{port}/v1/x") as info:
        ModelServer(f"http://127.0.0.1:{port}", 5, name="upstream").request("GET", "/v1/x")
    assert isinstance(info.value, BackendError) and isinstance(info.value, ConnectionError)
    assert info.value.url == f"http://127.0.0.1:{port}/v1/x"


def test_a_server_that_never_accepts_is_a_connect_timeout() -> None:
    # A listener whose accept queue is full: the kernel drops further connection attempts.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers: list[socket.socket] = []
        try:
            for _ in range(8):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                fillers.append(s)
            client = ModelServer(f"http://127.0.0.1:{port}", Timeout(connect=0.3, read=60))
            with pytest.raises(ServerTimeoutError, match=r"connecting to .* timed out after 0\.3 s") as info:
                client.request("GET", "/health")
            assert isinstance(info.value, TimeoutError)
        finally:
            for s in fillers:
                s.close()


def test_no_answer_within_the_read_timeout(fake_server: Start) -> None:
    release = threading.Event()

    def handle(ex: Exchange) -> None:
        release.wait(10)
        ex.json(200, {})

    server = fake_server(handle)
    try:
        with pytest.raises(ServerTimeoutError, match=r"timed out after 0\.2 s"):
            ModelServer(server.url, Timeout(connect=5, read=0.2)).request("GET", "/props")
    finally:
        release.set()


def test_a_stream_going_quiet_times_out_mid_answer(fake_server: Start) -> None:
    release = threading.Event()

    def handle(ex: Exchange) -> None:
        ex.stream(chunked=True)
        ex.write(b'data: {"n": 1}\n\n')
        release.wait(10)

    server = fake_server(handle)
    try:
        with ModelServer(server.url, Timeout(connect=5, read=0.2)).request("GET", "/s") as resp:
            objects = resp.objects()
            assert next(objects) == {"n": 1}
            with pytest.raises(ServerTimeoutError, match=r"timed out after 0\.2 s"):
                next(objects)
    finally:
        release.set()


def test_an_error_status_keeps_its_status_and_body(fake_server: Start) -> None:
    answer = {"error": {"message": "model not loaded"}}
    server = fake_server(lambda ex: ex.json(503, answer))
    client = ModelServer(server.url)
    with client.request("GET", "/props") as resp:
        assert resp.status == 503  # an answer like any other until a reader expects success
        with pytest.raises(ServerStatusError, match=r"HTTP 503: .*model not loaded") as info:
            list(resp.objects())
    assert info.value.status == 503 and json.loads(info.value.body) == answer
    with pytest.raises(ServerStatusError):
        client.json("GET", "/props")


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([b"data: this is not json\n\n"], "not JSON: this is not json"),
        ([b"data: [1, 2]\n\n"], "JSON that is not an object"),
        ([b"error: slot unavailable\n\n"], "reported an error: slot unavailable"),
    ],
)
def test_broken_answers(fake_server: Start, events: list[bytes], message: str) -> None:
    server = fake_server(lambda ex: sse(ex, *events))
    with ModelServer(server.url).request("GET", "/s") as resp, pytest.raises(ServerAnswerError, match=message):
        list(resp.objects())


def test_a_body_that_is_not_json(fake_server: Start) -> None:
    server = fake_server(lambda ex: ex.send(200, b"<html>gateway</html>", "text/html"))
    with pytest.raises(ServerAnswerError, match="not JSON: <html>gateway</html>"):
        ModelServer(server.url).json("GET", "/props")


def test_a_server_dying_mid_chunk_broke_the_connection(fake_server: Start) -> None:
    def handle(ex: Exchange) -> None:
        ex.stream(chunked=True)
        ex.write(b'data: {"n": 1}\n\n')
        ex.drop()

    server = fake_server(handle)
    with ModelServer(server.url).request("GET", "/s") as resp:
        objects = resp.objects()
        assert next(objects) == {"n": 1}
        with pytest.raises(ServerAnswerError, match=r"connection to .* broke"):
            next(objects)


# -- connections -------------------------------------------------------------------------------


def test_every_request_has_its_own_connection_closed_with_its_answer(fake_server: Start) -> None:
    peers: list[tuple[str, int]] = []

    def handle(ex: Exchange) -> None:
        peers.append(ex.peer)
        ex.json(200, {"ok": True})

    server = fake_server(handle)
    client = ModelServer(server.url)
    assert client.json("GET", "/props") == client.json("POST", "/tokenize", {}) == {"ok": True}
    assert len(peers) == 2 and peers[0] != peers[1]
    # The test's thread check (conftest) fails it if a handler still waits on a kept connection.


def test_closing_an_answer_early_closes_its_connection(fake_server: Start) -> None:
    def handle(ex: Exchange) -> None:
        ex.stream(chunked=True)
        # Writes until the client hangs up (a write then fails), for 20 s at most. A fixed amount
        # could fit in loopback's socket buffers before a slow client closes: no write would fail.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ex.write(b'data: {"n": 1}\n\n' * 50)

    server = fake_server(handle)
    with ModelServer(server.url).request("GET", "/s") as resp:
        assert next(resp.objects()) == {"n": 1}
    assert server.disconnected.wait(20), "the server kept streaming to nobody"


def test_many_threads_share_one_client(fake_server: Start) -> None:
    server = fake_server(lambda ex: ex.json(200, {"path": ex.path}))
    client = ModelServer(server.url)
    results: dict[int, object] = {}

    def ask(i: int) -> None:
        for j in range(5):
            results[i * 10 + j] = client.json("GET", f"/{i}/{j}")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {i * 10 + j: {"path": f"/{i}/{j}"} for i in range(6) for j in range(5)}


def test_lines_and_read1_hand_over_the_body_as_sent(fake_server: Start) -> None:
    server = fake_server(lambda ex: sse(ex, b"one\ntw", b"o\nthree"))
    client = ModelServer(server.url)
    with client.request("GET", "/s") as resp:
        assert list(resp.lines()) == [b"one\n", b"two\n", b"three"]
    with client.request("GET", "/s") as resp:
        got = b""
        while piece := resp.read1(4):
            assert len(piece) <= 4
            got += piece
        assert got == b"one\ntwo\nthree"
