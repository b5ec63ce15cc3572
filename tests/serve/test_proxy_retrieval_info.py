"""The proxy's retrieval info (``clanker_rag.retrievals``) names each source once (issue 30)."""

from __future__ import annotations

import http.client
import json
import threading

from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._proxy import make_server
from tests.helpers._fake_upstream import FakeUpstream, Reply


def test_a_source_with_several_passages_is_listed_once_in_rank_order() -> None:
    kb = KnowledgeBase(chunk_size=12, stride=12)
    # Three chunks of one source about the port, one of another: the hits hold server.md three times.
    kb.add_text(
        "The server port is 7341 by default. The port can change with --port. "
        "A busy port makes the server say which port it could not bind.",
        "docs/server.md",
    )
    kb.add_text("The proxy port is 8765 unless --port says otherwise.", "docs/proxy.md")
    hits = kb.search("Which port does the server use?", 3)
    assert [h.source for h in hits].count("docs/server.md") >= 2  # else this test checks nothing
    with FakeUpstream(lambda path, body: Reply(["Port ", "7341."])) as up:
        server = make_server(kb, up.url, port=0, k=3)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
            body = {"model": "m", "messages": [{"role": "user", "content": "Which port does the server use?"}]}
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            conn.close()
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)
    [retrieval] = answer["clanker_rag"]["retrievals"]
    expected = list(dict.fromkeys(h.source for h in hits))
    assert retrieval["sources"] == expected and len(expected) == len(set(expected))
