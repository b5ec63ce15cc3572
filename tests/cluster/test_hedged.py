"""Hedged reads over a shard's copies (``_cluster/_hedged.py``), on scripted calls: no Dask needed."""

import asyncio
import pickle

import pytest

from clanker_rag._cluster._hedged import Attempt, Latency, hedged_answers


class Scheduler:
    """The scheduler as the reads ask it: which workers hold which keys."""

    def __init__(self, holders):
        self.holders = holders

    async def who_has(self, keys):
        return {k: self.holders.get(k, []) for k in keys}


class Client:
    def __init__(self, holders=None):
        self.scheduler = Scheduler(holders or {})


def answer(value, delay=0.0, found=True, fail=None, log=None, name=""):
    """An actor call: after ``delay`` seconds, the pickled ``(found, value)`` (or raises ``fail``)."""

    def start():
        async def call():
            if log is not None:
                log.append(name)
            await asyncio.sleep(delay)
            if fail is not None:
                raise fail
            return pickle.dumps((found, value))

        return call()

    return start


def hang(log=None, name=""):
    return answer(None, delay=3600, log=log, name=name)


def run(reads, timeout=5.0, latency=None, holders=None):
    latency = latency or Latency()
    holders = holders or {a.key: [a.worker] for attempts in reads.values() for a in attempts}
    return asyncio.run(hedged_answers(Client(holders), reads, timeout, latency)), latency


def test_one_copy_answers_as_before():
    out, latency = run({0: [Attempt(answer("a"), "k0", "w1")], 1: [Attempt(answer("b"), "k1", "w2")]})
    assert out == {0: (True, "a"), 1: (True, "b")}
    assert latency.of("w1") < 1 and latency.of("w2") < 1


def test_a_hung_copy_is_hedged_and_then_avoided():
    log: list[str] = []
    reads = {0: [Attempt(hang(log, "w1"), "k0", "w1"), Attempt(answer("a", log=log, name="w2"), "k0m", "w2")]}
    latency = Latency()
    latency.saw("w1", 0.001)  # w1 looked fast: it is tried first
    latency.saw("w2", 0.002)
    out, latency = run(reads, latency=latency)
    assert out == {0: (True, "a")} and log == ["w1", "w2"]
    # The hung worker now counts as at least as slow as it kept the read waiting: w2 goes first next time.
    assert latency.of("w1") > latency.of("w2")
    log.clear()
    out, _ = run(reads, latency=latency)
    assert out == {0: (True, "a")} and log[0] == "w2"  # the copy that answered is now tried first


def test_a_failed_copy_falls_over_at_once():
    log: list[str] = []
    reads = {
        0: [
            Attempt(answer(None, fail=OSError("refused"), log=log, name="w1"), "k0", "w1"),
            Attempt(answer("a", log=log, name="w2"), "k0m", "w2"),
        ]
    }
    latency = Latency()
    latency.saw("w1", 0.5)  # a long hedge delay: only the failure can start w2 early
    latency.saw("w2", 0.9)
    out, _ = run(reads, latency=latency, timeout=0.3)
    assert out == {0: (True, "a")} and log == ["w1", "w2"]


def test_a_copy_that_no_longer_holds_its_shard_falls_over():
    reads = {0: [Attempt(answer(None, found=False), "k0", "w1"), Attempt(answer("a", delay=0.01), "k0m", "w2")]}
    out, _ = run(reads)
    assert out == {0: (True, "a")}


def test_every_copy_failing_gives_the_last_failure():
    reads = {
        0: [
            Attempt(answer(None, fail=OSError("one")), "k0", "w1"),
            Attempt(answer(None, fail=OSError("two")), "k0m", "w2"),
        ]
    }
    out, _ = run(reads)
    ok, exc = out[0]
    assert not ok and isinstance(exc, OSError)


def test_nothing_in_time_is_left_out():
    out, latency = run({0: [Attempt(hang(), "k0", "w1"), Attempt(hang(), "k0m", "w2")]}, timeout=0.2)
    assert out == {}
    assert latency.of("w1") >= 0.1  # both counted as slow as they were


def test_a_worker_the_scheduler_no_longer_lists_is_given_up():
    """The holder died: the scheduler lists no worker for the key; the read is not waited for."""
    reads = {0: [Attempt(hang(), "k0", "w1")]}
    out, _ = run(reads, holders={"k0": []}, timeout=5.0)
    ok, exc = out[0]
    assert not ok and isinstance(exc, OSError) and "no longer holds shard 0" in str(exc)


@pytest.mark.parametrize("seconds, delay", [(0.0001, 0.01), (0.01, 0.04), (10.0, 1.0)])
def test_the_hedge_delay_is_a_few_times_the_usual_latency_within_bounds(seconds, delay):
    latency = Latency()
    latency.saw("w", seconds)
    assert latency.hedge("w") == pytest.approx(delay)
