"""Several windows answered alone, the answer the model is surest of kept (``_answer/_candidates``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from _fake_server import Exchange, FakeServer, Handle
from hypothesis import given
from hypothesis import strategies as st

from clanker_rag._answer import _ask
from clanker_rag._answer._ask import ask_events, base_model_events
from clanker_rag._answer._candidates import Confidence, OneWindow, RankedWindows, answer_of, surest_events
from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._controller import InjectEvent, RetrieveEvent, StreamEvent, TextEvent
from clanker_rag._stream._generate import Token
from clanker_rag._types import Hit

DOCS = {
    "docs/server.md": "# Server\n\nThe server listens on port 7341 by default.\nStop it with Ctrl-C.\n",
    "docs/proxy.md": "# Proxy\n\nThe proxy server listens on port 9050 unless told otherwise.\nIt logs to stderr.\n",
    "docs/cache.md": "# Cache\n\nThe cache server keeps 64 entries and listens on a socket.\n",
}
QUESTION = "Which port does the server listen on?"
_NUMBER = re.compile(r"\d{2,}")


def kb_of(docs: dict[str, str]) -> KnowledgeBase:
    kb = KnowledgeBase(chunk_size=None)
    for source, text in docs.items():
        kb.add_text(text, source)
    return kb


class FakeLlama:
    """llama.cpp's ``/props`` (a base model) and ``/completion``: the answer is the block's number, and
    the model is unsure (log-probability ``unsure``) of the first window it is shown, sure of the others."""

    def __init__(self, *, probabilities: bool = True, unsure: float = -3.0) -> None:
        self.probabilities = probabilities
        self.unsure = unsure
        self.blocks: list[str] = []  # the block of each answer request, in order

    def __call__(self, ex: Exchange) -> None:
        if ex.method == "GET":
            ex.json(200 if ex.path == "/props" else 404, {"chat_template": ""})
            return
        prompt = ex.body["prompt"]
        start = prompt.rindex("<context>")
        block = prompt[start : prompt.index("</context>", start) + len("</context>")]
        self.blocks.append(block)
        found = _NUMBER.search(block)
        words = ["port", found.group() if found else "none"]
        sure = -0.1 if block != self.blocks[0] else self.unsure
        ex.stream()
        for word in words:
            event: dict[str, Any] = {"content": " " + word, "stop": False}
            if self.probabilities and ex.body.get("n_probs"):
                event["completion_probabilities"] = [{"id": 1, "token": " " + word, "logprob": sure}]
            ex.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        final = {"content": "\n", "stop": True, "stop_type": "word", "stopping_word": "\n"}
        ex.write(b"data: " + json.dumps(final).encode() + b"\n\n")


def _asked(kb: KnowledgeBase, url: str) -> tuple[str, list[str]]:
    events = list(ask_events(kb, QUESTION, url, max_tokens=16))
    answer = "".join(ev.text for ev in events if isinstance(ev, TextEvent)).strip()
    return answer, [ev.block.strip() for ev in events if isinstance(ev, InjectEvent)]


def test_the_surest_answer_is_kept_with_the_block_it_came_from(
    fake_server: Callable[[Handle], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ask, "ANSWER_CANDIDATES", 2)
    monkeypatch.setattr(_ask, "ANSWER_CANDIDATE_PENALTY", 0.5)
    fake = FakeLlama()
    answer, shown = _asked(kb_of(DOCS), fake_server(fake).url)
    assert len(fake.blocks) == 2 and fake.blocks[0] != fake.blocks[1]
    # The second window's answer (sure, -0.1 - 0.5 beats -3.0), and the one block shown is its own.
    assert shown == [fake.blocks[1]]
    number = _NUMBER.search(fake.blocks[1])
    assert number is not None and answer == f"port {number.group()}"


def test_a_penalty_the_later_window_cannot_beat_keeps_the_first(
    fake_server: Callable[[Handle], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ask, "ANSWER_CANDIDATES", 2)
    monkeypatch.setattr(_ask, "ANSWER_CANDIDATE_PENALTY", 5.0)
    fake = FakeLlama()
    answer, shown = _asked(kb_of(DOCS), fake_server(fake).url)
    assert len(fake.blocks) == 2 and shown == [fake.blocks[0]]
    number = _NUMBER.search(fake.blocks[0])
    assert number is not None and answer == f"port {number.group()}"


def test_a_server_without_probabilities_answers_from_the_first_window_only(
    fake_server: Callable[[Handle], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ask, "ANSWER_CANDIDATES", 3)
    fake = FakeLlama(probabilities=False)
    answer, shown = _asked(kb_of(DOCS), fake_server(fake).url)
    assert len(fake.blocks) == 1 and shown == fake.blocks
    assert answer.startswith("port ")


def test_one_candidate_is_the_single_window_path(
    fake_server: Callable[[Handle], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ask, "ANSWER_CANDIDATES", 1)
    fake = FakeLlama()
    _asked(kb_of(DOCS), fake_server(fake).url)
    assert len(fake.blocks) == 1


def test_candidates_are_not_asked_of_a_server_without_grammars() -> None:
    # Not llama.cpp: no probabilities to choose by, so one generation, as before.
    prompts: list[str] = []

    def generate(prompt: str, stop: Sequence[str] = ()) -> Iterator[str]:
        prompts.append(prompt)
        return iter([" Answer: port 7341\n"])

    events = list(base_model_events(kb_of(DOCS), QUESTION, generate, llama_cpp=False, candidates=3))
    assert len(prompts) == 1 and "7341" in answer_of(events)


# -- the parts -----------------------------------------------------------------------------------------


def _hit(text: str, source: str = "a.md") -> Hit:
    return Hit(text=text, source=source, score=1.0, start=0, end=len(text), start_line=1, end_line=1)


class _Counting:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.calls = 0

    def search(self, query: str, k: int = 10, **kwargs: Any) -> list[Hit]:
        self.calls += 1
        return self.hits[:k]


def test_ranked_windows_search_once_and_one_window_shows_its_own() -> None:
    inner = _Counting([_hit("one"), _hit("two")])
    ranked = RankedWindows(inner, 6)
    assert [h.text for h in OneWindow(ranked, 1).search("q", 3)] == ["two"]
    assert [h.text for h in OneWindow(ranked, 0).search("q", 3)] == ["one"]
    assert OneWindow(ranked, 2).search("q", 3) == []
    assert inner.calls == 1
    OneWindow(ranked, 0).search("other", 3)
    assert inner.calls == 2


def test_confidence_asks_for_probabilities_and_averages_the_words() -> None:
    seen: list[dict[str, Any]] = []

    def inner(prompt: str, stop: Sequence[str] = (), *, options: dict[str, Any] | None = None) -> Iterator[Token]:
        seen.append(dict(options or {}))
        return iter([Token(" a", -1.0), Token(" b", -3.0), Token("\n", -9.0)])

    confident = Confidence(inner)
    assert [t.text for t in confident("p", (), options={"grammar": "g"})] == [" a", " b", "\n"]
    assert seen == [{"grammar": "g", "n_probs": 1}]
    assert confident.score() == pytest.approx(-2.0)  # the line's end is not a word
    list(confident("p"))
    assert seen[-1] == {"n_probs": 1}

    def bare(prompt: str, stop: Sequence[str] = (), *, options: dict[str, Any] | None = None) -> Iterator[str]:
        return iter([" a"])

    unsure = Confidence(bare)
    list(unsure("p"))
    assert unsure.score() is None


def _scripted(answers: Sequence[tuple[str, float]]) -> tuple[Any, Any, list[int]]:
    """An answering path and a model: window ``i`` is answered ``answers[i]`` (text, log-probability per word)."""
    asked: list[int] = []

    def answer(shown: Any, generate: Callable[..., Iterator[Any]]) -> Iterator[StreamEvent]:
        hits = shown.search("q", 3)
        yield RetrieveEvent("q", tuple(hits), "question", 0.0)
        if not hits:
            return
        asked.append(int(hits[0].text))
        yield InjectEvent(f"<context>{hits[0].text}</context>", "context", "question", "q")
        for piece in generate(hits[0].text, ()):
            yield TextEvent(piece.text)

    def model(prompt: str, stop: Sequence[str] = (), *, options: Any = None) -> Iterator[Token]:
        text, logprob = answers[int(prompt)]
        return iter([Token(" " + word, logprob) for word in text.split()])

    return answer, model, asked


@given(
    st.lists(st.tuples(st.sampled_from(["x", "y z", "w"]), st.floats(-10, 0)), min_size=1, max_size=5),
    st.integers(1, 5),
    st.floats(0, 5),
)
def test_the_kept_answer_is_the_best_scoring_candidate(
    answers: list[tuple[str, float]], candidates: int, penalty: float
) -> None:
    answer, model, asked = _scripted(answers)
    ranked = RankedWindows(_Counting([_hit(str(i)) for i in range(len(answers))]), 15)
    events = list(surest_events(answer, ranked, model, candidates=candidates, penalty=penalty))
    # Every window there is, up to ``candidates``, is answered once, in rank order.
    assert asked == list(range(min(candidates, len(answers))))
    scores = [answers[i][1] - penalty * i for i in asked]
    kept = scores.index(max(scores))  # ties: the higher window
    blocks = [ev.block for ev in events if isinstance(ev, InjectEvent)]
    assert blocks == [f"<context>{kept}</context>"]
    assert answer_of(events) == answers[kept][0]
