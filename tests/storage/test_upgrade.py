"""Older index formats: refused at load with one line naming ``clanker-rag upgrade``, which converts them in place.

``upgrade_expected.json`` holds what each ``tests/data/index_v<N>`` (written by format N, never rewritten)
holds and finds, as the tree that still read those formats (``git archive 4d29a1d``) gave it
(``upgrade_expected.py`` made it); the upgraded folders must find exactly that, and so must a fresh
build of the same texts with the same settings.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from array import array
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from clanker_rag import BM25, Analyzer, IndexFormatError, KnowledgeBase
from clanker_rag._cli import main
from clanker_rag._cli._upgrade import CLUSTER_MANIFEST
from clanker_rag.cluster import MANIFEST, ShardedKnowledgeBase
from tests.test_layers import import_graph

DATA = Path(__file__).parents[1] / "data"
EXPECTED = json.loads((Path(__file__).parent / "upgrade_expected.json").read_text(encoding="utf-8"))
VERSIONS = [1, 2, 3, 4, 5, 6, 7]
ROOT = Path(__file__).resolve().parents[2]


def old_copy(tmp_path: Path, version: int) -> Path:
    folder = tmp_path / f"v{version}"
    shutil.copytree(DATA / f"index_v{version}", folder)
    return folder


def hits(kb, query):
    return [[h.source, h.chunk_index, h.start, h.end, h.score] for h in kb.search(query, 10)]


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != ".lock"}


def assert_finds_what_the_old_tree_found(folder: Path, version: int) -> None:
    expected = EXPECTED[str(version)]
    kb = KnowledgeBase.load(folder)
    assert kb.sources() == sorted(expected["sources"])
    for source, saved in expected["sources"].items():
        assert kb.source_text(source) == saved["text"]
        assert kb.source_metadata(source) == saved["metadata"]
    for query, want in expected["hits"].items():
        assert hits(kb, query) == want, query


@pytest.mark.parametrize("version", VERSIONS)
def test_an_older_folder_is_refused_with_one_line_naming_the_upgrade(tmp_path, capsys, version):
    folder = old_copy(tmp_path, version)
    before = files(folder)
    with pytest.raises(IndexFormatError) as info:
        KnowledgeBase.load(folder)
    message = str(info.value)
    assert "\n" not in message
    assert f"saved in index format {version}, older than this clanker_rag reads (8)" in message
    assert message.endswith(f"clanker-rag upgrade {folder}")
    with pytest.raises(IndexFormatError, match="clanker-rag upgrade"), KnowledgeBase.edit(folder):
        pass
    for argv in (["search", "--index", str(folder), "lazy dog"], ["sources", "--index", str(folder)]):
        capsys.readouterr()
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.rstrip().endswith(f"clanker-rag upgrade {folder}"), err
    assert files(folder) == before  # refused, never written


@pytest.mark.parametrize("version", VERSIONS)
def test_upgrade_converts_in_place_and_finds_exactly_what_the_old_tree_found(tmp_path, capsys, version):
    folder = old_copy(tmp_path, version)
    old_files = {name for name in files(folder) if name.startswith("data-")}
    assert main(["upgrade", str(folder)]) == 0
    out = capsys.readouterr().out
    n_sources = len(EXPECTED[str(version)]["sources"])
    assert out.startswith(f"{folder}: upgraded from index format {version} to 8 ({n_sources} sources, ")
    manifest = json.loads((folder / "index.json").read_text())
    assert manifest["format_version"] == 8
    named = {seg["file"] for seg in manifest["body"]["segments"]}
    # The old data files went once the new commit point was in place: one index in the folder.
    assert {name for name in files(folder) if name.startswith("data-")} == named and not named & old_files
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]
    assert_finds_what_the_old_tree_found(folder, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_upgraded_folder_searches_as_a_fresh_build_of_the_same_texts(tmp_path, version):
    folder = old_copy(tmp_path, version)
    main(["upgrade", str(folder)])
    expected = EXPECTED[str(version)]
    fresh = fresh_build(expected["settings"], expected["sources"])
    kb = KnowledgeBase.load(folder)
    for query in expected["hits"]:
        assert hits(kb, query) == hits(fresh, query), query
    # ... and its segment is laid out as a fresh save lays one out (today's columns and types).
    fresh.save(tmp_path / "fresh")
    assert shape(segment_body(folder)) == shape(segment_body(tmp_path / "fresh"))


def fresh_build(settings: dict[str, Any], sources: dict[str, Any]) -> KnowledgeBase:
    """A new knowledge base of ``sources`` (name -> text and metadata) with the saved ``settings``."""
    chunking = settings["chunking"]
    kb = KnowledgeBase(
        chunking["chunk_size"],
        chunking["stride"],
        slack=chunking["slack"],
        analyzer=Analyzer.from_settings(settings["analyzer"]),
        bm25=BM25.from_settings(settings["bm25"]),
    )
    for source, saved in sources.items():
        kb.add_text(saved["text"], source, saved["metadata"] or None)
    return kb


def segment_body(folder: Path) -> dict[str, Any]:
    (record,) = json.loads((folder / "index.json").read_text())["body"]["segments"]
    off, length = record["body"]
    body: dict[str, Any] = json.loads((folder / record["file"]).read_bytes()[off : off + length])
    return body


def shape(value):
    """The keys of a segment body, nested, with the item types it records (not the values)."""
    if isinstance(value, dict):
        return {k: v if k in ("types", "offsets_type", "tf_type", "type", "raw") else shape(v) for k, v in value.items()
                if k not in ("metadata", "section", "created_by")}  # fmt: skip
    return type(value).__name__


def test_deletion_marks_are_kept_and_the_live_chunks_score_as_a_fresh_build(tmp_path):
    # index_v7 with greek.txt marked deleted in its commit (the commit point signed again).
    folder = old_copy(tmp_path, 7)
    doc = json.loads((folder / "index.json").read_text())
    (record,) = doc["body"]["segments"]
    data = (folder / record["file"]).read_bytes()
    off, length = record["body"]
    sources = json.loads(data[off : off + length])["sources"]

    def int64s(ref):
        return array("q", data[ref[0] : ref[0] + ref[1]])

    name_bytes, name_offsets = data[sources["names"][0] :][: sources["names"][1]], int64s(sources["name_offsets"])
    names = [name_bytes[a:b].decode() for a, b in pairwise(name_offsets)]
    firsts = int64s(sources["first_chunks"])
    gone = names.index("greek.txt")
    record.update(deleted=[gone], deleted_chunks=firsts[gone + 1] - firsts[gone])
    doc["body"]["stats"]["chunks"] -= record["deleted_chunks"]
    body_text = json.dumps(doc["body"], ensure_ascii=True, separators=(",", ":"))
    doc["sha256"] = hashlib.sha256(body_text.encode()).hexdigest()
    (folder / "index.json").write_text(json.dumps(doc))
    with pytest.raises(IndexFormatError, match="clanker-rag upgrade"):
        KnowledgeBase.load(folder)
    assert main(["upgrade", str(folder)]) == 0
    (upgraded,) = json.loads((folder / "index.json").read_text())["body"]["segments"]
    assert (upgraded["deleted"], upgraded["deleted_chunks"]) == ([gone], record["deleted_chunks"])
    kb = KnowledgeBase.load(folder)
    live = {s: saved for s, saved in EXPECTED["7"]["sources"].items() if s != "greek.txt"}
    assert kb.sources() == sorted(live)
    fresh = fresh_build(EXPECTED["7"]["settings"], live)
    for query in EXPECTED["7"]["hits"]:
        assert hits(kb, query) == hits(fresh, query), query


def test_saved_impact_orders_survive_the_upgrade(tmp_path):
    # index_v2's term "echo" is in enough chunks to carry a saved impact order.
    folder = old_copy(tmp_path, 2)
    main(["upgrade", str(folder)])
    index = KnowledgeBase.load(folder)._index
    tid = index.vocab["echo"]
    saved = index.order(tid)
    assert saved is not None and sorted(saved) == list(range(index.df("echo")))
    imps = index.impacts(tid)[0]
    assert all(imps[a] >= imps[b] for a, b in pairwise(saved))


def test_upgrading_a_current_folder_changes_nothing(tmp_path, capsys):
    kb = KnowledgeBase(chunk_size=8, stride=4)
    kb.add_text("the quick brown fox jumps over the lazy dog", "fox.txt")
    kb.save(tmp_path)
    before = files(tmp_path)
    assert main(["upgrade", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: already in the current index format (8); nothing to do\n"
    assert files(tmp_path) == before


@pytest.mark.parametrize("version", [2, 3, 7])
def test_a_damaged_old_folder_is_refused_and_left_as_it_is(tmp_path, capsys, version):
    folder = old_copy(tmp_path, version)
    (data,) = folder.glob("data-*.bin")
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    data.write_bytes(raw)
    before = files(folder)
    assert main(["upgrade", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checksum mismatch" in err and str(data) in err
    assert files(folder) == before


def test_upgrade_of_a_folder_without_an_index_fails_with_one_line(tmp_path, capsys):
    assert main(["upgrade", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "none").exists()


def test_a_sharded_folder_is_upgraded_shard_by_shard(tmp_path, capsys):
    # tests/data/sharded_v1's shards were saved in format 3.
    folder = tmp_path / "idx"
    shutil.copytree(DATA / "sharded_v1", folder)
    with pytest.raises(IndexFormatError, match=r"clanker-rag upgrade .*shard-00"):
        ShardedKnowledgeBase.load(folder)
    assert main(["upgrade", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [str(folder / f"shard-00{i}") for i in range(3)]
    assert all("upgraded from index format 3 to 8" in line for line in lines)
    kb = ShardedKnowledgeBase.load(folder)
    assert CLUSTER_MANIFEST == MANIFEST
    assert kb.sources() == sorted(f"docs/{i}.md" for i in range(12))
    want = [("docs/3.md", 0.480297), ("docs/8.md", 0.480297), ("docs/4.md", 0.448468)]  # as 92ef98d found them
    assert [(h.source, round(h.score, 6)) for h in kb.search("alpha w3", 3)] == want


# Killed (SIGKILL) just before the n-th fsync, rename or unlink of the upgrade: every step where
# a file becomes durable, switches or goes.
KILLER = textwrap.dedent(
    """
    import os, signal, sys

    limit, calls = int(sys.argv[2]), [0]

    def counted(real):
        def step(*args, **kwargs):
            calls[0] += 1
            if calls[0] == limit:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return step

    os.fsync, os.replace, os.unlink = counted(os.fsync), counted(os.replace), counted(os.unlink)
    from clanker_rag._cli import main
    sys.exit(main(["upgrade", sys.argv[1]]))
    """
)


@pytest.mark.parametrize("version", [2, 7])
def test_a_kill_at_any_step_of_the_upgrade_leaves_the_old_index_or_the_new_one(tmp_path, version):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    old = files(DATA / f"index_v{version}")
    outcomes = []
    for limit in range(1, 40):
        folder = tmp_path / f"v{version}-{limit}"
        shutil.copytree(DATA / f"index_v{version}", folder)
        run = subprocess.run([sys.executable, "-c", KILLER, str(folder), str(limit)], env=env, capture_output=True)
        assert run.returncode in (0, -signal.SIGKILL), run.stderr.decode()
        outcomes.append(run.returncode)
        try:
            KnowledgeBase.load(folder)
        except IndexFormatError as exc:  # the old index: whole, refused with the upgrade's line
            assert run.returncode == -signal.SIGKILL
            assert str(exc).endswith(f"clanker-rag upgrade {folder}")
            assert {k: v for k, v in files(folder).items() if k in old} == old
            assert main(["upgrade", str(folder)]) == 0  # and a second run finishes the job
        assert_finds_what_the_old_tree_found(folder, version)
        if run.returncode == 0:
            break
    assert outcomes[-1] == 0 and len(outcomes) >= 6, outcomes  # killed at every step, then let finish


def test_only_the_upgrade_command_imports_the_older_formats_decoder(tmp_path):
    graph = import_graph()
    importers = {module for module, deps in graph.items() if "clanker_rag._storage._upgrade" in deps}
    assert importers == {"clanker_rag._cli._upgrade"}
    # The command's module, in turn, only by the parser's dispatch, when the command runs.
    command = {module for module, deps in graph.items() if "clanker_rag._cli._upgrade" in deps}
    assert command == {"clanker_rag._cli._main"}
    # A load, a search and the other commands never import it.
    KnowledgeBase(chunk_size=8, stride=4).save(tmp_path)
    code = (
        "import sys\nfrom clanker_rag import KnowledgeBase\nfrom clanker_rag._cli import main\n"
        f"KnowledgeBase.load({str(tmp_path)!r}).search('x')\nmain(['sources', '--index', {str(tmp_path)!r}])\n"
        "assert 'clanker_rag._storage._upgrade' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    assert run.returncode == 0, run.stderr.decode()
