"""The collector pause around bulk work: state restored, survivors promoted, cycles still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from clanker_rag._bulk import collector_paused


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_survivors_skip_the_young_generations_and_cycles_are_still_freed(collector_on: None) -> None:
    gc.collect()
    with collector_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(50_000)]  # an index's worth of small containers
        a, b = Node(), Node()
        a.other, b.other = b, a  # garbage with a cycle, made inside the block
        probe = weakref.ref(a)
        del a, b
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert gc.get_count()[0] < 1_000  # not left for a young collection to walk
    assert any(kept[0] is obj for obj in gc.get_objects(generation=2))
    assert probe() is not None  # only a full collection looks at the oldest generation...
    gc.collect()
    assert probe() is None  # ...and it frees the cycle


def test_nested_and_disabled_collector_are_respected(collector_on: None) -> None:
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # the inner block found it off
    assert gc.isenabled()
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()  # the caller's choice stays


def test_a_programs_own_frozen_objects_stay_frozen(collector_on: None) -> None:
    gc.collect()
    mine = [[i] for i in range(100)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            more = [[i] for i in range(100)]
        assert gc.get_freeze_count() == frozen  # nothing of ours joined, nothing of theirs left
        assert mine and more
    finally:
        gc.unfreeze()
