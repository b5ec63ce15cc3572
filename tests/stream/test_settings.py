"""The controller's typed settings: checked when built, frozen, and the README's usage unchanged."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from clanker_rag import BlockLayout, Hooks, Limits, RagController, Triggers
from clanker_rag._exceptions import ConfigError
from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._controller import InjectEvent, RetrieveEvent, TextEvent
from clanker_rag._validate import short  # repr cut to 60 characters

# The one shape of every refused parameter (clanker_rag._validate.out_of_range).
SHAPE = re.compile(r"^(?P<name>\w+)=(?P<value>.+) is out of range: expected (?P<expected>.+)$")

BAD_SETTINGS: list[tuple[Callable[..., object], str, object, str]] = [
    (Triggers, "flare", "sideways", "one of None, 'rewind', 'append'"),
    (Triggers, "flare", True, "one of None, 'rewind', 'append'"),
    (Triggers, "flare_threshold", float("nan"), "a finite number"),
    (Triggers, "flare_threshold", "low", "a finite number"),
    (Triggers, "min_score", float("inf"), "a finite number or None"),
    (Triggers, "tool_query", "both", "one of 'model', 'merge', 'fuse', 'first'"),
    (Triggers, "query_rewriter", "not callable", "a callable str -> list[str] or None"),
    (Limits, "max_injections", -1, "an integer >= 0"),
    (Limits, "max_injections", 2.0, "an integer >= 0"),
    (Limits, "max_injections", True, "an integer >= 0"),
    (Limits, "retrieval_timeout", 0, "a finite number > 0 or None"),
    (Limits, "retrieval_timeout", -1.5, "a finite number > 0 or None"),
    (Limits, "on_timeout", "ignore", "one of 'skip', 'raise'"),
    (Limits, "max_payload", 0, "an integer >= 1"),
    (BlockLayout, "block_chars", 63, "an integer >= 64"),
    (BlockLayout, "block_chars", "2000", "an integer >= 64"),
    (BlockLayout, "after_block", None, "a str"),
    (BlockLayout, "question_tail", b"A:", "a str or None"),
    (Hooks, "on_retrieve", [], "a callable (query, hits) or None"),
    (Hooks, "on_inject", "print", "a callable (block text) or None"),
    (Hooks, "on_block", 1, "a callable (InjectEvent) or None"),
]


@pytest.mark.parametrize(("cls", "name", "bad", "expected"), BAD_SETTINGS)
def test_each_setting_refuses_a_bad_value_in_the_one_shape(
    cls: Callable[..., object], name: str, bad: Any, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        cls(**{name: bad})
    m = SHAPE.match(str(info.value))
    assert m is not None, str(info.value)
    assert (m["name"], m["value"], m["expected"]) == (name, short(bad), expected)


@pytest.mark.parametrize(
    ("name", "bad", "expected"),
    [
        ("k", 0, "an integer >= 1"),
        ("k", 2.5, "an integer >= 1"),
        ("tools", 1, "True or False"),
        ("questions", "yes", "True or False"),
        ("show_blocks", None, "True or False"),
        ("stop", "</s>", "a sequence of str"),
        ("stop", ["\n", 3], "a sequence of str"),
        ("handlers", [("calc", str)], "a mapping of tool name to fn(payload) -> str, or None"),
        ("limits", {"max_injections": 2}, "a Limits"),
        ("triggers", Limits(), "a Triggers"),
        ("layout", None, "a BlockLayout"),
        ("hooks", print, "a Hooks"),
    ],
)
def test_the_controller_s_own_keywords_are_checked_in_the_same_shape(name: str, bad: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        RagController(KnowledgeBase(), **{name: bad})
    m = SHAPE.match(str(info.value))
    assert m is not None, str(info.value)
    assert (m["name"], m["value"], m["expected"]) == (name, short(bad), expected)


@pytest.mark.parametrize("settings", [Triggers(), Limits(), BlockLayout(), Hooks()])
def test_settings_are_frozen(settings: object) -> None:
    field = dataclasses.fields(settings)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(settings, field, getattr(settings, field))
    with pytest.raises((AttributeError, TypeError)):  # slots: no new attribute either
        settings.extra = 1  # type: ignore[attr-defined]


def test_a_changed_copy_is_checked_again() -> None:
    assert dataclasses.replace(Limits(), max_injections=2).max_injections == 2
    with pytest.raises(ConfigError, match=r"^max_injections=-2 is out of range"):
        dataclasses.replace(Limits(), max_injections=-2)


@pytest.mark.parametrize(
    "removed",
    [
        ("flare", "append"),
        ("flare_threshold", -1.0),
        ("min_score", 0.5),
        ("tool_query", "fuse"),
        ("query_rewriter", lambda q: [q]),
        ("max_injections", 2),
        ("retrieval_timeout", 1.0),
        ("on_timeout", "raise"),
        ("max_payload", 500),
        ("block_chars", 1000),
        ("after_block", "Answer:"),
        ("question_tail", "A:"),
        ("on_retrieve", print),
        ("on_inject", print),
        ("on_block", print),
    ],
)
def test_a_keyword_moved_into_the_settings_is_a_type_error_naming_it(removed: tuple[str, Any]) -> None:
    name, value = removed
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{name}'"):
        RagController(KnowledgeBase(), **{name: value})


def _kb() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("The proxy listens on port 8765 by default.", "docs/proxy.md")
    kb.add_text("Workers start four threads each.", "docs/workers.md")
    return kb


def _model(prompts: list[str]) -> Callable[[str, Sequence[str]], Iterator[str]]:
    def generate(prompt: str, stop: Sequence[str]) -> Iterator[str]:
        prompts.append(prompt)
        yield from ["It is ", "port 8765."]

    return generate


def test_the_readme_example_works_as_written() -> None:
    prompt = "Q: Which port does the proxy use?\nA:"
    prompts: list[str] = []
    controller = RagController(_kb(), questions=True)
    text = "".join(controller.stream(_model(prompts), prompt))
    # The question's block reaches the model before it answers, and the reader sees it too.
    assert prompts[0].startswith(prompt + "\n<context>\n[1] docs/proxy.md")
    assert text.startswith("\n<context>\n[1] docs/proxy.md") and text.endswith("It is port 8765.")

    events = list(RagController(_kb(), questions=True).events(_model([]), prompt))
    [retrieve] = [ev for ev in events if isinstance(ev, RetrieveEvent)]
    assert retrieve.query == "Which port does the proxy use?" and retrieve.kind == "question"
    assert [type(ev) for ev in events] == [RetrieveEvent, InjectEvent, TextEvent, TextEvent]


def test_the_settings_objects_take_effect() -> None:
    model = _model([])
    question = "Q: Which port does the proxy use?\nA:"
    none = list(RagController(_kb(), questions=True, limits=Limits(max_injections=0)).events(model, question))
    assert not [ev for ev in none if isinstance(ev, (RetrieveEvent, InjectEvent))]
    seen: list[str] = []
    ctl = RagController(
        _kb(),
        k=1,
        questions=True,
        layout=BlockLayout(block_chars=64),
        hooks=Hooks(on_inject=seen.append),
    )
    list(ctl.events(model, question))
    assert len(seen) == 1 and len(seen[0]) <= 64
    assert ctl.limits == Limits() and ctl.triggers == Triggers() and ctl.layout == BlockLayout(block_chars=64)
