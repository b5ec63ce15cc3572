"""Readers, decoding, gitignore globs and bad input, tested below the ingest loop."""

from __future__ import annotations

import codecs
import itertools
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clanker_rag._ingest import _discovery
from clanker_rag._ingest._discovery import GitIgnore, compile_glob, secret_name_reason
from clanker_rag._ingest._readers import (
    SkipFile,
    _code,
    _files,
    _registry,
    _sections,
    binary_reason,
    decode_bytes,
    open_beneath,
    parse_text,
)
from clanker_rag._ingest._report import IngestReport
from clanker_rag._kb import KnowledgeBase


def ingest(kb: KnowledgeBase, path: Any, **options: Any) -> IngestReport:
    """The ingest as ``kb.ingest`` runs it (with the knowledge base's own writer)."""
    return kb.ingest(path, **options)


FORMATS = [
    "text",
    "markdown",
    "rst",
    "python",
    "js",
    "go",
    "rust",
    "jvm",
    "c",
    "ruby",
    "php",
    "shell",
    "powershell",
    "sql",
    "css",
    "ini",
    "yaml",
    "html",
    "json",
    "jsonl",
    "csv",
    "tsv",
]

# Text built from the characters that drive the parsers: headings, fences,
# underlines, brackets, quotes, separators and newlines.
structured_text = st.lists(
    st.sampled_from(
        [*'ab #=-~`*:{}[]",;\t\n\r<>/!', "def ", "class ", "```", "<h1>", "</h1>", "<p>", "<script>", "é", "中", "    "]
    ),
    max_size=200,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=structured_text, fmt=st.sampled_from(FORMATS), budget=st.sampled_from([None, 3, 20]))
def test_sections_are_ordered_spans_inside_the_text(text: str, fmt: str, budget: int | None) -> None:
    out, sections = parse_text(text, fmt, budget=budget, path="x/y.ext")
    if sections is None:
        return
    pos = 0
    for start, end, label in sections:
        assert pos <= start <= end <= len(out)
        assert label is None or isinstance(label, str)
        pos = end


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(text=structured_text, fmt=st.sampled_from(["markdown", "rst", "python", "js", "c", "text", "json", "jsonl"]))
def test_source_formats_index_the_original_text(text: str, fmt: str) -> None:
    # Formats other than HTML/CSV index the file's text itself, so every
    # chunk is an exact slice of the file, and sections cover it all.
    out, sections = parse_text(text, fmt, budget=20)
    assert out == text
    if sections:
        assert sections[0][0] == 0 and sections[-1][1] == len(text)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(sections))


@settings(deadline=None)
@given(st.text(max_size=200))
def test_utf8_and_bom_encodings_round_trip(text: str) -> None:
    raw = text.encode("utf-8", "surrogatepass")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return  # lone surrogates are not valid UTF-8 text
    assert decode_bytes(raw) == (text, "utf-8")
    if not text.startswith("\x00"):  # FF FE 00 00 is the UTF-32 BOM: inherently ambiguous
        assert decode_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le", "surrogatepass"))[0] == text


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_decoding_never_fails(raw: bytes) -> None:
    text, encoding = decode_bytes(raw)
    assert encoding in {
        "utf-8",
        "cp1252",
        "latin-1",
        "utf-8-sig",
        "utf-16",
        "utf-32",
        "utf-16+replace",
        "utf-32+replace",
        "utf-8-sig+replace",
    }
    assert isinstance(text, str)


def test_cp1252_before_latin1() -> None:
    assert decode_bytes(b"\x93smart\x94 \x80") == ("\u201csmart\u201d \u20ac", "cp1252")
    # 0x81 is undefined in cp1252: only latin-1 can take it.
    assert decode_bytes(b"caf\xe9\x81") == ("caf\xe9\x81", "latin-1")


def test_binary_detection() -> None:
    assert binary_reason(b"\x7fELF\x02\x01") == "binary file (ELF executable)"
    assert binary_reason(b"hello\x00world") == "binary file (contains NUL bytes)"
    assert binary_reason(bytes(range(1, 9)) * 20) == "binary file (control characters)"
    assert binary_reason(codecs.BOM_UTF16_LE + "text".encode("utf-16-le")) is None
    assert binary_reason(b"plain text\twith tabs\r\n") is None


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.log", "a.log", True),
        ("*.log", "deep/er/a.log", True),
        ("*.log", "a.log.txt", False),
        ("/build", "build", True),
        ("/build", "sub/build", False),
        ("doc/*.md", "doc/a.md", True),
        ("doc/*.md", "doc/sub/a.md", False),
        ("doc/**/*.md", "doc/a.md", True),
        ("doc/**/*.md", "doc/x/y/a.md", True),
        ("**/cache", "a/b/cache", True),
        ("**/cache", "cache", True),
        ("out/**", "out/a/b", True),
        ("out/**", "out", False),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file/.txt", False),
        ("[abc].md", "b.md", True),
        ("[!abc].md", "b.md", False),
        ("[!abc].md", "d.md", True),
        ("\\#notes", "#notes", True),
        ("a*b", "a/b", False),
    ],
)
def test_gitignore_glob_semantics(pattern: str, path: str, expected: bool) -> None:
    regex, _ = compile_glob(pattern)
    assert bool(regex.match(path)) is expected


def test_gitignore_negation_and_directory_rules() -> None:
    gi = GitIgnore.parse("*.md\n!keep.md\nlogs/\n  \n# c\ntrailing\\ \nplain   \n")
    assert gi.decide("a.md", False) is True
    assert gi.decide("keep.md", False) is False
    assert gi.decide("logs", True) is True
    assert gi.decide("logs", False) is None  # a file named logs is not a folder
    assert gi.decide("trailing ", False) is True  # escaped trailing space kept
    assert gi.decide("plain", False) is True  # unescaped trailing spaces dropped
    nested = GitIgnore.parse("x.txt\n", strip="sub/")
    assert nested.decide("sub/x.txt", False) is True
    assert nested.decide("x.txt", False) is None


def test_secret_names() -> None:
    for name in (
        ".env",
        ".env.local",
        "ID_RSA",
        "id_ed25519.pub",
        "a/b/server.pem",
        "credentials",
        "home/.aws/config",
        ".npmrc",
        "client_secret_123.json",
    ):
        assert secret_name_reason(name), name
    for name in ("environment.md", "keys.py", "secrets.py", "README.md", "key_points.txt"):
        assert secret_name_reason(name) is None, name


def test_markdown_sections_respect_fences_and_front_matter() -> None:
    text = "---\ntitle: t\n---\n# A\n\n```\n# not a heading\n```\n\nB\n-\n\ntext\n"
    _, sections = parse_text(text, "markdown")
    assert sections is not None
    labels = [label for _, _, label in sections]
    assert labels == [None, "A", "A > B"]


# The sectioning helpers below are fast paths; each is checked against the
# plain definition it must agree with.  The text draws on what trips them up:
# word characters beyond ASCII, "?" (what non-ASCII turns into inside the
# word counter), underscores, digits and line breaks.
count_text = st.lists(
    st.sampled_from([*"ab_1 ?\n\t.-", "é", "中", "٣", "\u00a0", "\ufffd", "\u2028"]),
    max_size=120,
).map("".join)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(text=count_text, data=st.data())
def test_word_counts_match_the_word_regex_on_any_span(text: str, data: st.DataObject) -> None:
    counts = _sections.WordCounts(text)
    offset = st.integers(0, len(text))
    spans = data.draw(st.lists(st.tuples(offset, offset), max_size=8))  # reversed spans included
    expected = [len(re.findall(r"\w+", text[s:e])) for s, e in spans]
    assert [counts.count(s, e) for s, e in spans] == expected
    assert counts.counts([s for s, _ in spans], [e for _, e in spans]) == expected


@settings(max_examples=200, deadline=None)
@given(text=count_text, data=st.data())
def test_line_starts_are_the_offsets_after_each_newline(text: str, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    expected = [i + 1 for i in range(start, end) if text[i] == "\n" and i + 1 < end]
    assert _sections.line_starts(text, start, end) == expected


@settings(max_examples=200, deadline=None)
@given(
    positions=st.lists(st.integers(0, 40), unique=True).map(sorted),
    atomic=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=6),
)
def test_outside_drops_positions_strictly_inside_an_atomic_span(
    positions: list[int], atomic: list[tuple[int, int]]
) -> None:
    expected = [pos for pos in positions if not any(a < pos < b for a, b in atomic)]
    assert _sections.outside(positions, atomic) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([None, "", "A", "A.b", "A.b.c", "Ab", "B", "A.", "A..c", "b"]), min_size=1, max_size=7))
def test_join_labels_keeps_the_most_specific_labels_in_order(labels: list[str | None]) -> None:
    seen: list[str] = []
    for label in labels:
        if label and label not in seen:
            seen.append(label)
    kept = [x for x in seen if not any(other.startswith(x + ".") for other in seen)]
    assert _code._join_labels(labels) == (", ".join(kept) if kept else None)


# ------------------------------------------------------------ bad input


def test_file_changing_while_read_keeps_old_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "live.md"
    path.write_text("first version with a yak")
    kb = KnowledgeBase()
    ingest(kb, tmp_path)
    path.write_text("second version, longer, with a gnu")
    ticks = iter(range(1000))
    monkeypatch.setattr(_files, "stat_key", lambda st: (st.st_size, next(ticks)))
    report = ingest(kb, tmp_path)
    assert report.skipped == [("live.md", "file changed while being read")]
    assert not report.removed
    assert {h.source for h in kb.search("yak")} == {"live.md"}  # old content kept, not lost


def test_unreadable_file_keeps_old_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.md"
    path.write_text("guarded llama notes")
    kb = KnowledgeBase()
    ingest(kb, tmp_path)
    os.utime(path, ns=(5, 5))

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_files, "open_beneath", denied)  # (root reads a chmod 000 file)
    report = ingest(kb, tmp_path)
    assert report.skipped == [("locked.md", "unreadable: Permission denied")]
    assert kb.sources() == ["locked.md"]


def test_unreadable_folder_keeps_its_indexed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("hidden heron notes")
    (tmp_path / "b.md").write_text("top level")
    kb = KnowledgeBase()
    ingest(kb, tmp_path)
    real_open = open_beneath

    def open_folder(path: str, flags: int) -> int:  # (root lists a chmod 000 folder)
        if str(path).endswith("sub"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags)

    monkeypatch.setattr(_discovery, "open_beneath", open_folder)
    report = ingest(kb, tmp_path)
    assert ("sub/", "unreadable folder: Permission denied") in report.skipped
    assert not report.removed
    assert kb.sources() == ["b.md", "sub/a.md"]


def test_file_vanishing_mid_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.md").write_text("stays")
    (tmp_path / "b.md").write_text("vanishes soon")
    kb = KnowledgeBase()
    ingest(kb, tmp_path)
    os.utime(tmp_path / "b.md", ns=(5, 5))
    real = _registry.read_document

    def vanish_then_read(path: str, *args: object, **kwargs: object) -> object:
        if path.endswith("b.md"):
            os.unlink(path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("clanker_rag._ingest._run.read_document", vanish_then_read)
    report = ingest(kb, tmp_path)
    assert ("b.md", "vanished before it could be read") in report.skipped
    assert report.removed == ["b.md"] and kb.sources() == ["a.md"]


def test_reader_crash_is_a_skip_not_an_abort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.md").write_text("fine")
    (tmp_path / "b.py").write_text("x = 1\n")

    def broken(*args: object, **kwargs: object) -> object:
        raise RecursionError("maximum recursion depth exceeded")

    real = _registry.parse_text
    monkeypatch.setattr(
        _registry, "parse_text", lambda text, fmt, **kw: broken() if fmt == "python" else real(text, fmt, **kw)
    )
    kb = KnowledgeBase()
    report = ingest(kb, tmp_path)
    assert kb.sources() == ["a.md"]
    assert report.skipped == [("b.py", "reader failed: RecursionError: maximum recursion depth exceeded")]


def test_malformed_csv_and_json(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"a": [1, 2,, }  plain words here')
    (tmp_path / "huge_field.csv").write_text('h\n"' + "x" * 200_000 + '"\n')
    kb = KnowledgeBase()
    report = ingest(kb, tmp_path)
    assert kb.sources() == ["bad.json"]  # invalid JSON is still text
    assert skipped_reason(report.skipped, "huge_field.csv").startswith("malformed CSV")


def skipped_reason(skipped: list[tuple[str, str]], rel: str) -> str:
    return next(reason for path, reason in skipped if path == rel)


# ------------------------------------------------------------ the registry

# The released extension table: a reader's name is stored with every ingested
# file ("format" in its metadata), so moving an extension to another reader
# changes existing indexes and needs a READER_VERSION bump.
RELEASED = {
    "text": ".txt .log .tex .xml .properties .bat .cmd",
    "markdown": ".md .markdown .mdx",
    "rst": ".rst",
    "html": ".html .htm .xhtml",
    "python": ".py .pyi",
    "js": ".js .mjs .cjs .jsx .ts .tsx",
    "go": ".go",
    "rust": ".rs",
    "jvm": ".java .kt .kts .scala .swift .cs .gradle",
    "c": ".c .h .cpp .hpp .cc .cxx .hh",
    "ruby": ".rb",
    "php": ".php",
    "shell": ".sh .bash .zsh",
    "powershell": ".ps1",
    "sql": ".sql",
    "css": ".css .scss .less",
    "ini": ".toml .ini .cfg .conf",
    "yaml": ".yaml .yml",
    "json": ".json",
    "jsonl": ".jsonl .ndjson",
    "csv": ".csv",
    "tsv": ".tsv",
    "docx": ".docx",
    "pdf": ".pdf",
}


def test_the_registry_keeps_the_released_extension_table() -> None:
    from clanker_rag._ingest._readers import DEFAULT_EXTENSIONS, READER_VERSION, READERS, STREAMED_FORMATS, format_for

    assert {name: " ".join(reader.extensions) for name, reader in READERS.items()} == RELEASED
    assert {ext for exts in RELEASED.values() for ext in exts.split()} == DEFAULT_EXTENSIONS
    by_extension = {ext: name for name, exts in RELEASED.items() for ext in exts.split()}
    assert {ext: format_for(f"dir/File{ext.upper()}") for ext in by_extension} == by_extension  # case-blind
    assert format_for("Makefile") == format_for("notes.unknown") == "text"
    assert {"csv", "tsv", "json", "jsonl"} == STREAMED_FORMATS
    assert READER_VERSION == 1


def test_a_registered_reader_is_used_for_its_extension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clanker_rag._ingest._readers import Reader, read_document

    def shout(text: str, budget: int | None, path: str | None) -> tuple[str, list[tuple[int, int, str | None]]]:
        return text.upper(), [(0, len(text), "all of it")]

    loud = Reader("loud", (".loud",), shout)
    monkeypatch.setitem(_registry.READERS, "loud", loud)
    (tmp_path / "a.loud").write_text("quiet words")
    doc = read_document(str(tmp_path / "a.loud"), "loud", max_bytes=1000)
    assert doc is not None and (doc.text, doc.sections, doc.format) == ("QUIET WORDS", [(0, 11, "all of it")], "loud")


@pytest.mark.parametrize(("name", "fmt"), [("zeros.txt", "txt"), ("zeros.csv", "csv")])
def test_a_huge_binary_file_is_refused_from_its_head_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fmt: str
) -> None:
    # Under a raised size cap a 256 MiB all-zero file (sparse: no disk used)
    # is refused after its first bytes, not after reading or hashing it all.
    path = tmp_path / name
    with open(path, "wb") as fh:
        fh.truncate(256 << 20)
    read = 0
    real_open = _files.open_file

    class Counting:
        def __init__(self, fh: object) -> None:
            self.fh = fh

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()  # type: ignore[attr-defined]

        def __getattr__(self, attr: str) -> object:
            return getattr(self.fh, attr)

        def read(self, n: int = -1) -> bytes:
            nonlocal read
            data: bytes = self.fh.read(n)  # type: ignore[attr-defined]
            read += len(data)
            return data

    monkeypatch.setattr(_files, "open_file", lambda p: Counting(real_open(p)))
    monkeypatch.setattr(_registry, "open_file", lambda p: Counting(real_open(p)))
    with pytest.raises(SkipFile, match="binary"):
        _registry.read_document(str(path), fmt, max_bytes=1 << 30)
    assert read <= 64 * 1024, f"read {read} bytes of a file known binary from its first 8 KiB"
