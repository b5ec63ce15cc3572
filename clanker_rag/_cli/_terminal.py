"""Terminal output for the CLI and the demo: colour, and text that cannot drive the terminal.

Text shown on a terminal can come from indexed files or from a model; an
escape sequence in it could clear the screen, retitle the window or hide
text.  :func:`printable` shows such characters as ``\\x1b``-style escapes.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import TextIO

__all__ = ["Style", "counted", "one_line", "printable", "teller", "use_color"]

# C0 controls but tab and newline, DEL, C1 controls, and the bidi overrides
# and isolates that can reorder what a reader sees.
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with control characters shown as escapes; newlines and tabs are kept."""
    text = text.replace("\r\n", "\n")
    return _CONTROL_RE.sub(_escape, text)


_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\t\u2028\u2029"}


def one_line(text: str) -> str:
    """:func:`printable`, and line breaks and tabs escaped too: for a name or
    label that must stay on its line (a newline in a file name would otherwise
    start a line of its own)."""
    return printable(text).translate(_LINE_BREAKS)


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 chunk", "2 chunks"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def use_color(choice: str, stream: TextIO) -> bool:
    """Whether to colour ``stream``: ``always``, ``never``, or ``auto`` (a terminal, unless NO_COLOR or TERM=dumb)."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Style:
    """SGR colouring that is a no-op when colour is off."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.on and text else text

    def mark(self, text: str) -> str:
        # Off a terminal the match is still visible, as markdown bold.
        return self(text, "1;33") if self.on else f"**{text}**"


def teller(args: argparse.Namespace) -> Callable[[str], None]:
    """Where a long step says what it is doing (a save, a commit, a verification): a line on
    stderr when stderr is a terminal or with ``-v``, so the command never looks hung; nowhere
    otherwise (a script's stderr stays for warnings and errors)."""
    if not (getattr(args, "verbose", False) or sys.stderr.isatty()):
        return lambda line: None

    def tell(line: str) -> None:
        print(f"clanker-rag: {one_line(line)}", file=sys.stderr, flush=True)

    return tell
