"""The entropy-trend trigger (ETC) beside FLARE: uncertainty that rises and accelerates within a sentence."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import pytest

from clanker_rag import ConfigError
from clanker_rag._kb import KnowledgeBase
from clanker_rag._stream._controller import InjectEvent, RagController, RetrieveEvent
from clanker_rag._stream._generate import Token
from clanker_rag._stream._settings import Triggers


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    base = KnowledgeBase(chunk_size=None)
    base.add_text("The clanker server listens on port 7341 by default.", "docs/server.md")
    return base


def tokens(pairs: Sequence[tuple[str, float]]) -> list[Token]:
    return [Token(text, math.log(p)) for text, p in pairs]


# Probabilities 0.9, 0.8, 0.5, 0.05: surprisal 0.11, 0.22, 0.69, 3.0 nats, rising faster and faster.
RISING = tokens([("The", 0.9), (" clanker", 0.8), (" server", 0.5), (" port", 0.05), (" is", 0.9), (" x.", 0.9)])
# Every token equally sure: no trend.
FLAT = tokens([("The", 0.6), (" clanker", 0.6), (" server", 0.6), (" port", 0.6), (" is", 0.6), (" x.", 0.6)])
TAIL = tokens([(" Then", 0.9), (" more", 0.9), (".", 0.9)])


def run(kb: KnowledgeBase, pieces: list[Token], threshold: float | None) -> tuple[list[object], list[str]]:
    prompts: list[str] = []

    def generate(prompt: str, stop: Sequence[str]) -> Iterator[Token]:
        prompts.append(prompt)
        return iter(pieces + TAIL if len(prompts) == 1 else [Token(" Done.", math.log(0.9))])

    ctl = RagController(kb, tools=False, triggers=Triggers(entropy_trend=threshold), k=1)
    return list(ctl.events(generate, "Q: ")), prompts


def test_rising_accelerating_uncertainty_retrieves_after_the_sentence(kb: KnowledgeBase) -> None:
    events, prompts = run(kb, RISING, 1.0)
    assert [(ev.kind, ev.query) for ev in events if isinstance(ev, RetrieveEvent)] == [
        ("entropy", "The clanker server port is x.")
    ]
    [block] = [ev for ev in events if isinstance(ev, InjectEvent)]
    # The sentence stays; the block follows it and the model goes on from there.
    assert prompts[1] == "Q: The clanker server port is x." + block.block


def test_flat_uncertainty_or_a_high_threshold_retrieves_nothing(kb: KnowledgeBase) -> None:
    for pieces, threshold in ((FLAT, 0.0), (RISING, 5.0), (RISING, None)):
        events, prompts = run(kb, pieces, threshold)
        assert not [ev for ev in events if isinstance(ev, RetrieveEvent)], threshold
        assert len(prompts) == 1


def test_the_threshold_is_checked() -> None:
    with pytest.raises(ConfigError, match="entropy_trend"):
        Triggers(entropy_trend=-1.0)
