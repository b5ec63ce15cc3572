"""What "a knowledge base" offers: ``KnowledgeBaseLike``, met by both knowledge bases, and nothing internal public."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest

from clanker_rag._kb import KnowledgeBase
from clanker_rag._types import KnowledgeBaseLike, Retriever, Sources
from clanker_rag.cluster import ShardedKnowledgeBase


def _as_protocol(one: KnowledgeBase, sharded: ShardedKnowledgeBase) -> list[KnowledgeBaseLike]:
    # Checked by mypy (the suite's own check): both classes are structurally a KnowledgeBaseLike.
    return [one, sharded]


def protocol_members() -> dict[str, object]:
    """Every member the protocol and the protocols it extends name (their own, not ``Protocol``'s)."""
    members: dict[str, object] = {}
    for proto in reversed(KnowledgeBaseLike.__mro__):
        if proto in (object, Protocol) or not getattr(proto, "_is_protocol", False):
            continue
        for name, value in vars(proto).items():
            if not name.startswith("_") or name in ("__len__", "__contains__", "__call__"):
                members[name] = value
    return members


def test_the_protocol_names_what_both_offer() -> None:
    names = set(protocol_members())
    assert {"search", "explain", "collection_stats", "sources", "source_text", "chunks"} <= names
    assert {"add_text", "add_texts", "remove", "ingest", "save", "path", "analyzer", "__len__"} <= names
    assert {Sources, Retriever} <= set(KnowledgeBaseLike.__mro__)


@pytest.mark.parametrize("make", [KnowledgeBase, lambda: ShardedKnowledgeBase(1)])
def test_both_knowledge_bases_take_every_parameter_the_protocol_names(make: Callable[[], object]) -> None:
    made = make()
    cls = type(made)
    for name, member in protocol_members().items():
        assert hasattr(made, name), f"{cls.__name__} has no {name}"
        if isinstance(member, property):
            assert not callable(getattr(made, name)) or name == "analyzer", f"{cls.__name__}.{name} is a method"
            continue
        assert callable(member), name
        wanted = inspect.signature(member).parameters
        got = inspect.signature(getattr(cls, name)).parameters
        takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in got.values())
        for pname, param in wanted.items():
            if param.kind is param.VAR_KEYWORD:
                assert takes_any_keyword, f"{cls.__name__}.{name} takes no **{pname}"
                continue
            assert pname in got, f"{cls.__name__}.{name} has no parameter {pname}"
            if param.default is not param.empty:
                assert got[pname].default is not got[pname].empty, f"{cls.__name__}.{name}: {pname} needs a default"
        # Anything more the implementation takes has a default: a protocol call never misses it.
        for pname, param in got.items():
            if pname not in wanted and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                assert param.default is not param.empty, f"{cls.__name__}.{name}: extra {pname} without a default"


def test_a_knowledge_base_passes_as_the_protocol_at_run_time(tmp_path: Path) -> None:
    kb = KnowledgeBase()
    kb.add_text("the harbour lantern glows at night", "a.md")
    sharded = ShardedKnowledgeBase(2)
    sharded.add_text("the harbour lantern glows at night", "a.md")
    for each in _as_protocol(kb, sharded):
        assert isinstance(each, Retriever)
        assert [h.source for h in each.search("lantern", 1)] == ["a.md"]
        assert each.sources() == ["a.md"] and "a.md" in each and len(each) == 1
        assert isinstance(each, KnowledgeBaseLike)  # what the web pages tell a knowledge base by
        assert each.source_count() == 1 and list(each.iter_sources()) == ["a.md"]
        assert each.collection_stats(["lantern"]).df == {"lantern": 1}
        hit = each.search("lantern", 1)[0]
        assert each.explain("lantern", hit).score == hit.score
    assert KnowledgeBase.load(kb.save(tmp_path / "one")).sources() == ["a.md"]


# What the knowledge base offers (and nothing else public: its hooks are the writer's or private).
PUBLIC = {
    "add_text", "add_texts", "analyzer", "bm25", "chunker", "chunks", "collection_stats", "data_rewritten",
    "default", "edit", "explain", "generation", "ingest", "iter_sources", "load", "n_terms", "optimize", "path",
    "remove", "save", "search", "segments", "source_count", "source_metadata", "source_text", "sources", "verify",
}  # fmt: skip
HOOKS = (
    "add_prepared", "add_counted", "takes_prepared", "is_intact", "would_replace", "search_with_stats",
    "explain_with_stats",
)  # fmt: skip


def test_the_internal_hooks_are_not_public() -> None:
    kb = KnowledgeBase()
    public = {name for name in dir(kb) if not name.startswith("_")}
    assert public == PUBLIC
    for hook in HOOKS:
        assert not hasattr(kb, hook) and not hasattr(ShardedKnowledgeBase, hook), hook
