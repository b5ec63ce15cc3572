"""Sentence focus and constrained copying for base models (no server: a recording backend stands in)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer._focusing import FocusedRetriever, focus_sentence
from clanker_rag._answer._grammars import TOOL_GRAMMAR, CopyingBackend, copy_grammar, typed_words
from clanker_rag._answer._prompts import ANSWER_LABEL, SEARCH_LABEL
from clanker_rag._answer._sentences import SentenceQuery, sentence_spans, sentence_units
from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._blocks import BlockBuilder
from clanker_rag._stream._controller import InjectEvent, RagController
from clanker_rag._stream._settings import BlockLayout, Hooks
from clanker_rag._text._analysis import Analyzer
from clanker_rag._types import Hit
from tests.helpers._backends import Recorder
from tests.helpers._gbnf import allows

ANALYZER = Analyzer()


def asked(question: str, budget: int = 200) -> SentenceQuery:
    return SentenceQuery(question, set(ANALYZER(question)), ANALYZER, budget, 320)


def test_sentences_split_prose_and_rows() -> None:
    text = "It reads `a. b` first (see x. y) and then\nwraps here. Next one\n- an item\n| a | b. c |\n| d | e |\n\nEnd."
    got = [text[a:b] for a, b in sentence_spans(text)]
    assert got == [
        "It reads `a. b` first (see x. y) and then\nwraps here.",
        "Next one",
        "- an item",
        "| a | b. c |",
        "| d | e |",
        "End.",
    ]


@given(st.lists(st.sampled_from(["word", "a.", "`x", "(y", "|", "\n", " ", "```", "-", "7"]), max_size=40))
def test_sentences_are_ordered_disjoint_non_blank_slices(parts: list[str]) -> None:
    text = "".join(parts)
    spans = sentence_spans(text)
    last = 0
    for a, b in spans:
        assert last <= a < b <= len(text)
        assert text[a:b].strip() and not text[a].isspace()
        last = b


def test_focus_sentence_keeps_the_best_sentence_on_one_line() -> None:
    text = "The server starts fast.\nIt listens on port 7341 by\ndefault. Stop it with Ctrl-C."
    hit = Hit(text, "guide.md", 1.0, start=100, end=100 + len(text), start_line=5, end_line=7)
    out = focus_sentence(hit, asked("port default"))
    assert isinstance(out, Hit)
    assert out.text == "It listens on port 7341 by default."
    assert (out.start_line, out.end_line) == (6, 7)
    assert " ".join(text[out.start - 100 : out.end - 100].split()) == out.text


# The fact ends a sentence begun before a code block: "... with:", the formula, "with k1 = 1.2".
RESUMED = (
    "## Scoring\n\nThe default scoring is BM25 with:\n\n    score = k1 * tf\n\n"
    "with `k1 = 1.2` here. Each k1 is checked.\n"
)


def test_prose_resumed_after_a_code_block_is_about_its_lead_in_words() -> None:
    hit = Hit(RESUMED, "search.md", 1.0, start=0, end=len(RESUMED), start_line=1, end_line=8)
    out = focus_sentence(hit, asked("default k1 of the scoring"))
    assert out.text == "with `k1 = 1.2` here."
    assert isinstance(out, Hit)
    assert RESUMED[out.start : out.end] == out.text


@pytest.mark.parametrize(
    ("text", "joined"),
    [
        (RESUMED, True),
        ("Run it:\n\n```\nclanker-rag ask. x\n```\nthen look. Done.", True),
        ("Run it.\n\n    code here\n\nthen look.", False),  # the lead-in ended its sentence
        ("Run it:\n\n    code here\n\nThen look.", False),  # a new sentence
        ("Run it:\nthen look.", False),  # no code in between
    ],
)
def test_lead_ins_need_a_colon_code_and_lower_case(text: str, joined: bool) -> None:
    units = sentence_units(text, asked("x"))
    spans, leads = units.spans, units.lead_ins
    resumed = [k for k, (a, _) in enumerate(spans) if text[a:].startswith("then") or text[a:].startswith("with")]
    assert bool(leads) == joined
    if joined:
        assert list(leads) == resumed and text[spans[leads[resumed[0]]][0] :].startswith(("The default", "Run it:"))


def test_focused_retriever_sentence_mode_checks_budget_and_cuts() -> None:
    class One:
        def search(self, query: str, k: int = 10, **kwargs: object) -> list[Hit]:
            return [Hit("Alpha beta gamma. " * 20, "a.md", 1.0)]

    [hit] = FocusedRetriever(One(), budget=50, sentence=True).search("gamma", 1)
    assert hit.text == "Alpha beta gamma."


def test_copy_grammar_lists_passage_words_not_the_question_s() -> None:
    grammar = copy_grammar('listens on port 7341. "quoted" back\\slash', "Which port?")
    assert grammar.startswith('root ::= " " word')
    for word in ("7341.", "7341", '"quoted"', "back\\slash", "port"):
        assert allows(grammar, "word", word), word
    # Free to write the question's words, a small model echoes the question instead of answering.
    assert not allows(grammar, "word", "Which") and not allows(grammar, "word", "Ctrl-C")
    assert not allows(grammar, "word", "por") and not allows(grammar, "word", "7341..")
    # A passage without words: the question's are all there is.
    assert allows(copy_grammar("  ", "Which port?"), "word", "Which")


def test_copying_backend_constrains_answers_after_a_block_and_tool_calls_only() -> None:
    inner = Recorder()
    backend = CopyingBackend(inner, "Which port?")
    list(backend("Question: x\n" + ANSWER_LABEL))  # no block yet: nothing to copy from
    block = BlockBuilder().build("context", [Hit("port 7341", "a.md", 1.0)])
    backend.observe(InjectEvent.of(block, "question", "x"))
    backend.observe(InjectEvent.of(BlockBuilder().build("result", note="No new passages."), "tool", "x"))
    list(backend(f"Question: x{block.text}Question: x\n{ANSWER_LABEL}"))
    list(backend("Question: x\n" + SEARCH_LABEL))
    list(backend(block.text + "free text"))
    first, second, third, fourth = inner.calls
    assert first is None
    assert second is not None and '"7341"' in second["grammar"] and '"Which"' not in second["grammar"]
    assert third == {"grammar": TOOL_GRAMMAR}
    assert fourth is None


def test_copying_grammar_takes_every_passage_of_the_turn() -> None:
    inner = Recorder()
    backend = CopyingBackend(inner, "Which port?")
    builder = BlockBuilder()
    backend.observe(InjectEvent.of(builder.build("context", [Hit("port 7341", "a.md", 1.0)]), "question", "q"))
    two = [Hit("--port flag", "b.md", 1.0), Hit("default 7000", "c.md", 0.5)]
    backend.observe(InjectEvent.of(builder.build("result", two), "tool", "q"))
    list(backend("..." + ANSWER_LABEL))
    [options] = inner.calls
    assert options is not None
    assert all(allows(options["grammar"], "word", word) for word in ("7341", "--port", "7000"))


def test_the_controller_hands_the_copying_backend_each_block_before_resuming() -> None:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("The server listens on port 7341 by default.", "docs/server.md")
    inner = Recorder()
    backend = CopyingBackend(inner, "Which port does the server use?")
    ctl = RagController(
        kb,
        k=1,
        questions=True,
        tools=False,
        layout=BlockLayout(after_block=ANSWER_LABEL),
        hooks=Hooks(on_block=backend.observe),
    )
    events = list(ctl.events(backend, "Question: Which port does the server use?\n"))
    assert [type(ev).__name__ for ev in events][:2] == ["RetrieveEvent", "InjectEvent"]
    [options] = inner.calls
    assert options is not None and '"7341"' in options["grammar"]


def test_the_typed_word_comes_from_the_earliest_passage_holding_one() -> None:
    # Passages come best first: the second's number answers as well by its words, but the
    # answer must hold the first's; a first passage without a number leaves the second's.
    builder = BlockBuilder()
    question = "Which port does the server listen on?"
    best = Hit("The server listens on port 7341.", "a.md", 1.0)
    other = Hit("The server can listen on port 9000 instead.", "b.md", 0.9)
    none = Hit("The server listens on a port.", "c.md", 0.9)
    grammars = {}
    for name, hits in (("both", [best, other]), ("late", [none, other])):
        inner = Recorder()
        backend = CopyingBackend(inner, question, typed=True)
        backend.observe(InjectEvent.of(builder.build("context", hits), "question", "q"))
        list(backend("..." + ANSWER_LABEL))
        [options] = inner.calls
        assert options is not None
        grammars[name] = options["grammar"]
    typed = {key: grammar.split("typed ::= ", 1)[1] for key, grammar in grammars.items()}
    assert '"7341"' in typed["both"] and '"9000"' not in typed["both"]
    assert '"9000"' in typed["late"]
    # Every word of both passages may still be written around it.
    words = grammars["both"].split("typed ::= ", 1)[0]
    assert '"instead"' in words and '"9000"' in words


@given(st.lists(st.sampled_from(["port", "7341.", "--port", "is", "`x`", "7000"]), min_size=1, max_size=12))
def test_every_copy_grammar_ends_the_answer_within_its_word_limit(words: list[str]) -> None:
    # Progress: one line of at most max_words passage words, the asked-for word within lead_words + 1.
    passage = " ".join(words)
    grammar = copy_grammar(passage, "Which port?", typed_words(passage, "Which port?"), max_words=6, lead_words=2)
    root = grammar.splitlines()[0]
    assert root.endswith('"\\n"')  # one line, then the grammar ends
    bounds = [int(part.split("}", 1)[0]) for part in root.split("{0,")[1:]]
    assert sum(bounds) + 1 == 6  # one required word (the typed one, or the first), the rest optional
    if "typed ::=" in grammar:
        assert bounds[0] == 2
