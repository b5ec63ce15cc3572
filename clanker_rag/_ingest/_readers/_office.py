"""Office readers: Word documents (stdlib only) and PDF (the optional ``pdf`` extra).

Both need the raw bytes: they check the container's magic first, then pull
the text out paragraph by paragraph (Word, sectioned by heading styles) or
page by page (PDF, one section per page).
"""

from __future__ import annotations

import io
import re
import zipfile
from xml.etree import ElementTree

from ..._exceptions import install_hint
from ._base import Reader, Section, SkipFile
from ._sections import heading_sections

__all__ = ["READERS"]


def _pdf(data: bytes) -> tuple[str, list[Section]]:
    try:
        import pypdf  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise SkipFile(f"PDF needs the optional extra: {install_hint('pdf')}") from exc
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise SkipFile("encrypted PDF")
        pieces: list[str] = []
        sections: list[Section] = []
        pos = 0
        for number, page in enumerate(reader.pages, start=1):
            page_text = (page.extract_text() or "").strip()
            if not page_text:
                continue
            page_text += "\n\n"
            pieces.append(page_text)
            sections.append((pos, pos + len(page_text), f"page {number}"))
            pos += len(page_text)
    except SkipFile:
        raise
    except Exception as exc:  # pypdf raises many types on damaged files
        raise SkipFile(f"unreadable PDF: {exc}") from exc
    return "".join(pieces), sections


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING_STYLE = re.compile(r"heading\s*(\d)", re.IGNORECASE)


def _docx(data: bytes, max_bytes: int, budget: int | None) -> tuple[str, list[Section] | None]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        info = zf.getinfo("word/document.xml")
    except (zipfile.BadZipFile, KeyError) as exc:
        raise SkipFile("not a readable Word document (no word/document.xml)") from exc
    # Guard against zip bombs: the XML is read as a stream, but cap it anyway.
    if info.file_size > 20 * max_bytes:
        raise SkipFile(f"Word document body too large ({info.file_size} bytes uncompressed)")
    pieces: list[str] = []
    heads: list[tuple[int, int, str]] = []
    pos = 0
    try:
        with zf.open(info) as fh:
            for _, elem in ElementTree.iterparse(fh, events=("end",)):
                if elem.tag != _W + "p":
                    continue
                parts: list[str] = []
                for node in elem.iter():
                    if node.tag == _W + "t" and node.text:
                        parts.append(node.text)
                    elif node.tag == _W + "tab":
                        parts.append("\t")
                    elif node.tag in (_W + "br", _W + "cr"):
                        parts.append("\n")
                para = "".join(parts).strip()
                level = _docx_heading_level(elem)
                elem.clear()
                if not para:
                    continue
                if level:
                    heads.append((pos, level, para))
                para += "\n\n"
                pieces.append(para)
                pos += len(para)
    except ElementTree.ParseError as exc:
        raise SkipFile(f"damaged Word document: {exc}") from exc
    text = "".join(pieces)
    return text, heading_sections(text, heads, [], budget)


def _docx_heading_level(p: ElementTree.Element) -> int:
    ppr = p.find(_W + "pPr")
    if ppr is None:
        return 0
    outline = ppr.find(_W + "outlineLvl")
    if outline is not None:
        try:
            return int(outline.get(_W + "val", "9")) + 1
        except ValueError:
            return 0
    style = ppr.find(_W + "pStyle")
    if style is None:
        return 0
    name = style.get(_W + "val", "")
    if name.lower() == "title":
        return 1
    m = _HEADING_STYLE.search(name)
    return int(m.group(1)) if m else 0


def _read_docx(data: bytes, max_bytes: int, budget: int | None) -> tuple[str, list[Section] | None]:
    if not data.startswith(b"PK\x03\x04"):
        raise SkipFile("not a readable Word document (not a ZIP file)")
    return _docx(data, max_bytes, budget)


def _read_pdf(data: bytes, max_bytes: int, budget: int | None) -> tuple[str, list[Section] | None]:
    if not data.startswith(b"%PDF-"):
        raise SkipFile("not a PDF file (no %PDF- header)")
    return _pdf(data)


READERS = (
    Reader("docx", (".docx",), binary=_read_docx),
    Reader("pdf", (".pdf",), binary=_read_pdf),
)
