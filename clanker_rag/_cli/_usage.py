"""Usage errors that say what was probably meant: an unknown flag or command gets "did you mean".

argparse reports an unknown option on the main parser, which knows none of the
command's options, so the suggestion is made here from the command's own parser.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence

__all__ = ["did_you_mean"]

_UNKNOWN = re.compile(r"^unrecognized arguments: (.+?)(?: \(see .*\))?$")
_BAD_CHOICE = re.compile(r"invalid choice: '([^']*)'")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")]


def did_you_mean(parser: argparse.ArgumentParser, argv: Sequence[str], message: str) -> str:
    """``message`` with a suggestion for each unknown flag (or command) that is close to a real one."""
    text, see = message, ""
    see_at = message.rfind(" (see '")
    if see_at >= 0 and message.endswith(")"):
        text, see = message[:see_at], message[see_at:]
    commands = _subparsers(parser)
    bad = _BAD_CHOICE.search(text)
    if bad:
        close = difflib.get_close_matches(bad.group(1), list(commands), n=1, cutoff=0.6)
        return f"{text}; did you mean {close[0]!r}?{see}" if close else message
    unknown = _UNKNOWN.match(text)
    if not unknown:
        return message
    command = next((a for a in argv if a in commands), None)
    own = _options(commands[command]) if command else []
    general = _options(parser)
    hints = []
    for arg in unknown.group(1).split():
        flag = arg.split("=", 1)[0]
        if not flag.startswith("-"):
            continue
        if command and flag in general and flag not in own:
            # --index/--kb after a command that reads no knowledge base.
            hints.append(f"{command} does not take {flag}")
            continue
        # "-index" and "index" mean "--index" as often as a typo does.
        close = difflib.get_close_matches("--" + flag.lstrip("-"), own + general, n=1, cutoff=0.6)
        if close and close[0] != flag:
            hints.append(f"did you mean {close[0]}?")
    if not hints:
        return message
    if command and see == f" (see '{parser.prog} --help')":
        see = f" (see '{parser.prog} {command} --help')"
    return f"{text}; {'; '.join(hints)}{see}"
