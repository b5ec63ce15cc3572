"""Imports flow one way: each module imports (at module level) only from lower layers.

Function-level imports are how a lower layer offers a convenience that lives
higher up (``KnowledgeBase.ingest``) without a cycle at import time; they are
not checked here.  Model backends import nothing of ours but the generate
protocol (with the native tool-call schema), the exception hierarchy, the SSE
codec and the base-URL helper.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "clanker_rag"

LAYERS = [
    {"_exceptions", "_types", "_gc_pause", "_stopwords", "_stemmer", "_generate", "_readers", "_sse", "_term"},
    {"_validate", "_blocks", "_urls"},
    {"_analysis", "_scoring", "_lock", "_store", "_scanner", "_embed", "_fusion"},
    {"_chunking", "_index", "_discovery"},
    {"_counting"},
    {"_kb", "_dense"},
    {"_parallel"},
    {"_ingest", "_rerank", "_eval", "_controller", "_named_kbs", "_upstream"},
    {"_proxy_handler"},
    {"_proxy", "_cli", "_demo", "__init__", "__main__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
BACKEND_DEPS = {"_generate", "_exceptions", "_sse", "_urls"}


def module_level_imports(path: Path) -> set[str]:
    """Our modules imported by top-level statements (not under ``if TYPE_CHECKING``)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
    return out


def test_every_module_has_a_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py")} | {"_readers"}
    assert modules == set(RANK), f"give these a layer: {sorted(modules ^ set(RANK))}"


def test_module_level_imports_flow_downwards():
    wrong = []
    for path in sorted(PACKAGE.glob("*.py")):
        me = RANK[path.stem]
        for dep in module_level_imports(path):
            if dep in RANK and RANK[dep] >= me and not (me == len(LAYERS) - 1 and RANK[dep] == me):
                wrong.append(f"{path.stem} (layer {me}) imports {dep} (layer {RANK[dep]})")
    assert not wrong, wrong


def test_backends_import_only_the_generate_protocol():
    for path in sorted((PACKAGE / "backends").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in BACKEND_DEPS, f"{path.name} imports clanker_rag.{node.module}"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clanker_rag"):
                raise AssertionError(f"{path.name} imports {node.module} absolutely")
