"""Question-boundary retrieval searches the whole question: dotted names and abbreviations do not cut it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import InjectEvent, KnowledgeBase, RagController, RetrieveEvent

QUESTIONS = [
    "What does json.tool do?",
    "How do I call os.path.join on Windows?",
    "Why does e.g. the parser fail?",
    "Is Python 3.10.2 faster than 3.9 for setup.py, i.e. the build?",
    "Where does https://example.org/docs/index.html?q=1 point vs. Dr. Smith's page?",
]


def make_kb() -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("json.tool pretty-prints JSON. os.path.join joins paths on Windows too.", "docs/paths.md")
    kb.add_text("The parser fails on tabs; setup.py builds with Python 3.10.2.", "docs/parser.md")
    return kb


def retrieved(events: Sequence[object]) -> list[tuple[str, str]]:
    return [(ev.kind, ev.query) for ev in events if isinstance(ev, RetrieveEvent)]


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_prompt_s_question_is_searched_whole(question: str) -> None:
    events = list(RagController(make_kb(), questions=True).events(lambda p, s: iter([" ok."]), f"Q: {question}\nA:"))
    assert retrieved(events) == [("question", question)]


def test_the_prompt_s_question_is_its_last_one_under_a_chat_template() -> None:
    prompt = "<start_of_turn>user\nHi. What does json.tool do?<end_of_turn>\n<start_of_turn>model\n"
    events = list(RagController(make_kb(), questions=True).events(lambda p, s: iter([" ok."]), prompt))
    assert retrieved(events) == [("question", "What does json.tool do?")]


@pytest.mark.parametrize("cut", range(0, 60, 3))
def test_a_question_the_model_writes_is_searched_whole_however_it_is_streamed(cut: int) -> None:
    reply = " Intro first. Why does e.g. the parser fail? Then more."
    prompts: list[str] = []

    def generate(prompt: str, stop: Sequence[str]) -> Iterator[str]:
        prompts.append(prompt)
        if len(prompts) > 1:
            return iter([" Because of tabs."])
        return iter([reply[:cut], reply[cut:]])

    events = list(RagController(make_kb(), questions=True, tools=False).events(generate, "Notes:"))
    assert retrieved(events) == [("question", "Why does e.g. the parser fail?")]
    [block] = [ev.block for ev in events if isinstance(ev, InjectEvent)]
    # The block goes right after the question; what the model said after it is dropped.
    assert prompts[1] == "Notes: Intro first. Why does e.g. the parser fail?" + block
    assert "Then more" not in "".join(getattr(ev, "text", "") for ev in events)


def test_a_lowercase_word_after_a_dot_does_not_end_the_model_s_question() -> None:
    pieces = [" Hm. How do I ", "call os.", "path.", "join on ", "Windows? ", "Next"]
    events = list(RagController(make_kb(), questions=True, tools=False).events(iter(pieces), "Notes:"))
    assert retrieved(events) == [("question", "How do I call os.path.join on Windows?")]


# -- generated questions ------------------------------------------------------------------

_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_TOKEN = st.one_of(
    st.sampled_from(["the", "parser", "call", "fail", "on", "with", "Windows", "Django", "etc. and", "e.g. Flask"]),
    st.lists(_NAME, min_size=2, max_size=4).map(".".join),
    st.lists(st.integers(0, 20).map(str), min_size=2, max_size=3).map(".".join),
    _NAME.map(lambda n: n + ".py"),
    st.sampled_from(["e.g.", "i.e.", "vs.", "Dr.", "..."]),
)
_QUESTION = st.tuples(
    st.sampled_from(["What does", "How do I use", "Why does"]), st.lists(_TOKEN, min_size=1, max_size=5)
).map(lambda t: f"{t[0]} {' '.join(t[1])} work?")


@settings(max_examples=30)
@given(_QUESTION, st.integers(0, 200))
def test_a_generated_question_is_searched_whole_from_the_prompt_and_from_the_stream(question: str, cut: int) -> None:
    kb = make_kb()
    events = list(RagController(kb, questions=True).events(lambda p, s: iter([" ok."]), f"Q: {question}\nA:"))
    assert retrieved(events) == [("question", question)]

    reply = f" Intro. {question} More."
    cut %= len(reply) + 1
    events = list(RagController(kb, questions=True, tools=False).events(iter([reply[:cut], reply[cut:]]), "Notes:"))
    assert retrieved(events) == [("question", question)]
