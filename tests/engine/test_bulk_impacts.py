"""Impacts and impact orders of a packed index: split over a forked child, they equal one process's, bit for bit."""

import os
import threading
from array import array
from itertools import accumulate, pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._engine import _bulk_impacts
from clanker_rag._engine._scoring import BM25, impact_order, impact_orders, norm_values


@pytest.fixture
def no_stray_threads() -> None:
    # A process running other threads forks no child (can_fork), so a thread an earlier test left
    # running would make a test of the split fail as if the split were broken: name the thread instead.
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not others, f"threads left running by an earlier test: {others}"


def needs_fork(test: Any) -> Any:
    """A test of the forked split: skipped where no fork is safe, failing by name on a stray thread."""
    no_fork = pytest.mark.skipif(not _bulk_impacts.can_fork(), reason="no safe fork here (one CPU, or no os.fork)")
    return no_fork(pytest.mark.usefixtures("no_stray_threads")(test))


variants = st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"])
# Lists of (chunk id offset, tf) pairs: chunk ids ascend within a list.
postings_list = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 9)), min_size=1, max_size=60)

# impacts_and_orders' arguments before order_min: bm, n_docs, lengths, tfs, docs, norms, dls, avgdl.
Inputs = tuple[BM25, int, "array[int]", "array[int]", "array[int]", list[float], "array[int]", float]
# pack_pending's statistics: bm, n_docs, norms, dls, avgdl.
Stats = tuple[BM25, int, list[float], "array[int]", float]


def packed_input(lists, variant) -> Inputs:
    lengths, docs, tfs = array("i"), array("i"), array("I")
    for plist in lists:
        cid = -1
        for gap, tf in plist:
            cid += gap
            docs.append(cid)
            tfs.append(tf)
        lengths.append(len(plist))
    n = max(docs) + 1
    dls = array("i", [0] * n)
    for d, tf in zip(docs, tfs):
        dls[d] += tf
    avgdl = sum(dls) / n
    bm = BM25(variant=variant)
    norms = list(norm_values(bm, avgdl, dls))
    return bm, n, lengths, tfs, docs, norms, dls, avgdl


@pytest.fixture(autouse=True)
def idle(monkeypatch):
    # Whether this machine is busy right now must not decide what is tested.
    monkeypatch.setattr(_bulk_impacts, "idle_core", lambda: True)


def one_process(inputs: Inputs, order_min):
    return _bulk_impacts.impacts_and_orders(*inputs, order_min, split_min=10**12)


def by_hand(inputs: Inputs, order_min):
    # The reference: each list's impacts from the reference contribution, orders by sorting each list.
    bm, n, lengths, tfs, docs, _, dls, avgdl = inputs
    imps, positions = array("f"), array("i")
    offsets = list(accumulate(lengths, initial=0))
    for a, b in pairwise(offsets):
        mine = array("f", [bm.contribution(n, b - a, tfs[i], dls[docs[i]], avgdl) for i in range(a, b)])
        imps.extend(mine)
        if b - a > order_min:
            positions.extend(impact_order(mine))
    return imps, positions


@settings(max_examples=60, deadline=None)
@given(st.lists(postings_list, min_size=1, max_size=12), variants, st.integers(0, 8))
def test_one_process_matches_the_reference(lists, variant, order_min):
    inputs = packed_input(lists, variant)
    imps, positions = one_process(inputs, order_min)
    ref_imps, ref_positions = by_hand(inputs, order_min)
    assert positions == ref_positions
    assert imps.tobytes() == ref_imps.tobytes() or all(
        abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(imps, ref_imps)
    )


@pytest.mark.slow
@needs_fork
@settings(max_examples=40, deadline=None)
@given(st.lists(postings_list, min_size=2, max_size=12), variants, st.integers(0, 8))
def test_split_over_a_child_equals_one_process_bit_for_bit(lists, variant, order_min):
    inputs = packed_input(lists, variant)
    imps, positions = _bulk_impacts.impacts_and_orders(*inputs, order_min, split_min=0)
    alone_imps, alone_positions = one_process(inputs, order_min)
    assert imps.tobytes() == alone_imps.tobytes()
    assert positions == alone_positions


@needs_fork
def test_a_failed_child_leaves_this_process_to_do_its_half(monkeypatch):
    inputs = packed_input([[(1, 2)] * 40, [(2, 1)] * 50, [(1, 3)] * 45], "lucene")
    real_part = _bulk_impacts._part
    parent = os.getpid()

    def failing_in_the_child(*args):
        if os.getpid() != parent:
            raise RuntimeError("the child breaks")
        return real_part(*args)

    monkeypatch.setattr(_bulk_impacts, "_part", failing_in_the_child)
    imps, positions = _bulk_impacts.impacts_and_orders(*inputs, 4, split_min=0)
    monkeypatch.setattr(_bulk_impacts, "_part", real_part)
    alone_imps, alone_positions = one_process(inputs, 4)
    assert imps.tobytes() == alone_imps.tobytes() and positions == alone_positions


def recorded_forks(monkeypatch):
    """The pids of the children ``os.fork`` starts from now on (in this test)."""
    children = []
    real_fork = os.fork

    def recording_fork():
        pid = real_fork()
        if pid:
            children.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recording_fork)
    return children


@needs_fork
def test_an_interrupted_parent_stops_and_reaps_its_child(monkeypatch):
    inputs = packed_input([[(1, 2)] * 40, [(2, 1)] * 50, [(1, 3)] * 45], "lucene")
    real_part = _bulk_impacts._part
    parent = os.getpid()
    children = recorded_forks(monkeypatch)

    def interrupted_in_the_parent(*args):
        if os.getpid() == parent:
            raise KeyboardInterrupt
        return real_part(*args)

    monkeypatch.setattr(_bulk_impacts, "_part", interrupted_in_the_parent)
    with pytest.raises(KeyboardInterrupt):
        _bulk_impacts.impacts_and_orders(*inputs, 4, split_min=0)
    assert len(children) == 1
    with pytest.raises(ChildProcessError):  # already reaped
        os.waitpid(children[0], os.WNOHANG)


def test_small_or_threaded_work_stays_in_this_process(monkeypatch):
    inputs = packed_input([[(1, 2)] * 40, [(2, 1)] * 50], "lucene")

    def no_fork():
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)
    one_process(inputs, 4)  # below split_min
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not _bulk_impacts.can_fork()
    _bulk_impacts.impacts_and_orders(*inputs, 4, split_min=0)  # another thread runs: no fork
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(_bulk_impacts, "idle_core", lambda: False)
    _bulk_impacts.impacts_and_orders(*inputs, 4, split_min=0)  # every core busy: no fork


def test_a_core_is_idle_only_when_the_cpu_times_say_so(monkeypatch):
    monkeypatch.undo()  # the real idle_core, not the fixture's
    monkeypatch.setattr(_bulk_impacts, "IDLE_SAMPLE_S", 0.0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    samples: list[list[int] | None] = []
    monkeypatch.setattr(_bulk_impacts, "_cpu_times", lambda: samples.pop(0))
    # user nice system idle iowait irq softirq steal: 200 ticks in all, 100 of them idle
    samples[:] = [[0] * 8, [100, 0, 0, 90, 10, 0, 0, 0]]
    assert _bulk_impacts.idle_core()  # one of two cores idle
    samples[:] = [[0] * 8, [150, 0, 10, 40, 0, 0, 0, 0]]
    assert not _bulk_impacts.idle_core()  # 0.4 of a core
    # No /proc/stat: the load average decides.
    monkeypatch.setattr(_bulk_impacts, "_cpu_times", lambda: None)
    monkeypatch.setattr(_bulk_impacts, "_cpus", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 0.0, 0.0))
    assert _bulk_impacts.idle_core()
    monkeypatch.setattr(os, "getloadavg", lambda: (1.6, 0.0, 0.0))
    assert not _bulk_impacts.idle_core()


def test_cpu_times_read_this_machine_or_nothing():
    times = _bulk_impacts._cpu_times()
    assert times is None or (len(times) == 8 and all(t >= 0 for t in times))


@needs_fork
def test_an_interrupted_wait_stops_and_reaps_the_child(monkeypatch):
    inputs = packed_input([[(1, 2)] * 40, [(2, 1)] * 50, [(1, 3)] * 45], "lucene")
    children = recorded_forks(monkeypatch)
    real_waitpid = os.waitpid

    def interrupted_wait(pid, options):
        if options == 0 and pid in children:
            monkeypatch.setattr(os, "waitpid", real_waitpid)  # the reaping wait goes through
            raise KeyboardInterrupt
        return real_waitpid(pid, options)

    monkeypatch.setattr(os, "waitpid", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        _bulk_impacts.impacts_and_orders(*inputs, 4, split_min=0)
    assert len(children) == 1
    with pytest.raises(ChildProcessError):  # already reaped
        real_waitpid(children[0], os.WNOHANG)


# -- pack_pending: a fresh build's lists, packed by both processes ------------------------------


def pending_input(lists, variant) -> tuple[dict[int, list[int]], int, Stats]:
    """Pending lists ``{term id: [cid, tf, cid, tf, ...]}`` of ``lists`` (None: the term has
    no pending list; []: an emptied one) and the statistics to pack them with."""
    pending: dict[int, list[int]] = {}
    for tid, plist in enumerate(lists):
        if plist is None:
            continue
        flat, cid = [], -1
        for gap, tf in plist:
            cid += gap
            flat += [cid, tf]
        pending[tid] = flat
    n = max((cid for flat in pending.values() for cid in flat[0::2]), default=0) + 1
    dls = array("i", [0] * n)
    for flat in pending.values():
        for cid, tf in zip(flat[0::2], flat[1::2]):
            dls[cid] += tf
    avgdl = sum(dls) / n if any(dls) else 0.0
    bm = BM25(variant=variant)
    norms = list(norm_values(bm, avgdl, dls)) if avgdl else [bm.k1] * n
    return pending, len(lists), (bm, n, norms, dls, avgdl)


def packed_by_hand(pending, n_terms, stats: Stats, order_min):
    # The reference: what _freeze did before the child packed too, packing in this process.
    bm, n, norms, dls, avgdl = stats
    lengths, docs, tfs = array("i"), array("i"), array("I")
    for tid in range(n_terms):
        flat = pending.get(tid, [])
        docs.fromlist(flat[0::2])
        tfs.fromlist(flat[1::2])
        lengths.append(len(flat) // 2)
    imps, positions = _bulk_impacts.impacts_and_orders(
        bm, n, lengths, tfs, docs, norms, dls, avgdl, order_min, split_min=10**12
    )
    return lengths, docs, tfs, imps, positions, maxes_by_hand(imps, lengths)


def maxes_by_hand(imps, lengths):
    # Each list's largest impact, max() over all of it (-1.0 for an empty list).
    offsets = list(accumulate(lengths, initial=0))
    return array("f", [max(imps[a:b]) if b > a else -1.0 for a, b in pairwise(offsets)])


def as_bytes(packed):
    return [part.tobytes() for part in packed]


def pack(pending, n_terms, stats: Stats, order_min, share=0.5):
    old = _bulk_impacts.CHILD_SHARE
    _bulk_impacts.CHILD_SHARE = share
    try:
        return _bulk_impacts.pack_pending(pending, n_terms, *stats, order_min, split_min=0)
    finally:
        _bulk_impacts.CHILD_SHARE = old


pending_lists = st.lists(st.none() | st.just([]) | postings_list, min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(pending_lists, variants, st.integers(0, 8))
def test_packing_pending_lists_in_one_process_equals_packing_them_first(lists, variant, order_min):
    pending, n_terms, stats = pending_input(lists, variant)
    reference = as_bytes(packed_by_hand(pending, n_terms, stats, order_min))
    packed = _bulk_impacts.pack_pending(pending, n_terms, *stats, order_min, split_min=10**12)
    assert as_bytes(packed) == reference
    assert pending == {}  # freed


@pytest.mark.slow
@needs_fork
@settings(max_examples=40, deadline=None)
@given(pending_lists, variants, st.integers(0, 8), st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]))
def test_a_child_packing_its_share_equals_one_process_bit_for_bit(lists, variant, order_min, share):
    pending, n_terms, stats = pending_input(lists, variant)
    reference = as_bytes(packed_by_hand(pending, n_terms, stats, order_min))
    packed = pack(pending, n_terms, stats, order_min, share)
    assert as_bytes(packed) == reference
    assert pending == {}  # freed once the child was collected


@needs_fork
@pytest.mark.parametrize("share", [0.0, 0.3, 0.5, 0.7, 1.0])
def test_the_child_packs_every_list_of_its_half_and_this_process_none(monkeypatch, share):
    # Only term 5 has postings among 8 (the rest have none or emptied lists): with every
    # share it lands in one half or the other, and the other half is empty.
    lists = [None, [], None, [], None, [(1, 2), (3, 1)] * 20, [], None]
    pending, n_terms, stats = pending_input(lists, "robertson")
    reference = as_bytes(packed_by_hand(pending, n_terms, stats, 4))
    real_packed_part = _bulk_impacts._packed_part
    parent = os.getpid()
    packed_here = []

    def recording(plists, lengths, stats, terms, free=None):
        if os.getpid() == parent:
            packed_here.append(terms)
        return real_packed_part(plists, lengths, stats, terms, free)

    monkeypatch.setattr(_bulk_impacts, "_packed_part", recording)
    packed = pack(pending, n_terms, stats, 4, share)
    monkeypatch.setattr(_bulk_impacts, "_packed_part", real_packed_part)
    assert len(packed_here) == 1 and packed_here[0][0] == 0 and 1 <= packed_here[0][1] < n_terms
    assert as_bytes(packed) == reference


@needs_fork
@pytest.mark.parametrize("how", ["raises", "exits"])
def test_a_failed_packing_child_leaves_this_process_to_pack_its_half(monkeypatch, how):
    lists = [[(1, 2)] * 40, None, [(2, 1)] * 50, [], [(1, 3)] * 45, [(3, 1)] * 30]
    pending, n_terms, stats = pending_input(lists, "bm25+")
    reference = as_bytes(packed_by_hand(pending, n_terms, stats, 4))
    real_packed_part = _bulk_impacts._packed_part
    parent = os.getpid()
    packed_here = []

    def failing_in_the_child(plists, lengths, stats, terms, free=None):
        if os.getpid() != parent:
            if how == "exits":
                os._exit(3)
            raise RuntimeError("the child breaks")
        packed_here.append(terms)
        return real_packed_part(plists, lengths, stats, terms, free)

    monkeypatch.setattr(_bulk_impacts, "_packed_part", failing_in_the_child)
    packed = pack(pending, n_terms, stats, 4)
    monkeypatch.setattr(_bulk_impacts, "_packed_part", real_packed_part)
    # This process packed both halves, the child's from the lists it still had.
    assert len(packed_here) == 2 and packed_here[0][1] == packed_here[1][0] and packed_here[1][1] == n_terms
    assert as_bytes(packed) == reference
    assert pending == {}


@needs_fork
def test_pending_lists_are_intact_until_the_child_is_collected(monkeypatch):
    lists = [[(1, 2)] * 40, [(2, 1)] * 50, None, [(1, 3)] * 45]
    pending, n_terms, stats = pending_input(lists, "lucene")
    before = {tid: list(flat) for tid, flat in pending.items()}
    real_collect = _bulk_impacts._Child.collect
    seen: list[bool] = []

    def checking_collect(child, into):
        seen.append(pending == before)
        return real_collect(child, into)

    monkeypatch.setattr(_bulk_impacts._Child, "collect", checking_collect)
    pack(pending, n_terms, stats, 4)
    assert seen == [True] and pending == {}  # intact while the child lived, freed after


@needs_fork
def test_an_interrupted_packing_parent_stops_and_reaps_its_child(monkeypatch):
    lists = [[(1, 2)] * 40, [(2, 1)] * 50, [(1, 3)] * 45]
    pending, n_terms, stats = pending_input(lists, "lucene")
    real_packed_part = _bulk_impacts._packed_part
    parent = os.getpid()
    children = recorded_forks(monkeypatch)

    def interrupted_in_the_parent(*args):
        if os.getpid() == parent:
            raise KeyboardInterrupt
        return real_packed_part(*args)

    monkeypatch.setattr(_bulk_impacts, "_packed_part", interrupted_in_the_parent)
    with pytest.raises(KeyboardInterrupt):
        pack(pending, n_terms, stats, 4)
    assert len(children) == 1
    with pytest.raises(ChildProcessError):  # already reaped
        os.waitpid(children[0], os.WNOHANG)


def test_small_or_busy_packing_stays_in_this_process_and_frees_the_lists_once_packed(monkeypatch):
    lists = [[(1, 2)] * 40, [(2, 1)] * 50]
    real_part = _bulk_impacts._part
    reference = as_bytes(packed_by_hand(*pending_input(lists, "lucene"), 4))

    def no_fork():
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)
    for busy in (False, True):
        monkeypatch.setattr(_bulk_impacts, "idle_core", lambda busy=busy: not busy)
        pending, n_terms, stats = pending_input(lists, "lucene")
        seen: list[int] = []

        def checking_part(*args, pending=pending, seen=seen):
            seen.append(len(pending))  # the impacts come after the lists are freed
            return real_part(*args)

        monkeypatch.setattr(_bulk_impacts, "_part", checking_part)
        # Every core busy, or below SPLIT_MIN.
        packed = pack(pending, n_terms, stats, 4) if busy else _bulk_impacts.pack_pending(pending, n_terms, *stats, 4)
        assert as_bytes(packed) == reference and seen == [0] and pending == {}


@needs_fork
def test_the_child_computes_its_half_of_the_impacts(monkeypatch):
    inputs = packed_input([[(1, 2)] * 40, [(2, 1)] * 50, [(1, 3)] * 45], "atire")
    real_part = _bulk_impacts._part
    parent = os.getpid()
    done_here = []

    def recording(*args):
        if os.getpid() == parent:
            done_here.append(args[-1])
        return real_part(*args)

    monkeypatch.setattr(_bulk_impacts, "_part", recording)
    imps, positions = _bulk_impacts.impacts_and_orders(*inputs, 4, split_min=0)
    monkeypatch.setattr(_bulk_impacts, "_part", real_part)
    assert done_here == [(0, 2)]  # the child did list 2
    alone_imps, alone_positions = one_process(inputs, 4)
    assert imps.tobytes() == alone_imps.tobytes() and positions == alone_positions


@needs_fork
def test_a_ctrl_c_reaching_the_forked_child_is_left_to_this_process(ctrl_c_raises):
    # Ctrl-C goes to the whole process group.  A child that took it would
    # unwind this process's stack (whose handlers may save an index); it
    # ignores SIGINT and finishes, and this process alone is interrupted.
    import signal

    def job(terms):
        os.kill(os.getpid(), signal.SIGINT)
        return [array("i", range(terms[0], terms[1]))]

    child = _bulk_impacts._forked(job, (3, 7), (("i", 4),))
    assert child is not None
    into = [array("i")]
    assert child.collect(into)
    assert list(into[0]) == [3, 4, 5, 6]
    # This process's own handling of SIGINT is as it was.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(-4.0, 4.0, width=32), max_size=40), min_size=1, max_size=12), st.integers(0, 8))
def test_largest_impacts_read_from_the_orders_equal_max_over_each_list(lists, order_min):
    # Ties (and 0.0 beside -0.0) included: the order's first is the first of the largest, as max finds it.
    imps = array("f", [v for values in lists for v in values])
    lengths = array("i", map(len, lists))
    offsets = array("q", accumulate(lengths, initial=0))
    positions = impact_orders(imps, offsets, order_min)
    got = _bulk_impacts.list_maxes(imps, lengths, positions, order_min)
    assert got.tobytes() == maxes_by_hand(imps, lengths).tobytes()
