"""Idle and half-sent connections give their slot back within the header timeout.

Each connection holds a thread and one of ``max_connections`` slots.  A
per-``recv`` timeout of a minute let a few hundred clients that connect and
send nothing (or half a request, or a byte now and then) make the proxy
answer 503 to everyone for that minute.  Now the request line and headers
are due within ``header_timeout``; the checks below keep the stalled clients
connected (on their side) while a real client is served.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from clanker_rag import ConfigError
from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._proxy import ProxyServer, make_server
from tests.helpers._fake_upstream import FakeUpstream, Reply

SLOTS = 16


@pytest.fixture()
def proxy() -> Iterator[ProxyServer]:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("The clanker server listens on port 7341 by default.", "docs/server.md")
    with FakeUpstream(lambda path, body: Reply(["ok"])) as up:
        server = make_server(kb, up.url, token=None, max_connections=SLOTS, header_timeout=0.3)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)


def _get_models(server: ProxyServer) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
    try:
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def _served_while(server: ProxyServer, stop: threading.Event, tries: int = 400) -> int:
    """Ask until answered other than 503 (the stalled clients' slots are being taken back)."""
    status = 503
    for _ in range(tries):
        status = _get_models(server)
        if status != 503:
            break
        stop.wait(0.05)
    return status


def test_a_real_request_is_served_while_stalled_clients_stay_connected(proxy: ProxyServer) -> None:
    port = proxy.server_address[1]
    stalled = []
    try:
        for i in range(SLOTS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            if i % 2:  # half a request line and headers; the rest never comes
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            stalled.append(sock)
        # Every slot is taken now, and none of these clients will ever finish.
        status = _served_while(proxy, threading.Event())
        assert status == 200
        # The stalled clients are still connected on their side; the proxy closed its end.
        for sock in stalled:
            assert sock.recv(100) == b""
    finally:
        for sock in stalled:
            sock.close()


def test_a_client_trickling_its_headers_is_cut_off(proxy: ProxyServer) -> None:
    port = proxy.server_address[1]
    stop = threading.Event()

    def trickle(sock: socket.socket) -> None:
        # One byte at a time, each well within any per-read timeout: only a deadline stops it.
        with contextlib.suppress(OSError):
            while not stop.wait(0.02):
                sock.sendall(b"X")

    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(SLOTS)]
    for sock in socks:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nX-Slow: ")
    threads = [threading.Thread(target=trickle, args=(sock,)) for sock in socks]
    for t in threads:
        t.start()
    try:
        assert _served_while(proxy, stop) == 200
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    try:
        for sock in socks:  # each was closed by the proxy, unanswered (its request was cut short)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(100) == b""
    finally:
        for sock in socks:
            sock.close()


def test_a_keepalive_connection_serves_requests_within_the_timeout(proxy: ProxyServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.server_address[1], timeout=30)
    try:
        for _ in range(3):
            conn.request("GET", "/v1/models")
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200 and not resp.will_close
    finally:
        conn.close()


@pytest.mark.parametrize("bad", [0, -1, True, "5", 61])
def test_header_timeout_is_checked(bad: object) -> None:
    with pytest.raises(ConfigError, match="header_timeout"):
        make_server(KnowledgeBase(), "http://127.0.0.1:9", token=None, header_timeout=bad)
