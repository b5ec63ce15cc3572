"""A proxy (or a browse-only server) over a small knowledge base, in this process, for the web tests."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clanker_rag import KnowledgeBase, Retriever
from clanker_rag._serve._proxy import make_browse_server, make_server
from tests.helpers._fake_server import Exchange, FakeServer
from tests.helpers._fake_upstream import FakeUpstream, Reply

HOSTILE = "Beware: <script>alert(1)</script> and <img src=x onerror=\"document.title='pwned'\"> in the gateway notes."


def knowledge() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    ports = "# Ports\n\nThe gateway listens on port 7341 by default.\n"
    kb.add_text(ports, "docs/ports.md", sections=[(0, len(ports), "Ports")])
    kb.add_text("# Licence\n\nThe library is released under the MIT licence.\n", "docs/licence.md")
    kb.add_text(HOSTILE, "notes/hostile.html")
    return kb


def answer(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


class Site:
    """A running server: ``url``, and ``get``/``post`` that send the Host header a browser would."""

    def __init__(self, server: Any, upstream: FakeUpstream | None) -> None:
        self.server = server
        self.upstream = upstream
        self.port = server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers={"Host": f"127.0.0.1:{self.port}", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def get_json(self, path: str, headers: dict[str, str] | None = None) -> Any:
        status, _, body = self.request("GET", path, headers=headers)
        assert status == 200, (status, body)
        return json.loads(body)

    def finished_records(self) -> list[dict[str, Any]]:
        """The trace's records once none is running: a record ends after its response's last byte
        is written, so a client that has read its answer may ask a moment before that (a bounded wait)."""
        deadline = time.monotonic() + 10
        while True:
            records: list[dict[str, Any]] = self.get_json("/clanker-rag/trace")["records"]
            if all(r["status"] != "running" for r in records) or time.monotonic() > deadline:
                return records
            time.sleep(0.01)

    def chat(self, question: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
        body = json.dumps({"messages": [{"role": "user", "content": question}]}).encode()
        status, _, raw = self.request(
            "POST", "/v1/chat/completions", body, {"Content-Type": "application/json", **(headers or {})}
        )
        assert status == 200, (status, raw)
        result: dict[str, Any] = json.loads(raw)
        return result


def _run(server: Any, upstream: FakeUpstream | None) -> Iterator[Site]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Site(server, upstream)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def proxy_site(token: str | None = None, reply: str = "The gateway uses port 7341.", **options: Any) -> Iterator[Site]:
    with FakeUpstream(lambda path, body: Reply(answer(reply))) as up:
        # A short header deadline: a browser's idle keep-alive connection ends within the test.
        options.setdefault("header_timeout", 0.5)
        yield from _run(make_server(knowledge(), up.url, token=token, **options), up)


@contextmanager
def browse_site(
    token: str | None = None, kb: KnowledgeBase | None = None, path: Path | None = None, **limits: Any
) -> Iterator[Site]:
    yield from _run(make_browse_server(kb or knowledge(), token=token, index_path=path, **limits), None)


@contextmanager
def retriever_site(retriever: Retriever) -> Iterator[Site]:
    """A browse-only server over ``retriever``, which may be a plain retriever rather than a knowledge base."""
    yield from _run(make_browse_server(retriever, token=None), None)


@contextmanager
def native_site(
    *answers: list[dict[str, Any]], kb: KnowledgeBase | None = None, **options: Any
) -> Iterator[tuple[Site, FakeServer]]:
    """A ``--native-tools`` proxy and its upstream, which streams ``answers`` (``_chat_chunks``) in turn."""
    script = list(answers)

    def handle(ex: Exchange) -> None:
        if ex.method != "POST":  # the pages ask for the models: this upstream serves none
            ex.json(404, {"error": {"message": "no route", "type": "not_found"}})
            return
        ex.stream()
        for chunk in script.pop(0):
            ex.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        ex.write(b"data: [DONE]\n\n")

    fake = FakeServer(handle).start()
    try:
        options.setdefault("header_timeout", 0.5)
        for site in _run(make_server(kb or knowledge(), fake.url, token=None, native_tools=True, **options), None):
            yield site, fake
    finally:
        fake.stop()
