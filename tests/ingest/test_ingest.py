"""Ingesting real temporary trees: discovery, safety, formats, re-ingestion."""

from __future__ import annotations

import codecs
import io
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from clanker_rag._exceptions import ConfigError, IngestError
from clanker_rag._ingest._options import IngestOptions
from clanker_rag._ingest._report import IngestReport
from clanker_rag._kb import KnowledgeBase
from tests.helpers._trees import write


def ingest(kb: KnowledgeBase, path: Any, **options: Any) -> IngestReport:
    """The ingest as ``kb.ingest`` runs it (with the knowledge base's own writer)."""
    return kb.ingest(path, **options)


# Built by concatenation so this test file is not itself a "file holding a
# private-key block" for anyone ingesting the repository.
KEY_HEADER = "-----BEGIN " + "RSA PRIVATE KEY-----"
KEY_FOOTER = "-----END " + "RSA PRIVATE KEY-----"
ROOT = Path(__file__).resolve().parents[2]


def skipped_reason(report: IngestReport, rel: str) -> str:
    reasons = [reason for path, reason in report.skipped if path == rel]
    assert reasons, f"{rel} not in skipped: {report.skipped}"
    return reasons[0]


def alpha(n: int) -> str:
    """Letters only: the analyser splits words at digits."""
    return "".join(chr(ord("a") + int(d)) for d in f"{n:02d}")


def found(kb: KnowledgeBase, query: str, k: int = 10) -> set[str]:
    return {hit.source for hit in kb.search(query, k)}


@pytest.fixture
def kb() -> KnowledgeBase:
    return KnowledgeBase(chunk_size=60, stride=30)


# ------------------------------------------------------------- discovery


def test_gitignore_rules_are_honoured(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, ".gitignore", "*.log\n!keep.log\nbuild_out/\n/only_root.txt\ndocs/**/draft.md\n# comment\n")
    write(tmp_path, "a.md", "alpha")
    write(tmp_path, "debug.log", "noisy")
    write(tmp_path, "keep.log", "kept log")
    write(tmp_path, "build_out/gen.md", "generated")
    write(tmp_path, "only_root.txt", "root only")
    write(tmp_path, "sub/only_root.txt", "deeper one stays")
    write(tmp_path, "docs/x/y/draft.md", "draft")
    write(tmp_path, "docs/final.md", "final")
    write(tmp_path, "sub/.gitignore", "local.md\n")
    write(tmp_path, "sub/local.md", "local")
    write(tmp_path, "other/local.md", "not ignored here")
    report = ingest(kb, tmp_path)
    assert kb.sources() == sorted(["a.md", "keep.log", "sub/only_root.txt", "docs/final.md", "other/local.md"])
    assert skipped_reason(report, "debug.log") == "ignored by .gitignore"
    assert skipped_reason(report, "build_out/") == "ignored by .gitignore"
    assert skipped_reason(report, "sub/local.md") == "ignored by .gitignore"
    assert skipped_reason(report, "docs/x/y/draft.md") == "ignored by .gitignore"


def test_gitignore_of_enclosing_repository_applies(tmp_path: Path, kb: KnowledgeBase) -> None:
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "*.tmp.md\nproj/secret_dir/\n")
    write(tmp_path, "proj/a.md", "alpha")
    write(tmp_path, "proj/b.tmp.md", "temporary")
    write(tmp_path, "proj/secret_dir/c.md", "hidden")
    ingest(kb, tmp_path / "proj")
    assert kb.sources() == ["a.md"]
    ingest(kb := KnowledgeBase(), tmp_path / "proj", gitignore=False)
    assert kb.sources() == ["a.md", "b.tmp.md", "secret_dir/c.md"]


def test_tool_and_dependency_folders_are_pruned(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "src/app.py", "def main():\n    return 1\n")
    for rel in (
        ".git/config.txt",
        "node_modules/pkg/index.js",
        "__pycache__/x.py",
        "dist/out.js",
        "build/out.txt",
        "myenv/lib/site.py",
        "pkg.egg-info/PKG-INFO.txt",
    ):
        write(tmp_path, rel, "should not be indexed")
    write(tmp_path, "myenv/pyvenv.cfg", "home = /usr/bin")
    report = ingest(kb, tmp_path)
    assert kb.sources() == ["src/app.py"]
    assert skipped_reason(report, "node_modules/") == "skipped folder (node_modules)"
    assert skipped_reason(report, "myenv/") == "skipped folder (virtualenv)"
    assert skipped_reason(report, ".git/").startswith("skipped folder")


def test_include_and_exclude_globs(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "docs/a.md", "alpha")
    write(tmp_path, "docs/b.txt", "beta")
    write(tmp_path, "docs/notes.custom", "custom extension")
    write(tmp_path, "src/c.md", "gamma")
    report = ingest(kb, tmp_path, include=["docs/*", "*.md"], exclude=["src/"])
    assert kb.sources() == ["docs/a.md", "docs/b.txt", "docs/notes.custom"]
    assert skipped_reason(report, "src/") == "excluded by 'src/'"


def test_allow_list_skips_are_reported(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "a.py", "x = 1\n")
    write(tmp_path, "data.bin", b"\x00\x01")
    write(tmp_path, "Makefile", "all:\n\techo hi\n")
    report = ingest(kb, tmp_path)
    assert kb.sources() == ["Makefile", "a.py"]
    assert "not in the allow-list" in skipped_reason(report, "data.bin")


def test_extensions_option_replaces_allow_list(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "a.py", "x = 1\n")
    write(tmp_path, "b.md", "words")
    ingest(kb, tmp_path, extensions=["md"])
    assert kb.sources() == ["b.md"]


def test_symlink_loop_and_escape(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root, "a/doc.md", "inside the root")
    (root / "a" / "loop").symlink_to(root, target_is_directory=True)
    write(tmp_path, "outside/out.md", "outside the root")
    (root / "escape").symlink_to(tmp_path / "outside", target_is_directory=True)
    (root / "dangling.md").symlink_to(tmp_path / "missing.md")
    kb = KnowledgeBase()
    report = ingest(kb, root)
    assert kb.sources() == ["a/doc.md"]
    assert "symlink loop" in skipped_reason(report, "a/loop/")
    assert skipped_reason(report, "escape/") == "symlink leaves the ingest root"
    assert skipped_reason(report, "dangling.md") == "broken symlink"
    kb2 = KnowledgeBase()
    ingest(kb2, root, follow_symlinks=True)
    assert kb2.sources() == ["a/doc.md", "escape/out.md"]


def test_very_deep_tree(tmp_path: Path, kb: KnowledgeBase) -> None:
    deep = tmp_path
    for _ in range(150):
        deep = deep / "d"
    write(deep, "bottom.md", "the bottom of a deep tree")
    ingest(kb, tmp_path)
    assert len(kb.sources()) == 1 and kb.sources()[0].endswith("d/bottom.md")


def test_undecodable_file_name_and_fifo(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "ok.md", "fine")
    os.close(os.open(os.fsencode(tmp_path) + b"/bad\xff.md", os.O_CREAT | os.O_WRONLY))
    os.mkfifo(tmp_path / "pipe.md")
    report = ingest(kb, tmp_path)
    assert kb.sources() == ["ok.md"]
    assert skipped_reason(report, "bad\ufffd.md") == "file name is not valid UTF-8"
    assert skipped_reason(report, "pipe.md") == "not a regular file"


def test_single_file_is_named_by_its_file_name(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = write(tmp_path, "deep/er/notes.weird", "explicitly named file")
    report = ingest(kb, path)
    assert report.added == ["notes.weird"]
    assert "notes.weird" in found(kb, "explicitly named")


def test_missing_path_raises(tmp_path: Path, kb: KnowledgeBase) -> None:
    with pytest.raises(IngestError):
        ingest(kb, tmp_path / "nope")
    with pytest.raises(ConfigError):
        ingest(kb, tmp_path, max_file_size=0)


def test_several_roots_keep_equal_names_apart(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "pkg_a/__init__.py", "ALPHA_FLAG = 1\n")
    write(tmp_path, "pkg_b/__init__.py", "BETA_FLAG = 2\n")
    write(tmp_path, "notes.md", "loose file")
    report = ingest(kb, [tmp_path / "pkg_a", tmp_path / "pkg_b", tmp_path / "notes.md"])
    assert sorted(report.added) == ["notes.md", "pkg_a/__init__.py", "pkg_b/__init__.py"]
    again = ingest(kb, [tmp_path / "pkg_a", tmp_path / "pkg_b", tmp_path / "notes.md"])
    assert len(again.unchanged) == 3 and not again.updated and not again.removed


def test_index_folder_inside_root_is_not_ingested(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "a.md", "alpha")
    index = tmp_path / "idx"
    ingest(kb, tmp_path, index_path=index)
    ingest(kb, tmp_path, index_path=index)
    assert kb.sources() == ["a.md"]


# ---------------------------------------------------------- secret guard


def test_secret_guard_blocks_credential_files(tmp_path: Path, kb: KnowledgeBase) -> None:
    secret = "zanzibartoken"
    names = [
        ".env",
        ".env.production",
        "id_rsa",
        "id_ed25519.pub",
        "server.pem",
        "tls.key",
        "cert.p12",
        ".netrc",
        ".npmrc",
        ".pypirc",
        "credentials.json",
        ".aws/credentials",
        ".aws/config",
        ".docker/config.json",
        "prod.env",
    ]
    for name in names:
        write(tmp_path, name, f"TOKEN={secret}\n")
    write(tmp_path, "notes.txt", f"my key\n{KEY_HEADER}\nMIIEow{secret}\n{KEY_FOOTER}\n")
    write(tmp_path, "wide.txt", codecs.BOM_UTF16_LE + f"{KEY_HEADER}\n{secret}\n".encode("utf-16-le"))
    write(tmp_path, "readme.md", "public documentation")
    report = ingest(kb, tmp_path, include=["*"])
    assert kb.sources() == ["readme.md"]
    assert not kb.search(secret)
    for name in names:
        if not name.startswith(".aws/") and not name.startswith(".docker/"):
            assert skipped_reason(report, name).startswith("secret guard"), name
    assert skipped_reason(report, ".aws/") == "secret guard: credential folder"
    assert skipped_reason(report, "notes.txt") == "secret guard: contains a private-key block"
    assert skipped_reason(report, "wide.txt") == "secret guard: contains a private-key block"


def test_secret_guard_opt_out(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "notes.txt", f"{KEY_HEADER}\nquokkavalue\n{KEY_FOOTER}\n")
    write(tmp_path, "server.pem", "pemcontent")
    ingest(kb, tmp_path, secret_guard=False, extensions=["txt", "pem"])
    assert kb.sources() == ["notes.txt", "server.pem"]
    assert found(kb, "quokkavalue") == {"notes.txt"}


def test_file_that_gains_a_key_is_removed(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = write(tmp_path, "config.txt", "harmless wombat settings")
    ingest(kb, tmp_path)
    assert found(kb, "wombat") == {"config.txt"}
    path.write_text(f"harmless wombat settings\n{KEY_HEADER}\nabc\n{KEY_FOOTER}\n")
    report = ingest(kb, tmp_path)
    assert report.removed == ["config.txt"]
    assert kb.sources() == []
    assert not kb.search("wombat")


# ------------------------------------------------------------- reading


def test_binary_empty_and_oversized_files_are_skipped(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "nul.py", b"print('x')\x00\x00\x01")
    write(tmp_path, "image.txt", b"\x89PNG\r\n\x1a\n" + b"rest")
    write(tmp_path, "empty.md", b"")
    write(tmp_path, "blank.md", " \n\t\n  ")
    write(tmp_path, "big.txt", "a" * 5000)
    write(tmp_path, "fine.txt", "small and fine")
    report = ingest(kb, tmp_path, max_file_size=4096)
    assert kb.sources() == ["fine.txt"]
    assert skipped_reason(report, "nul.py") == "binary file (contains NUL bytes)"
    assert skipped_reason(report, "image.txt") == "binary file (PNG image)"
    assert skipped_reason(report, "empty.md") == "empty or whitespace-only"
    assert skipped_reason(report, "blank.md") == "empty or whitespace-only"
    assert skipped_reason(report, "big.txt").startswith("too large (5000 bytes")


def test_size_cap_is_checked_before_reading(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.txt"
    with open(path, "wb") as fh:  # sparse: 1 GiB on one line, no disk used
        fh.truncate(1 << 30)
    reads: list[int] = []
    real_open = io.open

    def spy(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        handle = real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]
        if str(file) == str(path):
            original = handle.read

            def read(n: int = -1) -> bytes:
                reads.append(n)
                return original(n)  # type: ignore[no-any-return]

            handle.read = read
        return handle

    monkeypatch.setattr("builtins.open", spy)
    report = ingest(kb, tmp_path)
    assert skipped_reason(report, "huge.txt").startswith("too large")
    assert reads == []


@pytest.mark.parametrize(
    ("raw", "encoding", "word"),
    [
        ("café crème brûlée".encode("cp1252") + b" \x93quoted\x94", "cp1252", "brûlée"),
        (b"na\xefve caf\xe9 \x81\x8d", "latin-1", "naïve"),
        (codecs.BOM_UTF16_LE + "über straße".encode("utf-16-le"), "utf-16", "straße"),
        (codecs.BOM_UTF16_BE + "grüße aus köln".encode("utf-16-be"), "utf-16", "köln"),
        (codecs.BOM_UTF32_LE + "ζωή είναι".encode("utf-32-le"), "utf-32", "ζωή"),
        (codecs.BOM_UTF8 + "plain utf8 søster".encode(), "utf-8-sig", "søster"),
        ("plain utf8 søster".encode(), "utf-8", "søster"),
    ],
)
def test_encodings_are_detected_and_recorded(
    tmp_path: Path, kb: KnowledgeBase, raw: bytes, encoding: str, word: str
) -> None:
    write(tmp_path, "doc.txt", raw)
    report = ingest(kb, tmp_path)
    assert report.added == ["doc.txt"]
    meta = kb.source_metadata("doc.txt")
    assert meta is not None and meta["encoding"] == encoding
    hits = kb.search(word)
    assert hits and word in hits[0].text


def test_per_file_metadata(tmp_path: Path, kb: KnowledgeBase) -> None:
    import hashlib

    data = b"# Title\n\nbody text\n"
    path = write(tmp_path, "sub/doc.md", data)
    ingest(kb, tmp_path)
    meta = kb.source_metadata("sub/doc.md")
    assert meta is not None
    st = path.stat()
    assert meta["path"] == "sub/doc.md"
    assert meta["format"] == "markdown"
    assert meta["size"] == len(data)
    assert meta["mtime_ns"] == st.st_mtime_ns
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["encoding"] == "utf-8"
    assert meta["root"] == os.path.realpath(tmp_path)
    hit = kb.search("body text")[0]
    assert hit.metadata["sha256"] == meta["sha256"]
    assert (hit.start_line, hit.end_line) == (1, 3)
    assert hit.text == data.decode()[hit.start : hit.end]


# -------------------------------------------------------------- formats


def test_markdown_heading_paths_are_stored_and_searchable(tmp_path: Path, kb: KnowledgeBase) -> None:
    filler = " ".join(f"filler{i}" for i in range(80))
    write(
        tmp_path,
        "guide.md",
        textwrap.dedent(f"""\
        # Guide

        {filler}

        ## Deployment

        {filler}

        ### Linux

        Run the installer script with sudo.
        """),
    )
    ingest(kb, tmp_path)
    hits = kb.search("deployment installer")
    assert hits[0].section == "Guide > Deployment > Linux"
    # The heading words are found through the label, the text stays the slice.
    assert "Deployment" not in hits[0].text
    assert hits[0].text.startswith("### Linux")


def test_markdown_fenced_code_is_not_split(tmp_path: Path) -> None:
    kb = KnowledgeBase(chunk_size=40, stride=20)
    code = "\n".join(f"    step_{i} = run({i})" for i in range(12))
    prose = " ".join(f"word{i}" for i in range(30))
    write(tmp_path, "a.md", f"# Title\n\n{prose}\n\n```python\n{code}\n```\n\n{prose}\n")
    ingest(kb, tmp_path)
    chunks = [hit.text for hit in kb.chunks("a.md")]
    holding = [c for c in chunks if "step_0" in c]
    assert len(holding) == 1
    assert "```python" in holding[0] and "step_11" in holding[0] and holding[0].count("```") == 2


def test_long_list_is_cut_at_line_starts(tmp_path: Path) -> None:
    kb = KnowledgeBase(chunk_size=40, stride=20)
    items = "\n".join(f"- item {alpha(i)} has four words" for i in range(60))
    write(tmp_path, "list.md", f"# Things\n\n{items}\n")
    ingest(kb, tmp_path)
    chunks = list(kb.chunks("list.md"))
    assert len(chunks) > 3
    for a, b in itertools.pairwise(chunks):
        assert a.end == b.start  # no overlap, no gap
        assert b.text.startswith("- item ")


def test_rst_headings(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(
        tmp_path,
        "doc.rst",
        textwrap.dedent("""\
        =======
        Manual
        =======

        Intro.

        Configuration
        -------------

        Set the kumquat option.
        """),
    )
    ingest(kb, tmp_path)
    hit = kb.search("kumquat")[0]
    assert hit.section == "Manual > Configuration"


def test_code_symbols_and_path_are_searchable(tmp_path: Path) -> None:
    kb = KnowledgeBase(chunk_size=50, stride=25)
    body = "\n".join(f"        total += {i}" for i in range(40))
    write(
        tmp_path,
        "src/helpers.py",
        textwrap.dedent('''\
        import os


        def small():
            return 1


        class Widget:
            """A widget."""

            def frobnicate(self):
                total = 0
        {body}
                return total

            def polish(self):
                return "shiny"
        ''').replace("{body}", body),
    )
    write(tmp_path, "web/app.js", "export function renderDashboard(el) {\n  el.innerHTML = 'x';\n}\n")
    ingest(kb, tmp_path)
    hit = kb.search("frobnicate")[0]
    assert hit.source == "src/helpers.py"
    assert hit.section is not None and "Widget.frobnicate" in hit.section
    assert "def frobnicate" in hit.text
    polish = [h for h in kb.search("polish") if h.section and "Widget.polish" in h.section]
    assert polish and "def polish" in polish[0].text
    assert found(kb, "helpers") == {"src/helpers.py"}
    js = kb.search("renderDashboard")[0]
    assert js.source == "web/app.js" and js.section is not None and "renderDashboard" in js.section


def test_html_visible_text(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(
        tmp_path,
        "page.html",
        (
            "<html><head><title>Gazette</title><style>.marmot{color:red}</style>"
            "<script>var ocelotVar = 1;</script></head><body><h1>News</h1><p>The <b>pangolin</b> story."
            "</p></body></html>"
        ),
    )
    ingest(kb, tmp_path)
    assert found(kb, "pangolin") == {"page.html"}
    assert found(kb, "gazette") == {"page.html"}
    assert not kb.search("ocelotVar") and not kb.search("marmot")
    assert kb.search("pangolin")[0].section == "News"


def test_csv_rows_carry_headers(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "people.csv", "name,city,role\nAlice,Paris,engineer\nBob,Lima,baker\n")
    write(tmp_path, "pets.tsv", "pet\towner\nrex\tcarol\n")
    ingest(kb, tmp_path)
    hit = kb.search("Lima")[0]
    assert hit.source == "people.csv"
    assert hit.text == "name: Bob\ncity: Lima\nrole: baker\n\n"
    assert "Alice" not in hit.text  # one record per chunk
    assert kb.search("rex")[0].text.startswith("pet: rex\nowner: carol")


def test_json_and_jsonl_records(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "items.json", '[{"name": "anvil", "use": "smithing"}, {"name": "bellows", "use": "air"}]')
    write(tmp_path, "log.jsonl", '{"event": "start"}\n{"event": "halt", "why": "overheat"}\n')
    ingest(kb, tmp_path)
    hit = kb.search("bellows")[0]
    assert "anvil" not in hit.text and "bellows" in hit.text
    assert hit.section == "name=bellows"
    hit = kb.search("overheat")[0]
    assert hit.text.strip() == '{"event": "halt", "why": "overheat"}'
    assert hit.section is None


def _docx_bytes(paragraphs: list[tuple[str | None, str]]) -> bytes:
    ns = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = []
    for style, text in paragraphs:
        ppr = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
        body.append(f"<w:p>{ppr}<w:r><w:t>{text}</w:t></w:r></w:p>")
    xml = (
        f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{ns}">'
        f"<w:body>{''.join(body)}</w:body></w:document>"
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        zf.writestr("word/document.xml", xml)
    return buf.getvalue()


def test_docx_paragraphs_and_headings(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(
        tmp_path,
        "report.docx",
        _docx_bytes(
            [
                ("Heading1", "Quarterly Results"),
                (None, "Revenue grew thanks to marzipan sales."),
                ("Heading2", "Outlook"),
                (None, "We expect more turnips."),
            ]
        ),
    )
    write(tmp_path, "broken.docx", b"PK\x03\x04 not really a zip")
    report = ingest(kb, tmp_path)
    hit = kb.search("turnips")[0]
    assert hit.source == "report.docx" and hit.section == "Quarterly Results > Outlook"
    assert "We expect more turnips." in hit.text
    meta = kb.source_metadata("report.docx")
    assert meta is not None and meta["format"] == "docx"
    assert "Word document" in skipped_reason(report, "broken.docx")


def _pdf_bytes(page_texts: list[str]) -> bytes:
    """A minimal valid PDF with one Helvetica text line per page."""
    n = len(page_texts)
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [" + " ".join(f"{4 + 2 * i} 0 R" for i in range(n)) + f"] /Count {n} >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(page_texts):
        stream = f"BT /F1 18 Tf 72 700 Td ({text}) Tj ET"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R"
            " /Resources << /Font << /F1 3 0 R >> >> >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def test_pdf_pages_with_or_without_the_extra(tmp_path: Path, kb: KnowledgeBase) -> None:
    write(tmp_path, "paper.pdf", _pdf_bytes(["Intro about pelicans", "Methods with flamingos"]))
    report = ingest(kb, tmp_path)
    try:
        import pypdf  # noqa: F401
    except ImportError:
        assert f"pip install -e '{ROOT}[pdf]'" in skipped_reason(report, "paper.pdf")
        return
    assert report.added == ["paper.pdf"]
    hit = kb.search("flamingos")[0]
    assert hit.source == "paper.pdf" and hit.section == "page 2" and "pelicans" not in hit.text


def test_pdf_without_extra_names_the_extra(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)  # makes "import pypdf" fail
    write(tmp_path, "paper.pdf", b"%PDF-1.4\n%...\n")
    report = ingest(kb, tmp_path)
    assert f"pip install -e '{ROOT}[pdf]'" in skipped_reason(report, "paper.pdf")


# ------------------------------------------------------------ re-ingest


def test_reingest_after_edit_leaves_no_stale_chunk(tmp_path: Path, kb: KnowledgeBase) -> None:
    paras = [" ".join(f"para{alpha(p)}word{alpha(i)}" for i in range(50)) for p in range(6)]
    old = "# Notes\n\n" + "\n\n".join(paras) + "\n\nThe narwhal migration is here.\n"
    path = write(tmp_path, "notes.md", old)
    ingest(kb, tmp_path)
    n_old = len(list(kb.chunks("notes.md")))
    assert n_old > 3 and found(kb, "narwhal") == {"notes.md"}
    new = "# Notes\n\n" + "\n\n".join(paras[:2]) + "\n\nNow about the okapi.\n"
    path.write_text(new)
    os.utime(path, ns=(1, 1))  # make sure size+mtime differ from the first run
    report = ingest(kb, tmp_path)
    assert report.updated == ["notes.md"] and not report.added
    assert not kb.search("narwhal")
    assert not kb.search("paraafworddd")
    assert found(kb, "paraabworddd") == {"notes.md"}
    assert found(kb, "okapi") == {"notes.md"}
    for hit in kb.chunks("notes.md"):
        assert hit.text == new[hit.start : hit.end]


def test_unchanged_files_are_skipped(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "a.md", "alpha text")
    path = write(tmp_path, "b.py", "def beta():\n    return 2\n")
    first = ingest(kb, tmp_path)
    assert sorted(first.added) == ["a.md", "b.py"] and first.chunks_added > 0
    before = len(kb)
    assert first.chunks_total == before == first.chunks_added
    second = ingest(kb, tmp_path)
    assert sorted(second.unchanged) == ["a.md", "b.py"]
    assert not second.added and not second.updated and second.chunks_added == 0
    assert len(kb) == before
    # Same content, new mtime: recognised by hash, not re-parsed.
    os.utime(path, ns=(10**18, 10**18))
    from clanker_rag._ingest._readers import _registry

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed an unchanged file")

    monkeypatch.setattr(_registry, "parse_text", boom)
    third = ingest(kb, tmp_path)
    assert sorted(third.unchanged) == ["a.md", "b.py"]


def test_deleted_files_are_removed_on_sync(tmp_path: Path, kb: KnowledgeBase) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write(one, "keep.md", "keeper")
    gone = write(one, "gone.md", "ephemeral axolotl")
    write(two, "other.md", "other root")
    ingest(kb, one)
    ingest(kb, two)
    assert kb.sources() == ["gone.md", "keep.md", "other.md"]
    gone.unlink()
    report = ingest(kb, one)
    assert report.removed == ["gone.md"] and report.chunks_removed >= 1
    assert kb.sources() == ["keep.md", "other.md"]  # the other root is untouched
    assert not kb.search("axolotl")
    write(one, "later.md", "late arrival")
    report = ingest(kb, one, sync=False)
    assert report.added == ["later.md"] and not report.removed


def test_ingest_interrupted_by_exception_keeps_saved_work(tmp_path: Path) -> None:
    tree, index = tmp_path / "tree", tmp_path / "index"
    for i in range(12):
        write(tree, f"f{i:02d}.md", f"document number{i} about topic{i}")
    kb = KnowledgeBase()
    calls = 0
    real_add = kb.add_text

    def flaky(*args: object, **kwargs: object) -> int:
        nonlocal calls
        calls += 1
        if calls == 8:
            raise RuntimeError("disk on fire")
        return real_add(*args, **kwargs)  # type: ignore[arg-type]

    kb.add_text = flaky  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        ingest(kb, tree, index_path=index, checkpoint_files=3)
    saved = KnowledgeBase.load(index)
    assert saved.sources() == [f"f{i:02d}.md" for i in range(7)]
    report = ingest(saved, tree, index_path=index)
    assert sorted(report.unchanged) == [f"f{i:02d}.md" for i in range(7)]
    assert sorted(report.added) == [f"f{i:02d}.md" for i in range(7, 12)]
    assert KnowledgeBase.load(index).sources() == [f"f{i:02d}.md" for i in range(12)]


def test_ingest_killed_midway_can_be_rerun(tmp_path: Path) -> None:
    tree, index = tmp_path / "tree", tmp_path / "index"
    n = 30
    for i in range(n):
        write(tree, f"f{i:02d}.md", f"document number{i} about subject{i}")
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from clanker_rag._kb import KnowledgeBase
        kb = KnowledgeBase()
        real_add = kb.add_text
        calls = 0
        def add_then_die(*args, **kwargs):
            global calls
            calls += 1
            if calls == 18:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_add(*args, **kwargs)
        kb.add_text = add_then_die
        kb.ingest({str(tree)!r}, index_path={str(index)!r}, checkpoint_files=5)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    saved = KnowledgeBase.load(index)
    assert saved.sources() == [f"f{i:02d}.md" for i in range(15)]
    report = ingest(saved, tree, index_path=index)
    assert len(report.unchanged) == 15 and len(report.added) == n - 15
    final = KnowledgeBase.load(index)
    assert len(final.sources()) == n
    assert final.search("subject29")[0].source == "f29.md"


def test_report_accounts_for_every_file(tmp_path: Path, kb: KnowledgeBase) -> None:
    files = ["a.md", "b.py", "c.png", "d.env", ".env", "e/f.txt", "e/g.md"]
    for rel in files:
        write(tmp_path, rel, "content of " + rel)
    write(tmp_path, "h/empty.txt", "")
    report = ingest(kb, tmp_path)
    seen = set(report.added) | {path for path, _ in report.skipped}
    assert seen == set(files) | {"h/empty.txt"}
    assert all(reason for _, reason in report.skipped)
    assert report.skip_reasons()["secret guard"] == 2
    data = report.to_dict()
    assert data["added"] == report.added and ["c.png", skipped_reason(report, "c.png")] in data["skipped"]
    assert "added" in report.summary()


def test_progress_bar_only_when_asked_or_tty(
    tmp_path: Path, kb: KnowledgeBase, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "a.md", "alpha")
    ingest(kb, tmp_path)
    assert capsys.readouterr().err == ""
    write(tmp_path, "b.md", "beta")
    ingest(kb, tmp_path, progress=True)
    err = capsys.readouterr().err
    assert "files/s" in err and "ETA" in err and "2/2 files" in err


def test_kb_ingest_method_delegates(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "delegated capybara")
    kb = KnowledgeBase()
    report = kb.ingest(tmp_path)
    assert isinstance(report, IngestReport)
    assert report.added == ["a.md"] and kb.sources() == ["a.md"]


def test_edit_rewrites_the_index_only_when_the_block_changed_it(tmp_path: Path) -> None:
    from clanker_rag._storage import _store

    tree, index = tmp_path / "tree", tmp_path / "index"
    for i in range(4):
        write(tree, f"f{i}.md", f"document {i}")
    with KnowledgeBase.edit(index) as kb:
        report = kb.ingest(tree, index_path=index)
    # The ingest saved at its end; the block's exit had nothing left to write.
    assert report.saves == 1
    first = _store.read_revision(index)
    with KnowledgeBase.edit(index) as kb:
        again = kb.ingest(tree, index_path=index)  # nothing changed on disk
    assert len(again.unchanged) == 4 and again.saves == 0
    assert _store.read_revision(index) == first
    with KnowledgeBase.edit(index) as kb:
        kb.remove("f1.md")
    second = _store.read_revision(index)
    assert second != first
    assert KnowledgeBase.load(index).sources() == ["f0.md", "f2.md", "f3.md"]
    with KnowledgeBase.edit(index) as kb:
        kb.add_text("a new note", "note.md")
    assert _store.read_revision(index) != second
    assert "note.md" in KnowledgeBase.load(index).sources()


def test_timed_checkpoints_keep_saving_under_a_fifth_of_the_run(tmp_path: Path, monkeypatch) -> None:
    import clanker_rag._ingest._run as ingest_module

    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    options = IngestOptions(index_path=tmp_path / "index", checkpoint_seconds=30.0, jobs=1)
    run = ingest_module._Run(KnowledgeBase(), options, None, None)
    saves: list[float] = []

    def fake_save() -> None:
        saves.append(clock[0])
        clock[0] += 50.0  # a save of a large index takes 50 s
        run.dirty, run.last_save, run.save_seconds = 0, clock[0], 50.0

    monkeypatch.setattr(run, "save", fake_save)
    run.dirty = 1
    clock[0] += 29.0
    run._maybe_checkpoint()
    assert saves == []  # not yet 30 s
    clock[0] += 1.0
    run._maybe_checkpoint()
    assert saves == [1030.0]
    run.dirty = 1
    clock[0] += 199.0
    run._maybe_checkpoint()
    assert len(saves) == 1  # 199 s of work after a 50 s save: not yet 4 x 50 s
    clock[0] += 1.0
    run._maybe_checkpoint()
    assert len(saves) == 2
    # After the first save, 500 more files alone do not trigger one.
    run.report.saves = 2
    run.dirty = 500
    clock[0] += 10.0
    run._maybe_checkpoint()
    assert len(saves) == 2
    # Before it, 500 files do: a run killed early keeps them.
    fresh = ingest_module._Run(KnowledgeBase(), options, None, None)
    monkeypatch.setattr(fresh, "save", lambda: saves.append(-1.0))
    fresh.dirty = 499
    fresh._maybe_checkpoint()
    assert saves[-1] != -1.0
    fresh.dirty = 500
    fresh._maybe_checkpoint()
    assert saves[-1] == -1.0
