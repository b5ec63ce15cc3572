"""``serve`` never prints a traceback (issue 14 item 6), checked with real sockets on 127.0.0.1.

A client that resets an idle keep-alive connection costs one debug line; a
body nested too deeply to parse gets 400, not a 500 from a RecursionError.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._proxy import ProxyServer, make_server
from tests.helpers._fake_upstream import FakeUpstream, Reply


@pytest.fixture()
def proxy() -> Iterator[ProxyServer]:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("The clanker server listens on port 7341 by default.", "docs/server.md")

    def reply(path: str, body: dict[str, object]) -> Reply:
        if body.get("prompt") == "count:":
            return Reply(["tick "] * 400, delay=0.005)
        return Reply(["Port ", "7341."])

    with FakeUpstream(reply) as up:
        server = make_server(kb, up.url)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)


def post(server: ProxyServer, body: bytes, path: str = "/v1/chat/completions") -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def wait_for(predicate: object, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_reset_idle_keepalive_connection_logs_one_debug_line(
    proxy: ProxyServer, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.server_address[1], timeout=30)
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200 and not resp.will_close  # the connection stays open, idle
    sock = conn.sock
    assert sock is not None
    # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()

    def reset_lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "reset the connection" in r.getMessage()]

    assert wait_for(lambda: reset_lines()), [r.getMessage() for r in caplog.records]
    time.sleep(0.2)  # anything else the handler thread would print comes now
    [line] = reset_lines()
    assert line.levelno == logging.DEBUG and line.exc_info is None
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("depth", [100_000, 5_000, 500])
def test_a_deeply_nested_body_gets_400(
    proxy: ProxyServer, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    bodies = [
        nested.encode(),
        ('{"model": "m", "messages": [{"role": "user", "content": "Which port?", "x": ' + nested + "}]}").encode(),
    ]
    for body in bodies:
        status, payload = post(proxy, body)
        assert status == 400, payload
        error = payload["error"]
        assert isinstance(error, dict) and error["type"] == "invalid_request_error"
        assert "nest" in str(error["message"])
    err = capfd.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_ordinary_nesting_still_works(proxy: ProxyServer) -> None:
    schema: object = {"type": "string"}
    for _ in range(20):
        schema = {"type": "object", "properties": {"a": schema}}
    body = {"model": "m", "messages": [{"role": "user", "content": "Which port?"}], "response_format": schema}
    status, payload = post(proxy, json.dumps(body).encode())
    assert status == 200
    choices = payload["choices"]
    assert isinstance(choices, list) and choices[0]["message"]["content"] == "Port 7341."


def test_many_clients_resetting_at_once_print_nothing(
    proxy: ProxyServer, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    port = proxy.server_address[1]
    linger = struct.pack("ii", 1, 0)
    failures: list[BaseException] = []

    def client(n: int) -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if n % 2:  # reset while the answer streams
                body = json.dumps({"model": "m", "prompt": "count:", "stream": True}).encode()
                conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                # A 502 here is the proxy failing to reach the fake upstream (see _fake_upstream._Server).
                assert resp.status == 200, resp.read()
                resp.read1(64)
            else:  # reset an idle keep-alive connection
                conn.request("GET", "/v1/models")
                conn.getresponse().read()
            assert conn.sock is not None
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            conn.close()
        except BaseException as exc:  # reported below, in the test's own thread
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures, failures

    def settled() -> bool:
        idle = [r for r in caplog.records if "reset the connection" in r.getMessage()]
        streamed = [r for r in caplog.records if "client disconnected" in r.getMessage()]
        return len(idle) >= 12 and len(streamed) >= 12

    assert wait_for(settled), [r.getMessage() for r in caplog.records]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
