"""Answering with base models: prompts, passage shaping, query formulation, server probing."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._answer._ask import (
    AnswerSettings,
    answer_controller,
    answer_text,
    ask_events,
    base_model_events,
    probe_server,
)
from clanker_rag._answer._focusing import FocusedRetriever
from clanker_rag._answer._prompts import EXAMPLES, STOP, after_block, base_prompt
from clanker_rag._exceptions import ConfigError
from clanker_rag._kb import KnowledgeBase
from clanker_rag._retrieval._focus import focus_hit
from clanker_rag._stream._blocks import BlockBuilder
from clanker_rag._stream._controller import InjectEvent, RagController, RetrieveEvent, StreamEvent, TextEvent
from clanker_rag._stream._settings import BlockLayout, Triggers
from clanker_rag._text._analysis import Analyzer
from clanker_rag._types import Hit
from tests.helpers._fake_server import Exchange, FakeServer, Handle

GUIDE = (
    "# Server\n\nThe server is started with the serve command and reads its settings from a file.\n"
    "Logs go to stderr. The default configuration works for most people.\n"
    "It listens on port 7341 by default; pass --port to change it.\n"
    "Requests are logged at INFO level. Stop it with Ctrl-C.\n"
)


def kb_of(docs: dict[str, str]) -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    for source, text in docs.items():
        kb.add_text(text, source)
    return kb


# -- passage shaping -------------------------------------------------------------------------------------------


def test_focus_keeps_the_lines_that_hold_the_query_terms() -> None:
    kb = kb_of({"docs/server.md": GUIDE})
    [hit] = FocusedRetriever(kb, budget=90).search("which port does it listen on by default", 1)
    assert "port 7341" in hit.text and len(hit.text) <= 90
    assert isinstance(hit, Hit)
    # Still an exact slice of the source, with its own line numbers.
    source = kb.source_text("docs/server.md")
    assert source is not None and source[hit.start : hit.end] == hit.text
    assert hit.start_line == hit.end_line == 5


def test_focus_leaves_short_hits_alone_and_checks_its_budget() -> None:
    hit = Hit("short text", "a.md", 1.0)
    assert focus_hit(hit, {"short"}, Analyzer(), 100) is hit
    with pytest.raises(ConfigError, match="budget"):
        FocusedRetriever(kb_of({"a.md": "x"}), budget=5)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.text(alphabet="abc xyz\t", max_size=30), min_size=1, max_size=25),
    terms=st.sets(st.sampled_from(["abc", "xyz", "ab", "c"]), max_size=3),
    budget=st.integers(min_value=40, max_value=200),
    offset=st.integers(min_value=0, max_value=50),
)
def test_focus_is_an_exact_window_within_budget(lines: list[str], terms: set[str], budget: int, offset: int) -> None:
    prefix = "p\n" * offset
    text = "\n".join(lines)
    source = prefix + text
    hit = Hit(text, "s.md", 1.0, start=len(prefix), end=len(source), start_line=offset + 1,
              end_line=offset + 1 + text.count("\n"))  # fmt: skip
    out = focus_hit(hit, terms, Analyzer(), budget)
    assert isinstance(out, Hit)
    assert len(out.text) <= max(budget, len(text) if len(text) <= budget else budget)
    assert source[out.start : out.end] == out.text
    assert out.text in text
    assert source.count("\n", 0, out.start) + 1 == out.start_line
    assert out.start_line <= out.end_line


# -- query formulation -------------------------------------------------------------------------------------------


class Recording:
    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.queries: list[str] = []

    def search(self, query: str, k: int = 10) -> list[Hit]:
        self.queries.append(query)
        return self.kb.search(query, k)


def tool_llm(prompt: str, stop: Sequence[str]) -> Iterator[str]:
    # A model that writes a poor query first, then answers after the block.
    if "<result>" not in prompt:
        yield '<tool name="retrieve">settings</tool>'
    else:
        yield "port 7341"


DOCS = {"docs/server.md": GUIDE, "docs/other.md": "The settings file is TOML. Settings are read once at start."}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("model", ["settings"]),
        ("merge", ["settings Which port does the server use?"]),
        ("fuse", ["Which port does the server use?", "settings"]),
        ("first", ["Which port does the server use?"]),
    ],
)
def test_tool_query_modes(mode: str, expected: list[str]) -> None:
    rec = Recording(kb_of(DOCS))
    ctl = RagController(rec, k=1, triggers=Triggers(tool_query=mode))  # type: ignore[arg-type]
    events = list(ctl.events(tool_llm, "Q: Which port does the server use?\nA:"))
    assert rec.queries == expected
    [retrieve] = [e for e in events if isinstance(e, RetrieveEvent)]
    assert retrieve.query == "settings"  # the event names the model's own query
    block = next(e.block for e in events if isinstance(e, InjectEvent))
    assert ("7341" in block) == (mode != "model")


def two_calls_llm(prompt: str, stop: Sequence[str]) -> Iterator[str]:
    # A model that searches twice before it answers.
    calls = prompt.count("<result>")
    if calls == 0:
        yield '<tool name="retrieve">settings</tool>'
    elif calls == 1:
        yield '<tool name="retrieve">settings file format</tool>'
    else:
        yield "TOML"


def test_tool_query_first_searches_the_question_once_then_the_model_s_words() -> None:
    rec = Recording(kb_of(DOCS))
    ctl = RagController(rec, k=1, triggers=Triggers(tool_query="first"))
    list(ctl.events(two_calls_llm, "Q: Which port does the server use?\nA:"))
    assert rec.queries == ["Which port does the server use?", "settings file format"]


def test_tool_query_first_after_up_front_context_uses_the_model_s_words() -> None:
    rec = Recording(kb_of(DOCS))
    ctl = RagController(rec, k=1, questions=True, triggers=Triggers(tool_query="first"))
    list(ctl.events(tool_llm, "Q: Which port does the server use?\nA:", question="Which port does the server use?"))
    assert rec.queries == ["Which port does the server use?", "settings"]


def test_tool_query_is_checked() -> None:
    with pytest.raises(ConfigError, match="tool_query"):
        RagController(kb_of(DOCS), triggers=Triggers(tool_query="both"))  # type: ignore[arg-type]


def test_after_block_is_read_by_the_model_but_not_shown() -> None:
    prompts: list[str] = []

    def llm(prompt: str, stop: Sequence[str]) -> Iterator[str]:
        prompts.append(prompt)
        yield "port 7341"

    ctl = RagController(kb_of(DOCS), k=1, tools=False, questions=True, layout=BlockLayout(after_block="Answer:"))
    events = list(ctl.events(llm, "Question: Which port does the server use?\n"))
    block = next(e.block for e in events if isinstance(e, InjectEvent))
    assert prompts == ["Question: Which port does the server use?\n" + block + "Answer:"]
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == "port 7341"


# -- prompts ------------------------------------------------------------------------------------------------------


def test_example_blocks_are_the_controller_s_own_layout() -> None:
    # The few-shot examples must look exactly like the blocks the model will get.
    for ex in EXAMPLES:
        hit = Hit(ex.passage, ex.source, 1.0, start_line=ex.lines[0], end_line=ex.lines[1])
        block = BlockBuilder().block("context", [hit])
        assert block in base_prompt("q?", "context")
        assert block.replace("context>", "result>") in base_prompt("q?", "tools")
        assert ex.answer not in base_prompt("q?", "none").split("Question: q?")[1]


def test_base_model_events_copy_only_on_llama_cpp_and_when_settings_say_so() -> None:
    # A base model on llama.cpp answers under the copy grammar; elsewhere, or with copy off, it writes freely.
    calls: list[dict[str, Any] | None] = []

    def llm(prompt: str, stop: Sequence[str], options: dict[str, Any] | None = None) -> Iterator[str]:
        calls.append(options)
        yield " port 7341"

    kb = kb_of({"docs/server.md": GUIDE, "docs/other.md": "The client retries a request three times.\n"})
    question = "Which port does the server listen on?"
    events = list(base_model_events(kb, question, llm, llama_cpp=True))
    block = next(e.block for e in events if isinstance(e, InjectEvent))
    assert "7341" in block and block.count("\n[") == 1  # one window per block
    assert calls[-1] is not None and "7341" in calls[-1]["grammar"]
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == "port 7341"
    calls.clear()
    list(base_model_events(kb, question, llm, llama_cpp=False))
    list(base_model_events(kb, question, llm, llama_cpp=True, settings=AnswerSettings(copy=False)))
    assert calls == [None, None]


def test_settings_are_checked_with_the_field_named() -> None:
    assert AnswerSettings().k == 1
    bad: list[dict[str, Any]] = [
        {"mode": "chat"}, {"tool_query": "all"}, {"k": 0}, {"window_chars": 39}, {"lead_words": 24},
        {"max_words": 0}, {"attach_chars": 0}, {"lead_words": True},
    ]  # fmt: skip
    for fields in bad:
        with pytest.raises(ConfigError, match=next(iter(fields))):
            AnswerSettings(**fields)


@pytest.mark.parametrize("mode", ["none", "context", "tools", "both"])
def test_base_prompt_layouts_end_where_the_model_continues(mode: str) -> None:
    prompt = base_prompt("Which  port?", mode)
    tail = prompt.rsplit("\n\n", 1)[-1]
    expected = {"none": "Question: Which port?\nAnswer:", "tools": "Question: Which port?\nSearch:"}
    assert tail == expected.get(mode, "Question: Which port?\n")
    assert all(stop not in ex.answer for ex in EXAMPLES for stop in STOP)
    with pytest.raises(ConfigError, match="mode"):
        base_prompt("q", "chat")


def test_answer_text_drops_the_label_and_the_search_line() -> None:
    block = InjectEvent("\n<result>\nx\n</result>\n", "result", "tool", "q")
    events: list[StreamEvent] = [TextEvent(" "), block, TextEvent("Ans"), TextEvent("wer: port"), TextEvent(" 7341")]
    assert [e.text for e in answer_text(events) if isinstance(e, TextEvent)] == ["port", " 7341"]
    plain = [TextEvent(" port 7341")]
    assert [e.text for e in answer_text(plain) if isinstance(e, TextEvent)] == ["port 7341"]
    short = [TextEvent("Ans")]
    assert [e.text for e in answer_text(short) if isinstance(e, TextEvent)] == ["Ans"]


def test_answer_controller_modes() -> None:
    kb = kb_of(DOCS)
    ctl = answer_controller(kb, "Which port?", AnswerSettings(mode="tools"))
    assert ctl.tools and not ctl.questions and ctl.layout.after_block == after_block("Which port?")
    ctl = answer_controller(kb, "Which port?", AnswerSettings(mode="context"))
    assert ctl.questions and not ctl.tools
    # Each hit is focused; the passages are the knowledge base's, in search's order.
    assert isinstance(ctl.retriever, FocusedRetriever) and ctl.retriever.sentence
    assert ctl.retriever.retriever is kb


# -- probing the server ------------------------------------------------------------------------------------------


def fake_llama(props: dict[str, Any] | None, im_start_tokens: int) -> Handle:
    """GET /props and POST /tokenize, like llama.cpp: ``props`` (None: no such route), and
    ``im_start_tokens`` tokens for whatever text is tokenized."""

    def handle(ex: Exchange) -> None:
        if ex.method == "GET":
            ex.json(200 if props is not None and ex.path == "/props" else 404, props or {})
        else:
            ex.json(200, {"tokens": list(range(im_start_tokens))})

    return handle


CHATML = "{{ '<|im_start|>' + message.role }}"


@pytest.mark.parametrize(
    ("props", "tokens", "llama", "base"),
    [
        ({"chat_template": CHATML}, 6, True, True),  # ChatML fallback the model cannot read: a base model
        ({"chat_template": CHATML}, 1, True, False),  # a ChatML model
        ({"chat_template": "{{ '<start_of_turn>' }}"}, 1, True, False),  # its own template
        ({"chat_template": ""}, 1, True, True),  # no template at all
        (None, 1, False, False),  # not llama.cpp: assume chat
    ],
)
def test_probe_server(
    props: dict[str, Any] | None, tokens: int, llama: bool, base: bool, fake_server: Callable[[Handle], FakeServer]
) -> None:
    info = probe_server(fake_server(fake_llama(props, tokens)).url + "/")
    assert (info.llama_cpp, info.base_model) == (llama, base)


def test_a_chat_model_gets_whole_passages_and_no_copy_grammar(fake_server: Callable[[Handle], FakeServer]) -> None:
    # A server with a chat template of its own: ask sends a chat request, free text, no grammar.
    def handle(ex: Exchange) -> None:
        if ex.method == "GET":
            ex.json(200, {"chat_template": "{{ '<start_of_turn>' }}"})
        else:
            ex.json(200, {"choices": [{"message": {"role": "assistant", "content": "Port 7341."}}]})

    server = fake_server(handle)
    events = list(ask_events(kb_of(DOCS), "Which port does the server use?", server.url))
    posts = [r for r in server.requests if r["method"] == "POST"]
    assert [r["path"] for r in posts] == ["/v1/chat/completions"]
    assert "grammar" not in posts[0]["body"] and "7341" in str(posts[0]["body"]["messages"])
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == "Port 7341."
