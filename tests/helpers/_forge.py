"""Rewriting a saved segment as a careful forger would: the bytes or body changed, every checksum fixed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["rewrite_segment"]


def rewrite_segment(
    folder: Path,
    edit_body: Callable[[dict[str, Any]], None] | None = None,
    edit_data: Callable[[dict[str, Any], bytearray], None] | None = None,
) -> None:
    """Change the (only) segment's body (``edit_body(body)``) or bytes (``edit_data(body, data)``,
    after the body edit) and fix the body's, the file's and the manifest's checksums."""
    path = folder / "index.json"
    doc = json.loads(path.read_text())
    (record,) = doc["body"]["segments"]
    seg = folder / record["file"]
    data = bytearray(seg.read_bytes())
    off, length = record["body"]
    body = json.loads(data[off : off + length])
    if edit_body is not None:
        edit_body(body)
    if edit_data is not None:
        edit_data(body, data)
    text = json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()
    data[off:] = text
    seg.write_bytes(data)
    record.update(body=[off, len(text)], body_sha256=hashlib.sha256(text).hexdigest(), size=len(data))
    record["sha256"] = hashlib.sha256(data).hexdigest()
    body_text = json.dumps(doc["body"], ensure_ascii=True, separators=(",", ":"))
    doc["sha256"] = hashlib.sha256(body_text.encode()).hexdigest()
    path.write_text(json.dumps(doc))
