"""The web pages' JSON endpoints and the trace, over plain HTTP (tests/web/test_web_browser.py drives a browser)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._serve._web._trace import TraceLog
from tests.helpers._web_site import HOSTILE, browse_site, proxy_site

TOKEN = "web-Token_123"


def test_the_pages_are_html_shells_with_a_strict_policy_and_no_other_host() -> None:
    with browse_site() as site:
        for path in ("/", "/sources", "/trace"):
            status, headers, body = site.request("GET", path)
            assert status == 200
            assert headers["content-type"].startswith("text/html")
            csp = headers["content-security-policy"]
            assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert headers["x-content-type-options"] == "nosniff"
            page = body.decode()
            assert "http://" not in page and "https://" not in page and "//" not in page.replace("<!doctype", "")
        for name in ("app.css", "common.js", "search.js", "sources.js", "trace.js"):
            status, headers, body = site.request("GET", "/clanker-rag/static/" + name)
            assert status == 200, name
            assert b"http://" not in body and b"https://" not in body, name
            # The scripts build the DOM from text only.
            assert b"innerHTML" not in body and b"insertAdjacentHTML" not in body and b"eval(" not in body
        assert site.request("GET", "/clanker-rag/static/../_api.py")[0] == 404
        assert site.request("GET", "/clanker-rag/static/missing.js")[0] == 404


def test_search_returns_hits_with_lines_and_highlight_spans() -> None:
    with browse_site() as site:
        result = site.get_json("/clanker-rag/search?q=gateway+port&k=5")
        assert result["hits"], result
        top = result["hits"][0]
        assert top["source"] == "docs/ports.md"
        assert (top["start_line"], top["end_line"]) == (1, 3)
        assert top["section"] == "Ports"
        marked = {top["text"][a:b].lower() for a, b in top["marks"]}
        # Words that analyse to a query term, stemmed ("Ports") included; nothing else.
        assert marked == {"gateway", "port", "ports"}
        assert site.get_json("/clanker-rag/search?q=")["hits"] == []
        assert site.request("GET", "/clanker-rag/search?q=x&k=many")[0] == 400


def test_explain_shares_add_up_to_the_score() -> None:
    with browse_site() as site:
        top = site.get_json("/clanker-rag/search?q=gateway+port")["hits"][0]
        ex = site.get_json(f"/clanker-rag/explain?q=gateway+port&source=docs/ports.md&chunk_id={top['chunk_id']}")
        assert ex["score"] == pytest.approx(top["score"])
        assert sum(t["contribution"] for t in ex["terms"]) == pytest.approx(ex["score"])
        assert site.request("GET", "/clanker-rag/explain?q=x&source=docs/ports.md&chunk_id=999")[0] == 404


def test_sources_filter_and_one_source_whole() -> None:
    with browse_site() as site:
        assert site.get_json("/clanker-rag/sources")["sources"] == [
            "docs/licence.md",
            "docs/ports.md",
            "notes/hostile.html",
        ]
        assert site.get_json("/clanker-rag/sources?filter=LIC")["sources"] == ["docs/licence.md"]
        src = site.get_json("/clanker-rag/source?name=notes/hostile.html")
        assert src["text"] == HOSTILE
        assert src["chunks"][0]["start"] == 0 and src["chunks"][0]["end"] == len(HOSTILE)
        assert site.request("GET", "/clanker-rag/source?name=nope")[0] == 404


def test_browse_only_refuses_generation_with_503() -> None:
    with browse_site() as site:
        status, _, body = site.request("POST", "/v1/chat/completions", b"{}", {"Content-Type": "application/json"})
        assert status == 503
        assert json.loads(body)["error"]["code"] == "no_upstream"
        assert site.get_json("/clanker-rag/info")["browse_only"] is True


@pytest.mark.parametrize("site_of", [browse_site, proxy_site])
def test_with_a_token_data_needs_it_and_the_shells_do_not(site_of) -> None:
    with site_of(token=TOKEN) as site:
        assert site.request("GET", "/")[0] == 200
        assert site.request("GET", "/clanker-rag/static/common.js")[0] == 200
        for path in (
            "/clanker-rag/search?q=port",
            "/clanker-rag/sources",
            "/clanker-rag/trace",
            "/clanker-rag/trace/events",
        ):
            status, headers, _ = site.request("GET", path)
            assert status == 401, path
            assert headers["www-authenticate"].startswith("Bearer")
            assert site.request("GET", path.replace("/events", ""), headers={"Authorization": "Bearer wrong"})[0] == 401
        assert site.get_json("/clanker-rag/sources", {"Authorization": f"Bearer {TOKEN}"})["sources"]


@pytest.mark.parametrize("site_of", [browse_site, proxy_site])
def test_a_foreign_origin_or_host_cannot_read_the_endpoints(site_of) -> None:
    with site_of() as site:
        status, headers, body = site.request("GET", "/clanker-rag/sources", headers={"Origin": "http://evil.example"})
        assert status == 403 and b"docs/" not in body
        assert "access-control-allow-origin" not in headers
        status, _, body = site.request("GET", "/clanker-rag/sources", headers={"Host": "evil.example"})
        assert status == 421 and b"docs/" not in body
        # A page shell is guarded too.
        assert site.request("GET", "/", headers={"Host": "evil.example"})[0] == 421
        status, _, _ = site.request(
            "OPTIONS",
            "/clanker-rag/sources",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"},
        )
        assert status == 403


def test_a_proxied_request_is_traced_with_its_injection() -> None:
    with proxy_site() as site:
        site.chat("Which port does the gateway use?")
        records = site.finished_records()
        assert len(records) == 1
        rec = records[0]
        assert rec["kind"] == "chat" and rec["status"] == "done" and rec["http_status"] == 200
        assert rec["question"] == "Which port does the gateway use?"
        assert rec["text"] == "The gateway uses port 7341."
        (inj,) = rec["injections"]
        assert inj["trigger"] == "question" and "port" in inj["query"]
        assert inj["passages"][0]["source"] == "docs/ports.md"
        assert "7341" in inj["block"]
        assert inj["retrieval_ms"] is not None and inj["retrieval_ms"] >= 0
        assert inj["first_token_ms"] is not None
        assert inj["before"] == "" and inj["after"] == rec["text"]


def test_an_upfront_injection_of_a_forwarded_request_is_traced() -> None:
    with proxy_site(live=False) as site:
        site.chat("Which port does the gateway use?")
        (rec,) = site.finished_records()
        (inj,) = rec["injections"]
        assert inj["passages"][0]["source"] == "docs/ports.md" and "7341" in inj["block"]


def test_the_trace_keeps_the_last_n_newest_first_and_appends_every_one_to_its_file(tmp_path: Path) -> None:
    log_file = tmp_path / "trace.jsonl"
    with proxy_site(trace_size=2, trace_file=log_file) as site:
        for question in ("Which port?", "Which licence?", "Which gateway port?"):
            site.chat(question)
        records = site.finished_records()
    assert [r["question"] for r in records] == ["Which gateway port?", "Which licence?"]
    lines = [json.loads(line) for line in log_file.read_text(encoding="utf-8").splitlines()]
    assert [r["question"] for r in lines] == ["Which port?", "Which licence?", "Which gateway port?"]
    assert all(r["status"] == "done" for r in lines)


def test_the_event_stream_sends_kept_records_then_each_change() -> None:
    with proxy_site() as site:
        site.chat("Which licence applies?")
        site.finished_records()
        sock = socket.create_connection(("127.0.0.1", site.port), timeout=10)
        with sock, sock.makefile("rb") as reader:
            sock.sendall(f"GET /clanker-rag/trace/events HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\n\r\n".encode())
            assert reader.readline().startswith(b"HTTP/1.1 200")
            while reader.readline() not in (b"\r\n", b""):
                pass

            def next_record() -> dict[str, Any]:
                while True:
                    line = reader.readline()
                    assert line, "the stream ended"
                    if line.startswith(b"data: "):
                        record: dict[str, Any] = json.loads(line[6:])
                        return record

            assert next_record()["question"] == "Which licence applies?"
            asking = threading.Thread(target=site.chat, args=("Which port does the gateway use?",))
            asking.start()
            seen = [next_record() for _ in range(2)]
            assert seen[0]["question"] == "Which port does the gateway use?"
            assert seen[0]["status"] == "running"
            while seen[-1]["status"] == "running":
                seen.append(next_record())
            assert seen[-1]["injections"][0]["passages"][0]["source"] == "docs/ports.md"
        asking.join(10)


def test_closing_the_log_ends_every_subscription() -> None:
    log = TraceLog(3)
    q = log.subscribe()
    log.close()
    assert q.get(timeout=1) is None
    assert log.subscribe().get(timeout=1) is None
    with pytest.raises(Exception, match="trace_size"):
        TraceLog(0)


def test_a_sharded_index_lists_matching_sources_page_by_page_never_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from clanker_rag._serve._web._api import MAX_LISTED_SOURCES
    from clanker_rag.cluster import ShardedKnowledgeBase

    kb = ShardedKnowledgeBase(3, chunk_size=None)
    names = [f"{'logs' if i % 3 else 'docs'}/file{i:04d}.md" for i in range(3 * MAX_LISTED_SOURCES)]
    kb.add_texts((f"text number {i}", name) for i, name in enumerate(names))

    def whole_list() -> list[str]:
        raise AssertionError("the endpoint asked for every source name at once")

    monkeypatch.setattr(kb, "sources", whole_list)
    with browse_site(kb=kb) as site:  # type: ignore[arg-type]
        got = site.get_json("/clanker-rag/sources?filter=DOCS/")
    docs = sorted(n for n in names if n.startswith("docs/"))
    assert got["total"] == len(docs)
    assert got["sources"] == docs[:MAX_LISTED_SOURCES] and len(got["sources"]) == MAX_LISTED_SOURCES


class _OnlySearch:
    """A retriever that is not a knowledge base: it searches and offers nothing to browse."""

    def search(self, query: str, k: int = 10) -> list[Any]:
        from clanker_rag import Hit

        return [Hit(text="The gateway listens on port 7341.", source="remote/ports", score=1.5)][:k]


def test_a_plain_retriever_is_searched_and_has_nothing_to_browse() -> None:
    from tests.helpers._web_site import retriever_site

    with retriever_site(_OnlySearch()) as site:
        result = site.get_json("/clanker-rag/search?q=gateway")
        assert [h["source"] for h in result["hits"]] == ["remote/ports"]
        assert result["explain"] is False and result["terms"] == []
        assert site.get_json("/clanker-rag/info")["sources"] is None
        for path in (
            "/clanker-rag/sources",
            "/clanker-rag/source?name=remote/ports",
            "/clanker-rag/search?q=x&source=a",
        ):
            status, _, body = site.request("GET", path)
            assert status == 501 and b"not a knowledge base" in body, (path, status, body)
