"""Record readers: JSON, JSON Lines, CSV and TSV, one section per record.

Record files can be large, so they are read under their own size cap, and
CSV is rendered as a stream (``header: value`` lines per row) after the file
was hashed, so the raw bytes and the rendering never sit in memory together.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from typing import IO, Any

from ._base import Reader, Section, SkipFile
from ._decoding import bom_encoding
from ._files import open_file, stat_key
from ._sections import spans

__all__ = ["READERS", "render_csv"]

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_NAME_KEYS = ("name", "title", "id", "key", "path")


def _record_label(obj: Any) -> str | None:
    # Only a record's own name makes a label: a bare position ("[41]",
    # "row 41") would add one index term per record for nothing.
    if isinstance(obj, dict):
        for key in _NAME_KEYS:
            value = obj.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                return f"{key}={value}"[:200]
    return None


def _json_sections(text: str) -> list[Section] | None:
    """One section per array element or top-level key, spans in the original text."""
    pos = _WS.match(text).end()  # type: ignore[union-attr]
    if pos >= len(text) or text[pos] not in "[{":
        return None
    is_array = text[pos] == "["
    pos += 1
    starts: list[tuple[int, str | None]] = []
    index = 0
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if pos < len(text) and text[pos] in "]}":
            break
        item_start = pos
        if is_array:
            value, pos = _DECODER.raw_decode(text, pos)
            label = _record_label(value)
        else:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos : pos + 1] != ":":
                raise ValueError("expected ':'")
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            _, pos = _DECODER.raw_decode(text, pos)
            label = str(key)[:200]
        starts.append((item_start, label))
        index += 1
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos : pos + 1] == ",":
            pos += 1
            continue
        if text[pos : pos + 1] in ("]", "}"):
            break
        raise ValueError("expected ',' or closing bracket")
    if not starts:
        return None
    # The opening bracket belongs to the first record, not a chunk of its own.
    starts[0] = (0, starts[0][1])
    return spans(starts, len(text))


def _jsonl_sections(text: str) -> list[Section]:
    starts: list[tuple[int, str | None]] = []
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        if not text[pos:end].isspace():
            starts.append((pos, None))
        pos = end
    if starts:
        starts[0] = (0, None)
    return spans(starts, len(text))


def render_csv(stream: IO[str], fmt: str) -> tuple[str, list[Section]]:
    """Render each CSV row as ``header: value`` lines; one section per row."""
    if fmt == "tsv":
        delimiter = "\t"
    else:
        head = stream.read(65536)
        stream.seek(0)
        try:
            delimiter = csv.Sniffer().sniff(head, delimiters=",;|\t").delimiter
        except csv.Error:
            delimiter = ","
    reader = csv.reader(stream, delimiter=delimiter)
    pieces: list[str] = []
    sections: list[Section] = []
    pos = 0
    try:
        header = next(reader, None)
        if header is None:
            return "", []
        header = [h.strip() or f"column {i + 1}" for i, h in enumerate(header)]
        width = len(header)
        for row in reader:
            if len(row) > width:
                header.extend(f"column {i + 1}" for i in range(width, len(row)))
                width = len(row)
            lines = [f"{name}: {value}\n" for name, value in zip(header, row, strict=False) if value.strip()]
            if not lines:
                continue
            lines.append("\n")
            record = "".join(lines)
            pieces.append(record)
            sections.append((pos, pos + len(record), None))
            pos += len(record)
    except csv.Error as exc:
        raise SkipFile(f"malformed {fmt.upper()}: {exc}") from exc
    return "".join(pieces), sections


def _read_streamed_csv(path: str, fmt: str, st_key: tuple[int, int], head: bytes) -> tuple[str, list[Section], str]:
    bom = bom_encoding(head)
    encodings = [bom] if bom else ["utf-8", "cp1252", "latin-1"]
    for enc in encodings:
        try:
            with open_file(path) as raw:
                stream = io.TextIOWrapper(raw, encoding=enc, newline="")
                text, sections = render_csv(stream, fmt)
                if stat_key(os.fstat(raw.fileno())) != st_key:
                    raise SkipFile("file changed while being read", transient=True)
                return text, sections, enc
        except UnicodeDecodeError:
            continue
    raise SkipFile("undecodable text")  # latin-1 cannot fail; kept for the type checker


def _parse_json(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    try:
        return text, _json_sections(text)
    except ValueError:
        return text, None  # not valid JSON: index it as plain text


def _parse_jsonl(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    return text, _jsonl_sections(text)


def _parse_csv(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    return render_csv(io.StringIO(text, newline=""), "csv")


def _parse_tsv(text: str, budget: int | None, path: str | None) -> tuple[str, list[Section] | None]:
    return render_csv(io.StringIO(text, newline=""), "tsv")


def _stream_csv(path: str, st_key: tuple[int, int], head: bytes) -> tuple[str, list[Section], str]:
    return _read_streamed_csv(path, "csv", st_key, head)


def _stream_tsv(path: str, st_key: tuple[int, int], head: bytes) -> tuple[str, list[Section], str]:
    return _read_streamed_csv(path, "tsv", st_key, head)


READERS = (
    Reader("json", (".json",), _parse_json, streamed=True),
    Reader("jsonl", (".jsonl", ".ndjson"), _parse_jsonl, streamed=True),
    Reader("csv", (".csv",), _parse_csv, streamed=True, stream=_stream_csv),
    Reader("tsv", (".tsv",), _parse_tsv, streamed=True, stream=_stream_tsv),
)
