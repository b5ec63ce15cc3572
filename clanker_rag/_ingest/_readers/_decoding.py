"""Bytes to text: byte-order marks, the decoding fallbacks, binary and secret sniffing."""

from __future__ import annotations

import codecs
import re

__all__ = ["binary_reason", "bom_encoding", "decode_bytes", "has_private_key"]

_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with UTF-16's.
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def bom_encoding(head: bytes) -> str | None:
    """The encoding announced by a byte-order mark, if any."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return None


def decode_bytes(data: bytes) -> tuple[str, str]:
    """Decode with BOM, then strict UTF-8, then cp1252, then latin-1.

    Returns ``(text, encoding)``.  latin-1 maps every byte, so this never fails.
    """
    bom = bom_encoding(data[:4])
    if bom is not None:
        try:
            return data.decode(bom), bom
        except UnicodeDecodeError:
            # A BOM followed by garbage: keep what can be read, say so.
            return data.decode(bom, errors="replace"), bom + "+replace"
    for enc in ("utf-8", "cp1252"):
        try:
            return data.decode(enc), enc
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1"), "latin-1"


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"PK\x05\x06", "ZIP archive"),
    (b"\x7fELF", "ELF executable"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh91AY&SY", "bzip2 archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"(\xb5/\xfd", "zstd archive"),
    (b"7z\xbc\xaf\x27\x1c", "7z archive"),
    (b"Rar!\x1a\x07", "RAR archive"),
    (b"\xca\xfe\xba\xbe", "Java class or Mach-O binary"),
    (b"\xcf\xfa\xed\xfe", "Mach-O binary"),
    (b"\xce\xfa\xed\xfe", "Mach-O binary"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\x00asm", "WebAssembly module"),
    (b"OggS", "Ogg media"),
    (b"fLaC", "FLAC audio"),
    (b"ID3", "MP3 audio"),
    (b"RIFF", "RIFF media"),
    (b"II*\x00", "TIFF image"),
    (b"MM\x00*", "TIFF image"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "OLE2 (old Office) document"),
)
# Bytes that never appear in text: C0 controls other than \t \n \v \f \r \x1b.
_CONTROL = bytes(b for b in range(32) if b not in (8, 9, 10, 11, 12, 13, 27)) + b"\x7f"


def binary_reason(head: bytes, *, allow: str | None = None) -> str | None:
    """Why ``head`` (the first bytes of a file) looks binary, or None for text.

    ``allow`` names one magic description that is expected (a .docx is a ZIP).
    """
    if bom_encoding(head[:4]) is not None:
        return None  # UTF-16/32 text is full of NUL bytes
    for magic, what in _MAGIC:
        if head.startswith(magic) and what != allow:
            return f"binary file ({what})"
    sample = head[:8192]
    if b"\x00" in sample:
        return "binary file (contains NUL bytes)"
    if sample:
        controls = len(sample) - len(sample.translate(None, _CONTROL))
        if controls * 10 > len(sample):
            return "binary file (control characters)"
    return None


# A PEM/OpenSSH/PGP private key header, whatever the key type.
_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")


def has_private_key(text: str) -> bool:
    """True if ``text`` holds a private-key block."""
    return _PRIVATE_KEY.search(text) is not None
