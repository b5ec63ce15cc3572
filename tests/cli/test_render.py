"""``render_events`` (shared by ``ask`` and ``demo``) lives in ``_cli/_demo``: no ``_main`` <-> ``_demo`` cycle."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from clanker_rag._cli._demo import render_events
from clanker_rag._cli._terminal import printable
from clanker_rag._stream._controller import InjectEvent, RetrieveEvent, StreamEvent, TextEvent
from clanker_rag._types import Hit

PACKAGE = Path(__file__).resolve().parents[2] / "clanker_rag"


def imported_modules(name: str) -> set[str]:
    """Every module of ours ``name`` imports, at any depth of the file (functions included)."""
    tree = ast.parse((PACKAGE / "_cli" / f"{name}.py").read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:  # siblings in _cli/
            out.add(node.module.split(".")[0])
    return out


def test_demo_does_not_import_the_cli() -> None:
    assert "_main" not in imported_modules("_demo")
    assert "_demo" in imported_modules("_main")  # ask borrows render_events from the demo


def test_answer_goes_to_out_blocks_and_retrievals_to_err() -> None:
    hit = Hit("passage", "docs/a.md", 1.0)
    events: list[StreamEvent] = [
        RetrieveEvent("port?", (hit,), "question", 0.0012),
        InjectEvent("\n<context>\n[1] docs/a.md\npassage\n</context>\n", "context", "question", "port?"),
        TextEvent("It is 8080."),
    ]
    out, err = io.StringIO(), io.StringIO()
    counts = render_events(events, out=out, err=err, color="never")
    assert out.getvalue() == "It is 8080.\n"
    assert err.getvalue() == (
        "\n[retrieved 1 passages for 'port?' in 1.2 ms]\n\n<context>\n[1] docs/a.md\npassage\n</context>\n"
    )
    assert counts == {"retrievals": 1, "injections": 1, "chars": len("It is 8080.")}
    quiet_out, quiet_err = io.StringIO(), io.StringIO()
    render_events(events, out=quiet_out, err=quiet_err, color="never", show_blocks=False)
    assert quiet_out.getvalue() == "It is 8080.\n" and quiet_err.getvalue() == ""


def test_terminal_escapes_from_text_or_blocks_are_shown_not_obeyed() -> None:
    events: list[StreamEvent] = [
        InjectEvent("\n<context>\nclear\x1b[2J title\x1b]0;pwned\x07\n</context>\n", "context", "question", "q"),
        TextEvent("ok\x1b[31m red\u202e\r\n"),
    ]
    out, err = io.StringIO(), io.StringIO()
    render_events(events, out=out, err=err, color="always")
    assert "\x1b[2J" not in err.getvalue() and "\x1b]" not in err.getvalue() and "\x07" not in err.getvalue()
    assert "\\x1b[2J" in err.getvalue() and "\\x07" in err.getvalue()
    assert out.getvalue() == "ok\\x1b[31m red\\u202e\n\n"
    # Colour, which is ours, still gets through.
    assert err.getvalue().startswith("\x1b[2;36m")


def test_printable_keeps_newlines_tabs_and_unicode() -> None:
    assert printable("a\tb\nc caf\u00e9 \u3042") == "a\tb\nc caf\u00e9 \u3042"
    assert printable("\x00\x7f\x9b") == "\\x00\\x7f\\x9b"
