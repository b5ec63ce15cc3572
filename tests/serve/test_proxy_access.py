"""The proxy is safe from web pages and, with a token, from anyone without it (issue 27, items 5 and 6).

A page the user opens can send requests to 127.0.0.1, and with DNS rebinding read the answers:
every request a browser could make that way is refused before the upstream or the knowledge
base sees it.  Real sockets on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from clanker_rag._exceptions import ConfigError
from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._access import AccessPolicy, bearer_ok, token_from_env
from clanker_rag._serve._proxy import ProxyServer, make_server
from tests.helpers._fake_upstream import FakeUpstream, Reply
from tests.helpers._serve import default_sigint

ROOT = Path(__file__).resolve().parents[2]
SECRET_FACT = "The vault code is 7341."
TOKEN = "s3cret-Token_value"
CHAT = json.dumps({"messages": [{"role": "user", "content": "What is the vault code?"}]}).encode()


def knowledge() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text(SECRET_FACT, "vault.md")
    return kb


class Proxy:
    def __init__(self, server: ProxyServer, upstream: FakeUpstream) -> None:
        self.server = server
        self.upstream = upstream
        self.port = server.server_address[1]

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            # skip_host: the test decides the Host header (or sends none).
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
            for name, value in sent.items():
                if value is not None:
                    conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def chat(self, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        return self.request("POST", "/v1/chat/completions", CHAT, {"Content-Type": "application/json", **headers})


def running(token: str | None = None) -> Iterator[Proxy]:
    with FakeUpstream(lambda path, body: Reply(["It is ", "7341."])) as up:
        server = make_server(knowledge(), up.url, token=token)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield Proxy(server, up)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)


@pytest.fixture()
def proxy() -> Iterator[Proxy]:
    yield from running()


@pytest.fixture()
def guarded() -> Iterator[Proxy]:
    yield from running(TOKEN)


def refused(status: int, body: bytes, proxy: Proxy, want: set[int]) -> None:
    assert status in want, (status, body)
    assert b"7341" not in body
    assert not proxy.upstream.requests, "a refused request reached the upstream"


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8765", "127.0.0.1.nip.io", "", "a b"])
def test_a_foreign_host_is_refused(proxy: Proxy, host: str) -> None:
    status, _, body = proxy.chat({"Host": host})
    refused(status, body, proxy, {400, 403, 421})


def test_a_request_without_a_host_is_refused(proxy: Proxy) -> None:
    status, _, body = proxy.request(
        "POST",
        "/v1/chat/completions",
        CHAT,
        {"Host": None, "Content-Type": "application/json"},  # type: ignore[dict-item]
    )
    refused(status, body, proxy, {400, 403, 421})


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}", "127.0.0.1"])
def test_loopback_names_are_served(proxy: Proxy, host: str) -> None:
    status, _, body = proxy.chat({"Host": host.format(port=proxy.port)})
    assert status == 200, body
    assert "7341" in json.loads(body)["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    "origin", ["http://attacker.example", "null", "http://localhost:1", "https://127.0.0.1:{port}"]
)
def test_a_foreign_origin_is_refused(proxy: Proxy, origin: str) -> None:
    status, _, body = proxy.chat({"Origin": origin.format(port=proxy.port)})
    refused(status, body, proxy, {403})


def test_the_servers_own_origin_is_served(proxy: Proxy) -> None:
    status, _, _ = proxy.chat({"Origin": f"http://127.0.0.1:{proxy.port}"})
    assert status == 200


@pytest.mark.parametrize("kind", ["text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded"])
def test_a_body_a_browser_could_send_without_a_preflight_is_refused(proxy: Proxy, kind: str) -> None:
    status, _, body = proxy.request("POST", "/v1/chat/completions", CHAT, {"Content-Type": kind})
    refused(status, body, proxy, {400, 415})
    assert b"application/json" in body  # the message says what to send


def test_a_cors_preflight_is_answered_here_and_allows_nothing(proxy: Proxy) -> None:
    for origin in ("http://attacker.example", f"http://127.0.0.1:{proxy.port}"):
        status, headers, body = proxy.request(
            "OPTIONS",
            "/v1/chat/completions",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
        )
        refused(status, body, proxy, {403})
        assert not any(name.startswith("access-control-allow") for name in headers)


class _PermissiveUpstream(BaseHTTPRequestHandler):
    """An upstream that grants every origin, as llama.cpp's server does."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _grant(self) -> None:
        type(self).seen.append(self.command)
        body = b'{"object": "list", "data": []}'
        self.send_response(200)
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_OPTIONS = _grant


def test_an_upstreams_cors_grants_are_never_relayed() -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _PermissiveUpstream)
    threading.Thread(target=upstream.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    server = make_server(knowledge(), f"http://127.0.0.1:{upstream.server_address[1]}", token=None)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        proxy = Proxy.__new__(Proxy)
        proxy.port = server.server_address[1]
        _PermissiveUpstream.seen.clear()
        status, headers, _ = proxy.request(
            "OPTIONS",
            "/v1/models",
            headers={"Origin": "http://attacker.example", "Access-Control-Request-Method": "GET"},
        )
        assert status == 403 and _PermissiveUpstream.seen == []
        status, headers, _ = proxy.request("GET", "/v1/models")
        assert status == 200 and _PermissiveUpstream.seen == ["GET"]
        assert not any(name.startswith("access-control-") for name in headers), headers
    finally:
        server.shutdown()
        server.server_close()
        upstream.shutdown()
        upstream.server_close()


@pytest.mark.parametrize(
    "auth", [None, "", "Bearer", "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"]
)
def test_with_a_token_a_request_without_it_gets_401(guarded: Proxy, auth: str | None) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    status, got, body = guarded.chat(headers)
    refused(status, body, guarded, {401})
    assert got.get("www-authenticate", "").startswith("Bearer")
    status, _, body = guarded.request("GET", "/v1/models", headers=headers)
    refused(status, body, guarded, {401})


def test_with_a_token_the_right_one_is_served_and_never_sent_upstream(guarded: Proxy) -> None:
    status, _, body = guarded.chat({"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and b"7341" in body
    status, _, _ = guarded.request("GET", "/v1/models", headers={"Authorization": f"bearer  {TOKEN}"})
    assert status == 200
    assert guarded.upstream.requests
    for request in guarded.upstream.requests:
        assert TOKEN not in json.dumps(request["headers"])


def test_make_server_takes_the_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLANKER_RAG_TOKEN", TOKEN)
    server = make_server(knowledge(), "http://127.0.0.1:9")
    try:
        assert server.config.token == TOKEN
    finally:
        server.server_close()


def test_bearer_and_token_checks() -> None:
    assert bearer_ok(f"Bearer {TOKEN}", TOKEN) and bearer_ok(f"  bearer {TOKEN} ", TOKEN)
    assert not bearer_ok(None, TOKEN) and not bearer_ok(f"Bearer {TOKEN}é", TOKEN)
    assert token_from_env({}) is None and token_from_env({"CLANKER_RAG_TOKEN": "  "}) is None
    assert token_from_env({"CLANKER_RAG_TOKEN": f" {TOKEN}\n"}) == TOKEN
    for bad in ("two words", "tab\there", "é", "x" * 5000):
        with pytest.raises(ConfigError, match="CLANKER_RAG_TOKEN"):
            token_from_env({"CLANKER_RAG_TOKEN": bad})
    # Bound beyond loopback the names it is reached by are unknown: the token decides, origins still must match.
    wide = AccessPolicy("0.0.0.0", TOKEN)
    ok = {"Host": "rag.lan:8765", "Authorization": f"Bearer {TOKEN}"}
    assert wide.refusal("GET", ok.get) is None
    assert wide.refusal("GET", {**ok, "Origin": "http://rag.lan:8765"}.get) is None
    assert wide.refusal("GET", {**ok, "Origin": "http://evil.lan:8765"}.get).status == 403  # type: ignore[union-attr]
    assert wide.refusal("GET", {"Host": "rag.lan:8765"}.get).status == 401  # type: ignore[union-attr]


def test_the_serve_command_refuses_foreign_hosts_and_requires_the_token_from_its_environment(tmp_path: Path) -> None:
    index = tmp_path / "index"
    knowledge().save(index)
    with FakeUpstream(lambda path, body: Reply(["ok"])) as up:
        env = dict(os.environ, PYTHONPATH=str(ROOT), CLANKER_RAG_TOKEN=TOKEN)
        cmd = [sys.executable, "-m", "clanker_rag", "serve", "--index", str(index), "--upstream", up.url, "--port", "0"]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint)
        assert proc.stderr is not None
        try:
            banner = proc.stderr.readline()
            match = re.search(r"serving http://127\.0\.0\.1:(\d+)/v1", banner)
            assert match, banner
            server = Proxy.__new__(Proxy)
            server.port, server.upstream = int(match.group(1)), up
            status, _, body = server.chat({})
            refused(status, body, server, {401})
            status, _, body = server.chat({"Authorization": f"Bearer {TOKEN}", "Host": "attacker.example"})
            refused(status, body, server, {400, 403, 421})
            status, _, body = server.chat({"Authorization": f"Bearer {TOKEN}", "Origin": "http://attacker.example"})
            refused(status, body, server, {403})
            status, _, body = server.chat({"Authorization": f"Bearer {TOKEN}"})
            assert status == 200, body
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stderr.close()


def test_connections_past_the_cap_get_503_at_once_and_slots_come_back() -> None:
    import socket

    with FakeUpstream(lambda path, body: Reply(["ok"])) as up:
        server = make_server(knowledge(), up.url, token=None, max_connections=3)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        port = server.server_address[1]
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        try:
            proxy = Proxy.__new__(Proxy)
            proxy.port = port
            status, headers, body = proxy.request("GET", "/v1/models")
            assert status == 503 and headers.get("retry-after") == "1", body
            assert json.loads(body)["error"]["code"] == "busy"
        finally:
            for sock in idle:
                sock.close()
        # The idle connections' threads end and free their slots.
        deadline = threading.Event()
        for _ in range(100):
            status, _, _ = proxy.request("GET", "/v1/models")
            if status == 200:
                break
            deadline.wait(0.05)
        assert status == 200
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_an_idle_or_half_open_connection_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from clanker_rag._serve import _handler

    # The default is a minute (a thread each, not ten minutes); a short one here to watch it happen.
    assert _handler._Handler.timeout <= 60
    monkeypatch.setattr(_handler._Handler, "timeout", 0.3)
    for proxy in running():
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        try:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
            assert sock.recv(100) == b""  # closed by the server, well before our own 10 s timeout
        finally:
            sock.close()


def test_max_connections_is_checked() -> None:
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ConfigError, match="max_connections"):
            make_server(knowledge(), "http://127.0.0.1:9", token=None, max_connections=bad)
