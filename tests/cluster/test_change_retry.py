"""A shard's change lost to something other than its own error is run again on the shard as it was.

A worker killed while a change (an ingest) runs is rebuilt by the scheduler,
which replays the change; when that replay is lost too (the connection
drops, the worker dies once more), the change is submitted again on the
shard before it, instead of failing the whole ingest.  A shard's own error
(a ``ClankerRagError``: bad input, a bad index) is raised at once.
"""

import os
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers._dask_threads import stop_offload_thread

distributed = pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")
cloudpickle = pytest.importorskip("cloudpickle")

from clanker_rag import ConfigError, RetrievalTimeoutError  # noqa: E402
from clanker_rag._cluster import _dask_shards  # noqa: E402
from clanker_rag._cluster._dask_shards import DaskShards  # noqa: E402
from clanker_rag.cluster import close_client, connect  # noqa: E402

pytestmark = pytest.mark.leaves_running("the module's LocalCluster is closed by its own fixture")


@pytest.fixture(scope="module")
def client():
    threads_before = set(threading.enumerate())
    # The change functions below travel by value: the workers cannot import this test module.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    c = connect("local", n_workers=2)
    yield c
    close_client(c)
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    stop_offload_thread()
    for thread in [t for t in threading.enumerate() if t not in threads_before]:
        thread.join(timeout=30)


def add_once_lost(kb, marker, text):
    """Adds ``text`` to the shard; fails the first time as a lost connection would."""
    calls = Path(marker)
    calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
    if len(calls.read_text()) == 1:
        raise ConnectionResetError("the worker's connection dropped (simulated)")
    return kb.add_text(text, "note.md")


def always_lost(kb, marker):
    Path(marker).write_text(Path(marker).read_text() + "x" if Path(marker).exists() else "x")
    raise ConnectionResetError("the worker's connection dropped (simulated)")


def bad_input(kb, marker):
    Path(marker).write_text(Path(marker).read_text() + "x" if Path(marker).exists() else "x")
    raise ConfigError("a shard's own error")


def count(kb):
    return len(kb)


@pytest.fixture
def shards(client):
    client.wait_for_workers(2, timeout=120)
    home = DaskShards.create(client, 2, {"chunk_size": 20, "stride": 10}, patience=60.0)
    yield home
    home.close()


def test_a_change_lost_once_is_run_again_on_the_shard_before_it(shards, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    done = shards.change({0: (add_once_lost, (str(a), "alpha beta")), 1: (add_once_lost, (str(b), "gamma"))})
    assert done[0] >= 1 and done[1] >= 1
    assert a.read_text() == b.read_text() == "xx"  # each ran twice: lost, then again
    # Once each: the rerun started from the shard before the lost change, not from a half-changed one.
    assert shards.map(count, {0: (), 1: ()}, timeout=30) == {0: done[0], 1: done[1]}


def test_a_change_lost_every_time_fails_after_its_tries(shards, tmp_path):
    marker = tmp_path / "m"
    with pytest.raises(RetrievalTimeoutError, match=r"could not be changed in 3 tries.*connection dropped"):
        shards.change({0: (always_lost, (str(marker),))})
    assert marker.read_text() == "x" * _dask_shards._CHANGE_TRIES


def test_a_shards_own_error_is_raised_without_a_retry(shards, tmp_path):
    marker = tmp_path / "m"
    with pytest.raises(ConfigError, match="a shard's own error"):
        shards.change({0: (bad_input, (str(marker),))})
    assert marker.read_text() == "x"
    assert os.path.exists(marker)
