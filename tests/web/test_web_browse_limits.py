"""The browse-only server has the proxy's connection limits: a cap on connections and the header deadline.

Without them, a few clients that connect and never finish a request would
hold every thread of ``serve --index IDX`` (no upstream) for as long as they
like.  Waits are bounded retries, never timed assertions.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from clanker_rag import ConfigError, KnowledgeBase
from clanker_rag._serve._proxy import make_browse_server
from tests.helpers._web_site import Site, browse_site

SLOTS = 8


def _search_status(site: Site) -> int:
    status, _, _ = site.request("GET", "/clanker-rag/search?q=gateway+port")
    return status


def _served_while_stalled(site: Site, tries: int = 400) -> int:
    """Ask until answered other than 503 (the stalled clients' slots are being taken back)."""
    pause = threading.Event()
    status = 503
    for _ in range(tries):
        status = _search_status(site)
        if status != 503:
            break
        pause.wait(0.05)
    return status


def test_idle_and_half_sent_connections_do_not_stop_a_real_request() -> None:
    with browse_site(max_connections=SLOTS, header_timeout=0.3) as site:
        stalled = []
        try:
            for i in range(SLOTS * 2):
                sock = socket.create_connection(("127.0.0.1", site.port), timeout=30)
                if i % 2:  # half a request line and headers; the rest never comes
                    sock.sendall(b"GET /clanker-rag/search?q=gateway HTTP/1.1\r\nHost: 127.0.0.1\r\nAcc")
                stalled.append(sock)
            # Twice as many stalled clients as slots: past the cap they got 503 at once.
            assert _served_while_stalled(site) == 200
            assert site.server.header_deadlines.expired > 0
            for sock in stalled:  # each one's end was closed by the server (after a 503 or unanswered)
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
                assert data == b"" or data.startswith(b"HTTP/1.1 503")
        finally:
            for sock in stalled:
                sock.close()


def test_past_the_cap_a_connection_gets_503_busy_at_once() -> None:
    with browse_site(max_connections=2, header_timeout=30) as site:
        held = [socket.create_connection(("127.0.0.1", site.port), timeout=30) for _ in range(2)]
        try:
            # The two held connections take both slots once accepted; a third is refused.
            status = 0
            for _ in range(200):
                status = _search_status(site)
                if status == 503:
                    break
            assert status == 503
            code, _, body = site.request("GET", "/clanker-rag/info")
            assert code == 503 and b'"busy"' in body
        finally:
            for sock in held:
                sock.close()
        assert _served_while_stalled(site) == 200


@pytest.mark.parametrize(("option", "bad"), [("header_timeout", 0), ("header_timeout", 61), ("max_connections", 0)])
def test_the_limits_are_checked(option: str, bad: Any) -> None:
    with pytest.raises(ConfigError, match=option):
        make_browse_server(KnowledgeBase(), token=None, **{option: bad})
