"""What a question asks for, read off its English question words, and which text holds one.

Classic factoid QA reads the expected kind of answer off the question ("how
many" asks for a number, "which option" for a flag) and prefers text holding
a token of that kind.  :func:`question_kinds` says which kinds a question
asks for; :data:`NUMBER_RE`, :data:`FLAG_RE` and :func:`code_names` find
them in text.  Nothing here knows any collection.
"""

from __future__ import annotations

import re

__all__ = ["FLAG_RE", "NUMBER_RE", "code_names", "cue_words", "has_number", "question_kinds"]

# What a question asks for, read off English question words.
_HOWTO_RE = re.compile(r"^(?:how (?:do|can|should|would) (?:i|you|we)|how to)\b")
_NUMBER_ASKED = re.compile(
    r"\bhow (?:many|much|long|big|large|small|often|far|old|high|low|deep|wide)\b|\b(?:at most|at least|maximum|"
    r"minimum)\b|\bin (?:seconds|minutes|hours|days|bytes|characters|percent)\b|\b(?:what|which) (?:is |are )?(?:the )?"
    r"(?:[\w-]+ )?(?:port|size|number|version|limit|count|length|status|code|timeout|threshold)s?\b"
)
_FLAG_ASKED = re.compile(r"\b(?:option|flag|switch|argument)s?\b")
_NAME_ASKED = re.compile(r"^(?:which|what) (?!(?:is|are|was|were|does|do|did|can|should|happens|if)\b)|\bwhich\b")
_DEFAULT_ASKED = re.compile(
    r"\bdefault|\b(?:when|if) (?:none|nothing|no \w+|it|they) (?:is|are) (?:not )?(?:given|set|specified|passed)\b"
    r"|\bif (?:omitted|not (?:given|set|specified|passed))\b"
)
# What a text holds.
NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)*")
FLAG_RE = re.compile(r"(?<![\w-])--?[a-zA-Z][\w-]*")
_NAME_RE = re.compile(
    r"``([^`\n]{1,80})``|(?<![`\w])`([^`\n]{1,80})`(?!`)|(\b[A-Z][a-z0-9]+[A-Z]\w*|\b[A-Za-z_]\w*\(|\b[a-z][a-z0-9]*_"
    r"[a-z0-9_]*[a-z0-9]\b|(?<![/\w.])[a-z_]\w*\.[a-z_]\w*[a-z0-9]\b(?![./\w])|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b)"
)
_PATH_RE = re.compile(r"[^\s`<>]*/[^\s`<>]*")
# A Unix manual reference, "flock(2)": it names a page, it is neither a quantity nor a call.
_MAN_REF_RE = re.compile(r"\b[A-Za-z_][\w.+-]*\(\d[a-z]*\)")


def question_kinds(question: str) -> frozenset[str]:
    """What ``question`` asks for: ``howto``, ``number``, ``flag``, ``name``, ``default`` (any of them, or none)."""
    q = " ".join(question.lower().split())
    kinds = set()
    if _HOWTO_RE.match(q):
        kinds.add("howto")
    if _NUMBER_ASKED.search(q):
        kinds.add("number")
    if _FLAG_ASKED.search(q) or "howto" in kinds:
        kinds.add("flag")
    if (_NAME_ASKED.search(q) and "number" not in kinds) or "howto" in kinds:
        kinds.add("name")
    if _DEFAULT_ASKED.search(q):
        kinds.add("default")
    return frozenset(kinds)


def cue_words(question: str) -> list[str]:
    """The words of ``question`` that only say it asks for a flag ("which option"): they name no topic."""
    return _FLAG_ASKED.findall(question.lower())


def code_names(text: str) -> list[str]:
    """The names ``text`` writes as code: inline literals and identifier shapes (a path names a page, not a thing)."""
    bare = _MAN_REF_RE.sub(" ", _PATH_RE.sub(" ", text))
    return [m.group(m.lastindex or 0) for m in _NAME_RE.finditer(bare) if m.group().strip()]


def has_number(text: str) -> bool:
    """Whether ``text`` writes a digit outside manual references."""
    return any(ch.isdigit() for ch in _MAN_REF_RE.sub(" ", text))
