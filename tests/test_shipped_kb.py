import importlib.util
from pathlib import Path

from clanker_rag import KnowledgeBase
from clanker_rag._kb import default_index_path

ROOT = Path(__file__).resolve().parent.parent


def load_builder():
    spec = importlib.util.spec_from_file_location("build_kb", ROOT / "data" / "build_kb.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_index_matches_docs():
    builder = load_builder()
    shipped = KnowledgeBase.load(ROOT / "data" / "kb")
    fresh = builder.build()
    expected = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert set(shipped.sources()) == expected, "data/kb is stale: run python data/build_kb.py"
    assert builder.fingerprints(shipped) == builder.fingerprints(fresh), "data/kb is stale: run python data/build_kb.py"


def test_default_kb_answers_from_the_user_guide():
    assert default_index_path().joinpath("index.json").is_file()
    kb = KnowledgeBase.default()
    hits = kb.search("pseudo-relevance feedback RM3", k=3)
    assert hits and hits[0].source == "docs/library.md"
    assert hits[0].section and "feedback" in hits[0].section.lower()
