"""How the package is put together: layers, and no import cycles.

Every module (a top-level ``_name.py`` or a subpackage taken as one unit) has
a layer.  Module-level imports flow downwards only.  Imports inside
functions may reach up (``KnowledgeBase.ingest`` imports ``_ingest`` when
called) but never close a cycle: over every module of the package, function
and ``TYPE_CHECKING`` imports included, no module imports itself through
others.  The package ``__init__`` facade, which re-exports everything, is
left out of that graph.  Model backends import nothing of ours but the
generate protocol (with the native tool-call schema), the exception
hierarchy and the one HTTP client (``_http``).  No module but ``_http``
opens an HTTP client connection.  ``ARCHITECTURE.md`` says what every module owns.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "clanker_rag"

LAYERS = [
    {"_exceptions", "_types", "_gc_pause", "_forking", "_sse"},
    {"_validate", "_urls", "_text"},
    {"_storage", "_http"},
    {"_engine"},
    {"_ingest"},
    {"_kb"},
    {"_retrieval"},
    {"_stream"},
    {"backends"},
    {"_answer"},
    {"_serve", "_cluster"},
    {"cluster"},
    {"_cli", "integrations", "__init__", "__main__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
BACKEND_DEPS = {"_stream._generate", "_exceptions", "_http"}
# The framework adapters sit above everything but the top layer: never the CLI, proxy or MCP server.
INTEGRATION_DEPS = {"_stream._blocks", "_exceptions", "_types"}


def unit_of(path: Path) -> str:
    """The layered unit a source file belongs to: its top-level module or subpackage."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else path.stem


def dotted(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def module_level_imports(path: Path) -> set[str]:
    """Units of ours imported by top-level statements (not under ``if TYPE_CHECKING``)."""
    depth = len(path.relative_to(PACKAGE).parts)  # 1 for a top-level module, 2 inside a subpackage
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.ImportFrom) or node.level < depth:
            continue  # stdlib, absolute, or a sibling inside the same subpackage
        if node.level > depth:
            raise AssertionError(f"{path}: relative import above the package")
        if node.module:
            out.add(node.module.split(".")[0])
        else:
            out.update(alias.name for alias in node.names)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports anywhere (functions and TYPE_CHECKING included)."""
    modules = {dotted(p): p for p in sources()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    # "from . import _x" imports the module _x; "from ._x import y" the module _x.
                    deps.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in modules and d not in (name, "clanker_rag")}
    del graph["clanker_rag"]  # the facade
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer() -> None:
    units = {unit_of(p) for p in sources()}
    assert units == set(RANK), f"give these a layer (or drop them from LAYERS): {sorted(units ^ set(RANK))}"


def test_module_level_imports_flow_downwards() -> None:
    wrong = []
    for path in sources():
        me = RANK[unit_of(path)]
        for dep in module_level_imports(path):
            if dep in RANK and RANK[dep] >= me and not (me == len(LAYERS) - 1 and RANK[dep] == me):
                wrong.append(f"{path.relative_to(PACKAGE)} (layer {me}) imports {dep} (layer {RANK[dep]})")
    assert not wrong, wrong


def test_no_import_cycles_even_through_function_level_imports() -> None:
    found = cycles(import_graph())
    assert not found, f"import cycles: {sorted(sorted(c) for c in found)}"


def test_the_cycle_finder_sees_a_cycle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_backends_import_only_the_generate_protocol() -> None:
    for path in sorted((PACKAGE / "backends").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in BACKEND_DEPS, f"{path.name} imports clanker_rag.{node.module}"
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clanker_rag"):
                raise AssertionError(f"{path.name} imports {node.module} absolutely")


def test_architecture_md_names_every_module() -> None:
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [
        str(rel)
        for rel in (p.relative_to(PACKAGE) for p in sources())
        if f"`{rel.as_posix()}`" not in text and (len(rel.parts) == 1 or f"`{rel.name}`" not in text)
    ]
    assert not missing, f"say what these own in ARCHITECTURE.md: {missing}"


def test_integrations_import_only_the_adapter_layer() -> None:
    """The framework adapters (public modules) see the shared helper and three leaves, never the CLI or servers."""
    for path in sorted((PACKAGE / "integrations").glob("[!_]*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in INTEGRATION_DEPS, f"{path.name} imports clanker_rag.{node.module}"
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                assert node.module == "_adapters", f"{path.name} imports a sibling integration ({node.module})"


def test_every_job_folder_says_what_it_is_for() -> None:
    """Each subpackage's ``__init__`` docstring names its job and its import rules."""
    folders = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))
    assert len(folders) >= 8
    for folder in folders:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
        assert doc, f"{folder.name}/__init__.py has no docstring"
        if folder.name.startswith("_"):
            assert "May import" in doc and "Must not" in doc, f"{folder.name}: say what it may and must not import"


def test_few_modules_at_the_top() -> None:
    """Besides the facade, ``__main__`` and ``cluster``, at most ten shared modules sit outside the folders."""
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__", "cluster"}
    assert len(top) <= 10, sorted(top)


# Standard-library and third-party modules that open HTTP client connections.
HTTP_CLIENTS = {"http.client", "urllib.request", "urllib3", "requests", "httpx", "aiohttp"}


def http_client_imports(path: Path) -> set[str]:
    """The HTTP client modules ``path`` imports anywhere (``from http import client`` included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        else:
            continue
        out |= {name for name in names if name in HTTP_CLIENTS or name.split(".")[0] in HTTP_CLIENTS}
    return out


def test_only_the_http_package_opens_http_client_connections() -> None:
    """Model servers are reached through ``_http`` alone: one transport, one error mapping."""
    users = {str(p.relative_to(PACKAGE)): found for p in sources() if (found := http_client_imports(p))}
    assert users, "the HTTP client itself imports http.client: this check sees nothing"
    others = {name for name in users if name.split("/")[0] != "_http"}
    assert not others, f"only _http/ may be an HTTP client: {users}"


def test_the_http_client_check_sees_every_spelling(tmp_path: Path) -> None:
    spellings = [
        "import http.client",
        "from http import client",
        "from http.client import HTTPConnection",
        "import urllib.request as r",
        "from urllib import request",
        "def f():\n    import httpx",
    ]
    for i, code in enumerate(spellings):
        (tmp_path / f"m{i}.py").write_text(code + "\n")
        assert http_client_imports(tmp_path / f"m{i}.py"), code
    for harmless in ("import urllib.parse", "from http.server import HTTPServer", "import http", "import socket"):
        (tmp_path / "h.py").write_text(harmless + "\n")
        assert not http_client_imports(tmp_path / "h.py"), harmless
