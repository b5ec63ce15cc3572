"""Reading back the copying grammars in tests: which words a rule allows, as a regex would.

The grammars of :mod:`clanker_rag._answer._grammars` name their words in rules
made only of literals, groups, ``|`` and ``?`` (``word ::= "po" ("rt" | "st")``);
such a rule is a regular expression, so a test asks it whether it matches a
word instead of looking for the word's literal in the grammar's text.
"""

from __future__ import annotations

import re


def regex(expression: str) -> str:
    """A Python regex for a GBNF expression of literals, groups, ``|`` and ``?``."""
    out, i = [], 0
    while i < len(expression):
        ch = expression[i]
        if ch == '"':
            j, text = i + 1, []
            while expression[j] != '"':
                if expression[j] == "\\":
                    j += 1
                text.append(expression[j])
                j += 1
            out.append(re.escape("".join(text)))
            i = j + 1
        elif ch in "()|?":
            out.append("(?:" if ch == "(" else ch)
            i += 1
        elif ch == " ":
            i += 1
        else:
            raise ValueError(f"not a rule of literals: {expression!r} at {i}")
    return "".join(out)


def rule(grammar: str, name: str) -> str:
    """The expression of rule ``name`` in ``grammar`` (one rule per line)."""
    for line in grammar.splitlines():
        head, sep, body = line.partition(" ::= ")
        if sep and head == name:
            return body
    raise KeyError(name)


def allows(grammar: str, name: str, word: str) -> bool:
    """Whether rule ``name`` of ``grammar`` matches ``word`` whole."""
    return re.fullmatch(regex(rule(grammar, name)), word) is not None
