"""Every MCP input is bounded: an oversized argument is refused at once with the limit it broke.

A ``where`` list is matched against every source by a linear scan, and MCP
calls take turns on the index: one call with 200 000 values held every other
call for seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clanker_rag import ConfigError, KnowledgeBase
from clanker_rag.integrations._adapters import MAX_WHERE_CHARS, MAX_WHERE_KEYS, MAX_WHERE_VALUES, check_where
from clanker_rag.integrations._mcp import MAX_PATH_CHARS, RESOURCE_PREFIX, KnowledgeService


@pytest.fixture
def service(tmp_path: Path) -> KnowledgeService:
    kb = KnowledgeBase()
    kb.add_text("herons wade in the shallow water", "birds.md", metadata={"team": "a"})
    kb.add_text("egrets wade too", "more.md", metadata={"team": "b"})
    kb.save(tmp_path / "idx")
    return KnowledgeService(KnowledgeBase.load(tmp_path / "idx"), tmp_path / "idx")


def test_a_where_list_past_the_limit_is_refused(service: KnowledgeService) -> None:
    with pytest.raises(ConfigError, match=rf"lists 200000 values; the limit is {MAX_WHERE_VALUES}"):
        service.search("wade", where={"team": [f"x{i}" for i in range(200_000)]})


def test_a_where_list_at_the_limit_still_filters(service: KnowledgeService) -> None:
    values = ["b", *(f"x{i}" for i in range(MAX_WHERE_VALUES - 1))]
    results = service.search("wade", where={"team": values})["results"]
    assert [r["source"] for r in results] == ["more.md"]


def test_too_many_where_keys_are_refused(service: KnowledgeService) -> None:
    where = {f"k{i}": "v" for i in range(MAX_WHERE_KEYS + 1)}
    with pytest.raises(ConfigError, match=f"the limit is {MAX_WHERE_KEYS}"):
        service.search("wade", where=where)


@pytest.mark.parametrize(
    "where",
    [
        {"k" * (MAX_WHERE_CHARS + 1): "v"},
        {"team": "v" * (MAX_WHERE_CHARS + 1)},
        {"team": ["a", "v" * (MAX_WHERE_CHARS + 1)]},
    ],
)
def test_a_where_key_or_value_too_long_is_refused(service: KnowledgeService, where: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=f"the limit is {MAX_WHERE_CHARS}"):
        service.search("wade", where=where)


def test_the_adapters_share_the_bounds() -> None:
    with pytest.raises(ConfigError, match="the limit is"):
        check_where({"team": list(range(MAX_WHERE_VALUES + 1))})
    assert check_where({"team": ("a", "b")}) == {"team": ["a", "b"]}


def test_k_past_the_limit_is_refused(service: KnowledgeService) -> None:
    with pytest.raises(ConfigError, match=r"k=1000000000 is out of range: expected an integer in \[1, 100\]"):
        service.search("wade", k=10**9)
    with pytest.raises(ConfigError, match=r"k=21 is out of range: expected an integer in \[1, 20\]"):
        service.retrieve("wade", k=21)


def test_show_refuses_a_source_name_past_the_limit(service: KnowledgeService) -> None:
    with pytest.raises(ConfigError, match=f"the limit is {MAX_PATH_CHARS}"):
        service.show("s" * (MAX_PATH_CHARS + 1))


def test_a_resource_uri_past_the_limit_names_nothing(service: KnowledgeService) -> None:
    assert service.resource_text(RESOURCE_PREFIX + "a" * (4 * MAX_PATH_CHARS)) is None
    assert service.resource_text(RESOURCE_PREFIX + "birds.md") is not None
