"""The checks and the filtered search shared by the MCP server and the framework retrievers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import ConfigError, Hit, KnowledgeBase
from clanker_rag._types import metadata_matches, source_matches
from clanker_rag.integrations._adapters import MAX_K, check_k, check_query, check_where, hit_fields, search_hits


class ListRetriever:
    """Returns its fixed hits, best first; takes no filters."""

    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.asked: list[int] = []

    def search(self, query: str, k: int = 10) -> list[Hit]:
        self.asked.append(k)
        return self.hits[:k]


_hit = st.builds(
    Hit,
    text=st.just("t"),
    source=st.sampled_from(["a/x.md", "a/y.md", "b/z.md", "c.txt"]),
    score=st.floats(min_value=0, max_value=10),
    metadata=st.fixed_dictionaries({"team": st.sampled_from(["ops", "home", 3])}),
)


@settings(max_examples=150, deadline=None)
@given(
    hits=st.lists(_hit, max_size=30),
    k=st.integers(min_value=1, max_value=8),
    source=st.sampled_from([None, "a/", "a/*.md", "c.txt", "zzz"]),
    where=st.sampled_from([None, {"team": "ops"}, {"team": ["home", 3]}]),
)
def test_post_filtering_keeps_order_matches_and_k(hits, k, source, where) -> None:
    retriever = ListRetriever(hits)
    got = search_hits(retriever, "q", k, source=source, where=where)
    asked = retriever.asked[0]
    expected = [h for h in hits[:asked] if source_matches(h.source, source) and metadata_matches(h.metadata, where)]
    assert got == expected[:k]
    assert asked == (k if source is None and where is None else 5 * k)


def test_filters_go_to_a_retriever_that_takes_them() -> None:
    kb = KnowledgeBase()
    for i in range(30):
        kb.add_text(f"common words here {i}\n", f"noise/{i}.md")
    kb.add_text("common words here too\n", "keep/one.md", {"team": "ops"})
    # The only matching source ranks last; filtering before ranking still finds it.
    assert [h.source for h in search_hits(kb, "common words", 1, source="keep/")] == ["keep/one.md"]
    assert [h.source for h in search_hits(kb, "common words", 1, where={"team": "ops"})] == ["keep/one.md"]


@pytest.mark.parametrize("bad", [0, -1, MAX_K + 1, 2.0, "3", True, None])
def test_check_k_names_value_and_range(bad) -> None:
    with pytest.raises(ConfigError, match=rf"k={bad!r} is out of range: expected an integer in \[1, {MAX_K}\]"):
        check_k(bad)


def test_check_query_and_where() -> None:
    assert check_query(" ok ") == " ok "
    for bad, message in [(None, "must be a string"), ("", "empty"), ("x" * 10_001, "limit is 10000")]:
        with pytest.raises(ConfigError, match=message):
            check_query(bad)
    assert check_where({"a": ("x", 1)}) == {"a": ["x", 1]}
    assert check_where({}) is None
    bad_where: list[object] = [[("a", 1)], {"": 1}, {"a": {"b": 1}}, {"a": [[1]]}]
    for where in bad_where:
        with pytest.raises(ConfigError, match="where"):
            check_where(where)


def test_hit_fields_tolerate_minimal_hits() -> None:
    class Minimal:
        text, source, score = "t", "s", 1

    assert hit_fields(Minimal()) == {
        "source": "s",
        "score": 1.0,
        "start_line": None,
        "end_line": None,
        "section": None,
        "chunk_index": None,
        "metadata": {},
    }


def test_check_source_caps_the_length_of_a_glob() -> None:
    from clanker_rag.integrations._adapters import MAX_SOURCE_CHARS, check_source

    assert check_source("docs/*.md") == "docs/*.md"
    assert check_source("[" * MAX_SOURCE_CHARS) == "[" * MAX_SOURCE_CHARS
    # 30 000 "[" took the glob translation about a minute; refused before any is made.
    with pytest.raises(ConfigError, match=f"30000 characters long; the limit is {MAX_SOURCE_CHARS}"):
        check_source("[" * 30_000)
    from clanker_rag.integrations._mcp import KnowledgeService

    kb = KnowledgeBase()
    kb.add_text("some text", "docs/a.md")
    with pytest.raises(ConfigError, match="the limit is"):
        KnowledgeService(kb).search("text", 3, source="a*" * 15_000)
