"""The collector pause around bulk work: state restored, survivors promoted, cycles still freed.

The tests observe what ``collector_paused`` itself does (its calls to ``gc.freeze`` and
``gc.unfreeze``, and the collector's on/off state), never global counts that other
threads or earlier tests move.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from clanker_rag import _gc_pause
from clanker_rag._gc_pause import collector_paused


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


class Recorder:
    """Stands in for the ``gc`` module inside ``_gc_pause``: records freezes, fakes the freeze count."""

    def __init__(self, freeze_count: int) -> None:
        self.calls: list[str] = []
        self.freeze_count = freeze_count
        self.enabled = True

    def isenabled(self) -> bool:
        return self.enabled

    def disable(self) -> None:
        self.calls.append("disable")
        self.enabled = False

    def enable(self) -> None:
        self.calls.append("enable")
        self.enabled = True

    def get_freeze_count(self) -> int:
        return self.freeze_count

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")


@pytest.mark.slow
def test_survivors_skip_the_young_generations_and_cycles_are_still_freed(collector_on: None) -> None:
    if gc.get_freeze_count():
        pytest.skip("an earlier test left objects frozen; the promotion is covered by the recorder tests")
    gc.collect()
    with collector_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(50_000)]  # an index's worth of small containers
        a, b = Node(), Node()
        a.other, b.other = b, a  # garbage with a cycle, made inside the block
        probe = weakref.ref(a)
        del a, b
    assert gc.isenabled()
    assert any(kept[0] is obj for obj in gc.get_objects(generation=2))  # promoted to the oldest generation
    gc.collect()
    assert probe() is None  # a full collection still frees the cycle


def test_freezes_and_unfreezes_once_when_nothing_was_frozen_on_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(freeze_count=0)
    monkeypatch.setattr(_gc_pause, "gc", rec)
    with collector_paused():
        rec.freeze_count = 7  # another thread freezes objects while the block runs
        assert rec.calls == ["disable"]
    assert rec.calls == ["disable", "freeze", "unfreeze", "enable"]


def test_a_programs_own_frozen_objects_stay_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(freeze_count=100)
    monkeypatch.setattr(_gc_pause, "gc", rec)
    with collector_paused():
        rec.freeze_count = 0  # the program's frozen objects are freed while the block runs
    assert "freeze" not in rec.calls and "unfreeze" not in rec.calls  # decided on entry
    assert rec.calls == ["disable", "enable"]


def test_an_exception_in_the_block_still_restores_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(freeze_count=0)
    monkeypatch.setattr(_gc_pause, "gc", rec)
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert rec.calls == ["disable", "freeze", "unfreeze", "enable"]


def test_nested_and_disabled_collector_are_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(freeze_count=0)
    monkeypatch.setattr(_gc_pause, "gc", rec)
    with collector_paused():
        with collector_paused():
            pass
        assert not rec.enabled  # the inner block found it off and left it off
        assert rec.calls == ["disable", "disable"]
    assert rec.enabled
    assert rec.calls == ["disable", "disable", "freeze", "unfreeze", "enable"]  # only the outer block promotes
    rec.calls.clear()
    rec.enabled = False
    with collector_paused():
        pass
    assert not rec.enabled  # the caller's choice stays
    assert rec.calls == ["disable"]


def test_the_real_collector_state_is_restored(collector_on: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
