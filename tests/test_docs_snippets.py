"""The Python code blocks of README.md and docs/ run as written (issue 30), so they cannot go stale.

Each document's blocks run in order in one namespace, in a fresh folder holding what the
documents assume is yours: an index ``my-index`` (sources under ``docs/``, team ``ops``), a
folder ``my-project/``, and the few names a block leaves to the reader (``my_model``, ``text``...,
in ``YOURS``). The local servers the blocks name (a model server on 127.0.0.1:8080, the proxy on
127.0.0.1:8765) are started by the test on free loopback ports and the addresses swapped in.
A block that needs what a test cannot start (a Dask scheduler, llama.cpp's own API) is listed in
``NOT_RUN`` with the reason; it must still compile and every name it imports from clanker_rag
must exist.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from clanker_rag._kb import KnowledgeBase
from clanker_rag._serve._proxy import make_server
from tests.helpers._fake_upstream import FakeUpstream, Reply

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


class Block(NamedTuple):
    doc: str
    line: int
    code: str


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        out.append(Block(doc.name, text.count("\n", 0, m.start()) + 2, m.group(1)))
    return out


# (document, a piece of the block's first line) -> why the test cannot run it.
NOT_RUN = {
    ("controller.md", "from clanker_rag.backends import LlamaCppBackend"): (
        "llama.cpp's own /completion API on port 8080: tests/backends run LlamaCppBackend on the real server"
    ),
    ("controller.md", "Token(text, logprob=None"): "a signature, not code to run",
    ("scale.md", "from distributed import Client"): (
        "a Dask scheduler at tcp://scheduler:8786 and a shared /shared folder: tests/cluster make the same calls"
    ),
}


class _Model:
    """README's ``my_model``: streams a fixed answer in pieces."""

    def stream(self, prompt: str, stop: list[str]) -> Iterator[str]:
        yield from ["The proxy ", "listens on ", "port 8765."]


def _your_names(folder: Path) -> dict[str, dict[str, Any]]:
    """Per document, the names its blocks leave to the reader."""
    from clanker_rag import RagController

    controller_kb = KnowledgeBase.load(folder / "my-index")
    return {
        "README.md": {"my_model": _Model()},
        "controller.md": {
            "kb": controller_kb,  # the first block's, which needs llama.cpp (NOT_RUN)
            "controller": RagController(controller_kb),
            "prompt": "Q: Which port does the proxy use?\nA:",
            "existing_stream": iter(["It is ", "8765."]),
            "safe_eval": lambda expr: sum(int(x) for x in expr.split("+")),
        },
        "library.md": {
            "text": "# Install\n\nInstall with pip. Cat food goes in the blue bowl.\n",
            "text1": "Timeouts are 30 s by default.",
            "text2": "The ops team rotates the keys.",
        },
        "quality.md": {"my_llm_paraphrases": lambda query, n: [query, query.lower()][:n]},
    }


def _your_folder(folder: Path) -> None:
    kb = KnowledgeBase()
    for name in ("install.md", "proxy.md", "library.md"):
        meta = {"team": "ops", "lang": "en"}
        kb.add_text((ROOT / "docs" / name).read_text(encoding="utf-8"), f"docs/{name}", meta)
    kb.add_text("Rotate the signing keys with `vault rotate` every 90 days.", "ops/keys.md", {"team": "ops"})
    kb.save(folder / "my-index")
    project = folder / "my-project"
    (project / "src").mkdir(parents=True)
    (project / "README.md").write_text("# My project\n\nIt counts words.\n", encoding="utf-8")
    (project / "src" / "count.py").write_text("def count(text):\n    return len(text.split())\n", encoding="utf-8")
    shutil.copytree(ROOT / "docs", folder / "docs")


def _run_imports(block: Block, namespace: dict[str, Any]) -> None:
    """Only the block's imports, into ``namespace`` (later blocks use them); each clanker_rag name must exist."""
    tree = ast.parse(block.code)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clanker_rag"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{block.doc}:{block.line}: {node.module} has no {alias.name}"
    imports = ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
    exec(compile(imports, f"{block.doc}:{block.line}", "exec"), namespace)


@pytest.fixture()
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The model server and the proxy the documents name, on free loopback ports."""
    clients: list[Any] = []
    try:
        import openai
    except ImportError:  # the blocks that use it fail then, naming it
        pass
    else:

        class Recorded(openai.OpenAI):
            # An OpenAI client keeps its connections open (a server thread on each) until closed.
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                clients.append(self)

        monkeypatch.setattr(openai, "OpenAI", Recorded)
    with FakeUpstream(lambda path, body: Reply(["Rotate ", "them with ", "vault rotate."])) as up:
        kb = KnowledgeBase()
        kb.add_text("Rotate the signing keys with `vault rotate` every 90 days.", "ops/keys.md")
        proxy = make_server(kb, up.url, port=0)
        thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield {"http://127.0.0.1:8080": up.url, "http://127.0.0.1:8765": proxy.url}
        finally:
            for client in clients:
                client.close()
            proxy.shutdown()
            proxy.server_close()
            thread.join(10)


def _run_doc(
    doc: Path, folder: Path, servers: dict[str, str], monkeypatch: pytest.MonkeyPatch, **yours: Any
) -> dict[str, Any]:
    monkeypatch.chdir(folder)
    namespace: dict[str, Any] = {"__name__": "__doc_snippet__", **_your_names(folder).get(doc.name, {}), **yours}
    for block in blocks(doc):
        reason = next((why for (name, first), why in NOT_RUN.items() if name == doc.name and first in block.code), None)
        compile(block.code, f"{block.doc}:{block.line}", "exec")
        if reason is not None:
            _run_imports(block, namespace)
            continue
        code = block.code
        for written, real in servers.items():
            code = code.replace(written, real)
        try:
            exec(compile(code, f"{block.doc}:{block.line}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{block.doc}:{block.line} fails as written: {type(exc).__name__}: {exc}") from exc
    return namespace


PLAIN = [doc for doc in DOCS if doc.name != "quality.md" and blocks(doc)]


def test_every_not_run_entry_still_names_a_block() -> None:
    for (name, first), _ in NOT_RUN.items():
        assert any(first in b.code for b in blocks(ROOT / "docs" / name)), (name, first)


@pytest.mark.parametrize("doc", PLAIN, ids=lambda p: p.name)
def test_python_blocks_run(
    doc: Path, tmp_path: Path, servers: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    _your_folder(tmp_path)
    _run_doc(doc, tmp_path, servers, monkeypatch)
    capsys.readouterr()


@pytest.mark.slow
@pytest.mark.rerank
def test_quality_blocks_run_with_the_real_model(
    tmp_path: Path, servers: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from tests.helpers._models import minilm_path
    from tests.helpers._paths import SHARED

    _your_folder(tmp_path)
    # Its evaluate_dataset("datasets/cranfield") is found under CLANKER_RAG_SHARED, as the doc says.
    monkeypatch.setenv("CLANKER_RAG_SHARED", str(SHARED))
    # A smaller index than the others: every chunk is embedded on the CPU.
    shutil.rmtree(tmp_path / "my-index")
    small = KnowledgeBase()
    small.add_text("Rotate the API keys every 90 days.\n\nInstall with pip.", "docs/keys.md", {"lang": "en"})
    small.save(tmp_path / "my-index")
    shutil.rmtree(tmp_path / "docs")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tides.md").write_text("The sea rises and falls twice a day: the tides.\n", encoding="utf-8")
    model_path = str(minilm_path())
    namespace = _run_doc(ROOT / "docs" / "quality.md", tmp_path, servers, monkeypatch, model_path=model_path)
    assert namespace["result"].metrics["ndcg@10"] > 0.3  # the Cranfield figure the doc's eval gives
    capsys.readouterr()


def test_the_readme_snippet_that_adds_and_saves_runs_twice_in_one_folder(
    tmp_path: Path, servers: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    [block] = [b for b in blocks(ROOT / "README.md") if ".add_text(" in b.code]
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        namespace: dict[str, Any] = {"__name__": "__doc_snippet__"}
        exec(compile(block.code, f"README.md:{block.line}", "exec"), namespace)
        assert namespace["hits"][0].source == "notes.md"
    assert KnowledgeBase.load(tmp_path / "my-index").sources() == ["notes.md"]
    capsys.readouterr()


def test_the_readme_headline_search_finds_the_how_to_first() -> None:
    # The README promises that the shipped guide answers its own "how do I ..." questions.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [query] = re.findall(r'clanker-rag search "(how do I [^"]+)"', readme)[:1]
    top = KnowledgeBase.default().search(query, 1)[0]
    assert top.source == "docs/ingestion.md" or (top.section or "").startswith("The clanker-rag command > ingest"), (
        top.source,
        top.section,
    )
