"""A sharded index's shard identities, save generations and writer lock, in this process (no Dask)."""

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from clanker_rag import ConfigError, IndexFormatError, IndexLockedError, KnowledgeBase
from clanker_rag._cli import main
from clanker_rag._cluster._identity import (
    IDENTITY_FILE,
    Expected,
    ShardIdentity,
    check_loaded,
    check_saving,
    read_identity,
)
from clanker_rag.cluster import MANIFEST, ShardedKnowledgeBase

# Written by commit 92ef98d, before identities: no index_id/generation, no shard.json, cluster.json 0600.
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "sharded_v1"


def identity_of(folder: Path) -> ShardIdentity:
    """The shard folder's recorded identity; a folder without one fails the test here."""
    identity = read_identity(folder)
    assert identity is not None, f"{folder} records no identity"
    return identity


def build(folder, n=3, docs=30):
    kb = ShardedKnowledgeBase(n)
    kb.add_texts((f"alpha beta w{i} w{i % 4} doc{i}", f"src/{i}.txt") for i in range(docs))
    kb.save(folder)
    return kb


def manifest(folder):
    return json.loads((folder / MANIFEST).read_text())


def test_each_save_records_the_index_id_shard_and_generation(tmp_path):
    folder = tmp_path / "idx"
    kb = build(folder)
    first = manifest(folder)
    assert first["generation"] == 1 and len(first["index_id"]) == 32
    for i, name in enumerate(first["shard_dirs"]):
        ident = read_identity(folder / name)
        assert ident is not None
        assert (ident.index_id, ident.shard, ident.generation) == (first["index_id"], i, 1)
    kb.add_text("gamma", "new.txt")
    kb.save()
    second = manifest(folder)
    assert (second["index_id"], second["generation"]) == (first["index_id"], 2)
    assert {identity_of(folder / n).generation for n in second["shard_dirs"]} == {2}


def test_manifest_and_identities_are_as_readable_as_the_shard_files(tmp_path):
    folder = tmp_path / "idx"
    build(folder)
    index_mode = (folder / "shard-000" / "index.json").stat().st_mode & 0o777
    assert (folder / MANIFEST).stat().st_mode & 0o777 == index_mode
    assert (folder / "shard-000" / IDENTITY_FILE).stat().st_mode & 0o777 == index_mode
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".probe")]


def test_swapped_shard_folders_are_refused(tmp_path):
    folder = tmp_path / "idx"
    build(folder)
    (folder / "shard-000").rename(tmp_path / "x")
    (folder / "shard-002").rename(folder / "shard-000")
    (tmp_path / "x").rename(folder / "shard-002")
    with pytest.raises(IndexFormatError, match=r"holds shard 2, but the manifest places shard 0 here"):
        ShardedKnowledgeBase.load(folder)


def test_a_shard_of_another_index_is_refused(tmp_path):
    build(tmp_path / "a")
    build(tmp_path / "b")
    shutil.rmtree(tmp_path / "a" / "shard-001")
    shutil.copytree(tmp_path / "b" / "shard-001", tmp_path / "a" / "shard-001")
    with pytest.raises(IndexFormatError, match=r"shard-001: belongs to index \w+, not to"):
        ShardedKnowledgeBase.load(tmp_path / "a")


def test_a_shard_restored_from_an_older_save_is_refused(tmp_path):
    folder = tmp_path / "idx"
    kb = build(folder)
    shutil.copytree(folder / "shard-001", tmp_path / "backup")
    for i in range(2):
        kb.add_text(f"more {i}", f"more/{i}.txt")
        kb.save()
    shutil.rmtree(folder / "shard-001")
    shutil.copytree(tmp_path / "backup", folder / "shard-001")
    with pytest.raises(IndexFormatError, match=r"shard 1 is from save 1, the manifest from save 3"):
        ShardedKnowledgeBase.load(folder)


def test_a_save_interrupted_before_the_manifest_still_opens(tmp_path):
    """Shard folders written by a save that stopped before cluster.json: one save ahead of the manifest."""
    folder = tmp_path / "idx"
    kb = build(folder)
    before = manifest(folder)
    kb.add_text("gamma delta", "late.txt")
    kb.save()
    (folder / MANIFEST).write_text(json.dumps(before))  # as if the manifest's rename never happened
    back = ShardedKnowledgeBase.load(folder)
    assert "late.txt" in back.sources()  # its shard holds the newer save; the others hold the same either way
    back.add_text("epsilon", "after.txt")
    back.save()  # and the next save goes through
    assert manifest(folder)["generation"] == 2
    assert {"late.txt", "after.txt"} <= set(ShardedKnowledgeBase.load(folder).sources())


def test_an_index_saved_before_identities_opens_and_gains_them(tmp_path):
    """The old format (manifest without index_id/generation, shards without shard.json) still opens."""
    folder = tmp_path / "idx"
    build(folder)
    old = {k: v for k, v in manifest(folder).items() if k not in ("index_id", "generation")}
    (folder / MANIFEST).write_text(json.dumps(old))
    for name in old["shard_dirs"]:
        (folder / name / IDENTITY_FILE).unlink()
    kb = ShardedKnowledgeBase.load(folder)
    assert len(kb.sources()) == 30
    kb.add_text("gamma", "new.txt")
    kb.save()
    now = manifest(folder)
    assert now["generation"] == 1 and {identity_of(folder / n).shard for n in now["shard_dirs"]} == {0, 1, 2}
    assert len(ShardedKnowledgeBase.load(folder).sources()) == 31


def test_a_shard_folder_without_identity_under_a_new_manifest_is_refused(tmp_path):
    folder = tmp_path / "idx"
    build(folder)
    (folder / "shard-002" / IDENTITY_FILE).unlink()
    with pytest.raises(IndexFormatError, match=r"shard-002: no shard identity"):
        ShardedKnowledgeBase.load(folder)


@pytest.mark.parametrize(
    "content",
    ["{", "[]", '{"index_id": "", "shard": 0, "generation": 1}', '{"index_id": "x", "shard": -1, "generation": 1}'],
)
def test_a_malformed_identity_is_an_index_format_error(tmp_path, content):
    folder = tmp_path / "idx"
    build(folder)
    (folder / "shard-000" / IDENTITY_FILE).write_text(content)
    with pytest.raises(IndexFormatError, match=IDENTITY_FILE):
        ShardedKnowledgeBase.load(folder)


@pytest.mark.parametrize(
    "change",
    [{"generation": "3"}, {"generation": 0}, {"index_id": 5}, {"index_id": None}, {"generation": True}],
)
def test_a_malformed_manifest_identity_is_refused(tmp_path, change):
    folder = tmp_path / "idx"
    build(folder)
    (folder / MANIFEST).write_text(json.dumps({**manifest(folder), **change}))
    with pytest.raises(IndexFormatError, match="malformed"):
        ShardedKnowledgeBase.load(folder)


def test_a_stale_save_is_refused_and_loses_nothing(tmp_path):
    """Two writers loaded the same save: the second to save is refused, as on one machine."""
    folder = tmp_path / "idx"
    build(folder)
    a, b = ShardedKnowledgeBase.load(folder), ShardedKnowledgeBase.load(folder)
    a.add_text("from a", "a.txt")
    b.add_text("from b", "b.txt")
    a.save()
    with pytest.raises(IndexLockedError, match="another process saved this sharded index"):
        b.save()
    assert set(ShardedKnowledgeBase.load(folder).sources()) >= {"a.txt"}
    assert "b.txt" not in ShardedKnowledgeBase.load(folder).sources()


def test_check_saving_refuses_another_writers_shard_but_not_its_own_replay():
    loaded = ShardIdentity("id", 1, 4, "w-old")
    new = ShardIdentity("id", 1, 5, "w-new")
    check_saving("f", loaded, new, loaded)  # the folder as it was loaded
    check_saving("f", loaded, new, new)  # this save run again after a worker died
    check_saving("f", None, new, None)  # a new folder
    with pytest.raises(IndexLockedError, match="another process saved shard 1"):
        check_saving("f", loaded, new, ShardIdentity("id", 1, 5, "w-other"))
    with pytest.raises(IndexLockedError):
        check_saving("f", None, new, loaded)
    with pytest.raises(IndexFormatError, match="refusing to write over it"):
        check_saving("f", loaded, new, ShardIdentity("id", 2, 4, "w-old"))
    with pytest.raises(IndexFormatError, match="refusing"):
        check_saving("f", loaded, new, ShardIdentity("other", 1, 4, "w-old"))


@pytest.mark.parametrize("generation, ok", [(3, True), (4, True), (2, False), (5, False)])
def test_check_loaded_accepts_the_manifests_save_or_the_one_after(generation, ok):
    found = ShardIdentity("id", 0, generation)
    if ok:
        check_loaded("f", found, Expected(0, "id", 3))
    else:
        with pytest.raises(IndexFormatError, match="restored from another copy"):
            check_loaded("f", found, Expected(0, "id", 3))


def test_edit_creates_saves_and_serialises_writers(tmp_path):
    folder = tmp_path / "idx"
    with ShardedKnowledgeBase.edit(folder, shards=2) as kb:
        kb.add_text("alpha", "a.txt")
    assert manifest(folder)["shards"] == 2 and manifest(folder)["generation"] == 1
    with ShardedKnowledgeBase.edit(folder, shards=2) as kb:
        pass  # nothing changed: nothing saved
    assert manifest(folder)["generation"] == 1
    inside = threading.Event()
    release = threading.Event()

    def first():
        with ShardedKnowledgeBase.edit(folder) as kb:
            kb.add_text("beta", "b.txt")
            inside.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    try:
        assert inside.wait(10)
        started = time.monotonic()
        with (
            pytest.raises(IndexLockedError, match="another process is writing this index"),
            ShardedKnowledgeBase.edit(folder, lock_timeout=0.3),
        ):
            pass
        assert time.monotonic() - started >= 0.3
    finally:
        release.set()
        t.join(10)
    with ShardedKnowledgeBase.edit(folder, lock_timeout=5) as kb:  # after the first: sees its save
        assert kb.sources() == ["a.txt", "b.txt"]
        kb.add_text("gamma", "c.txt")
    assert ShardedKnowledgeBase.load(folder).sources() == ["a.txt", "b.txt", "c.txt"]
    with pytest.raises(ConfigError, match="holds 2 shards"), ShardedKnowledgeBase.edit(folder, shards=3):
        pass


def test_a_one_machine_shard_save_keeps_the_identity_in_step(tmp_path):
    """A shard folder is an ordinary index: opened alone it loads, and shard.json is left alone."""
    folder = tmp_path / "idx"
    build(folder)
    kb = KnowledgeBase.load(folder / "shard-000")
    assert len(kb) > 0 and os.path.exists(folder / "shard-000" / IDENTITY_FILE)


def test_the_old_format_fixture_opens_searches_and_upgrades(tmp_path):
    copy = tmp_path / "idx"
    shutil.copytree(FIXTURE, copy)
    assert main(["upgrade", str(copy)]) == 0  # its shards were saved in index format 3
    kb = ShardedKnowledgeBase.load(copy)
    assert kb.sources() == sorted(f"docs/{i}.md" for i in range(12))
    want = [("docs/3.md", 0.480297), ("docs/8.md", 0.480297), ("docs/4.md", 0.448468)]  # as 92ef98d found them
    assert [(h.source, round(h.score, 6)) for h in kb.search("alpha w3", 3)] == want
    kb = ShardedKnowledgeBase.load(copy)
    kb.add_text("gamma", "new.md")
    kb.save()
    assert manifest(copy)["generation"] == 1
    assert [identity_of(copy / f"shard-00{i}").shard for i in range(3)] == [0, 1, 2]
    assert len(ShardedKnowledgeBase.load(copy).sources()) == 13
