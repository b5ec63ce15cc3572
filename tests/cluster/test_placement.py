"""Where shard copies go (``_placement``), what their Dask keys say and how health reads them (``_health``),
which workers a drain marked (``_drain``): pure functions, no cluster."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag import ConfigError
from clanker_rag._cluster._drain import draining, resolve_worker
from clanker_rag._cluster._health import ShardHealth, health_of, parse_key, shard_key
from clanker_rag._cluster._placement import Move, plan_moves

WORKERS = [f"tcp://10.0.0.{i}:4000" for i in range(1, 7)]


def apply(held, moves):
    out = [list(copies) for copies in held]
    for m in moves:
        assert out[m.shard][m.copy] == m.source
        out[m.shard][m.copy] = m.target
    return out


@st.composite
def layouts(draw):
    n_workers = draw(st.integers(1, 6))
    workers = WORKERS[:n_workers]
    gone = WORKERS[n_workers:]  # lost or draining: copies may still be listed there
    copies = draw(st.integers(1, 2))
    n_shards = draw(st.integers(1, 8))
    where = st.one_of(st.sampled_from(workers + gone), st.none())
    held = [[draw(where) for _ in range(copies)] for _ in range(n_shards)]
    return held, workers


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_planned_moves_put_copies_apart_off_non_taking_workers_and_spread(layout):
    held, workers = layout
    moves = plan_moves(held, workers)
    after = apply(held, moves)
    assert all(m.target in workers for m in moves)
    for copies in after:
        placed = [w for w in copies if w is not None]
        if len(workers) >= len(copies):
            assert len(set(placed)) == len(placed), after  # copies of a shard on distinct workers
            assert all(w in workers for w in placed), after  # nothing left on a worker that takes no work
    load = {w: sum(c.count(w) for c in after) for w in workers}
    total = sum(load.values())
    if total >= len(workers) and all(len(set(c)) == len(c) for c in after):
        assert max(load.values()) - min(load.values()) <= 1 or len(held[0]) == len(workers), (after, load)
    assert plan_moves(after, workers) == []  # a second look at the result moves nothing


def test_two_copies_on_one_worker_are_split_and_an_empty_worker_gets_its_share():
    a, b, c = WORKERS[:3]
    # After kills and a restart: both copies of shard 0 on a, c back empty.
    held = [[a, a], [a, b], [b, a]]
    after = apply(held, plan_moves(held, [a, b, c]))
    assert all(len(set(copies)) == 2 for copies in after)
    assert {w for copies in after for w in copies} == {a, b, c}
    assert plan_moves([[a, b]], [a]) == [], "one worker: nowhere to move"
    assert plan_moves([[None, a]], [a, b]) == [], "a copy being rebuilt is left alone"
    assert plan_moves([[c, a]], [a, b]) == [Move(0, 0, c, b)], "off a draining worker"


def test_shard_keys_say_index_save_shard_and_copies():
    key = shard_key("abc", 3, True, 7, 1, 2)
    info = parse_key(key)
    assert info is not None
    said = (info.index_id, info.generation, info.changed, info.shard, info.copy, info.copies)
    assert said == ("abc", 3, True, 7, 1, 2)
    assert shard_key("abc", 3, True, 7, 1, 2) != key  # each build its own key
    new = parse_key(shard_key(None, 0, True, 0, 0, 1))
    assert new is not None and new.index_id is None
    for other in ("load_shard-1234", "ShardServer-abc", ("x", 1), "clanker-rag-shard:a:b:c"):
        assert parse_key(other) is None


def test_health_is_green_yellow_or_red_as_elasticsearch_says():
    a, b = WORKERS[:2]
    k = [[shard_key("ix", 2, False, i, c, 2) for c in range(2)] for i in range(2)]
    full = {k[0][0]: [a], k[0][1]: [b], k[1][0]: [b], k[1][1]: [a], "unrelated": [a]}
    health = health_of(full, "ix", 2, workers=[a, b])
    assert health.status == "green"
    assert health.to_dict()["shards"][0] == {
        "shard": 0,
        "status": "green",
        "workers": [a, b],
        "copies": 2,
        "wanted": 2,
        "generation": 2,
        "changed": False,
        "last_error": None,
    }
    one_lost = {**full, k[0][1]: []}
    assert health_of(one_lost, "ix", 2).status == "yellow"
    same_worker = {**full, k[0][1]: [a]}  # two copies on one worker fail together: one copy
    assert [s.copies for s in health_of(same_worker, "ix", 2).shards] == [1, 2]
    assert health_of(same_worker, "ix", 2).status == "yellow"
    unserved = {**full, k[1][0]: [], k[1][1]: []}
    red = health_of(unserved, "ix", 2, errors={"1": "worker X cannot see the folder"})
    assert red.status == "red" and red.shards[1].last_error == "worker X cannot see the folder"
    nobody = health_of({"unrelated": [a]}, "ix", 2)
    assert nobody.status == "red" and "not open on this cluster" in (nobody.shards[0].last_error or "")
    assert health_of(full, "another-index", 2).status == "red"
    assert ShardHealth(0, (a,), 1, 1).status == "green"


def test_drain_marks_expire_and_workers_resolve_by_address_or_name():
    a, b = WORKERS[:2]
    assert draining({a: 200.0, b: 50.0, "bad": "x"}, now=100.0) == {a}
    assert draining(None) == set()
    workers = {a: {"name": "w1"}, b: {"name": "w2"}}
    assert resolve_worker(workers, a) == a
    assert resolve_worker(workers, a.removeprefix("tcp://")) == a
    assert resolve_worker(workers, "w2") == b
    with pytest.raises(ConfigError, match="no worker 'w3'"):
        resolve_worker(workers, "w3")
