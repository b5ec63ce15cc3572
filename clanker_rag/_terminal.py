"""Making untrusted text safe to print on a terminal.

Indexed text and file names are not ours: an ESC in them could clear the
screen, retitle the window (OSC) or ring the bell when ``search`` prints a
result, and a newline in a file name would break one result per line.  Human
output passes them through :func:`printable`, which writes every control
character (C0, DEL, C1), line and paragraph separator and bidirectional
override as a visible backslash escape.  JSON output stays exact.
"""

from __future__ import annotations

__all__ = ["printable"]

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_BIDI = [0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ALL = {c: _escape(c) for c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *_BIDI]}
# Whitespace that a snippet folds into one space anyway.
_KEEP_SPACE = {c: v for c, v in _ALL.items() if chr(c) not in " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029"}


def printable(text: str, *, keep_whitespace: bool = False) -> str:
    """``text`` with control characters written as ``\\xNN``/``\\uNNNN`` escapes.

    ``keep_whitespace`` leaves tabs, newlines and the other characters that
    ``str.split()`` treats as whitespace, for a caller that folds whitespace
    runs into single spaces itself.
    """
    return text.translate(_KEEP_SPACE if keep_whitespace else _ALL)
