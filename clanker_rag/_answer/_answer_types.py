"""Answer typing: what kind of token a question asks for, and which text holds one.

Classic factoid QA (the TREC QA systems of the late 1990s) reads the
expected *type* of the answer off the question ("how many" asks for a
number, "which option" for a flag) and prefers passages that hold a token of
that type.  A sentence ranked by query-term overlap alone often picks the
neighbour that repeats the question's words and lacks the fact; the answer's
type tells them apart.

:func:`expected_types` maps a question to the types it asks for (empty when
it says nothing about its answer's form); :func:`types_in` says which types a
text holds.  Both are pattern rules on English question words and on the
shapes of technical documentation (numbers, ``--flags``, ``CamelCaseError``
names, file names, ``ENV_VARS``, ``CamelCase`` class names); they know
nothing of any collection.  :func:`head_noun` is the noun that names what
is asked for ("what *port*"), which the answer usually sits beside.
"""

from __future__ import annotations

import re

__all__ = [
    "ANSWER_TYPES",
    "DEFAULT",
    "KNOWN_TYPES",
    "LITERAL",
    "asks_how",
    "code_names",
    "expected_types",
    "focus_types",
    "head_noun",
    "says_default",
    "tokens_of",
    "types_in",
]

NUMBER = "number"
FLAG = "flag"
ERROR = "error"
FILE = "file"
ENV = "env"
IDENT = "identifier"
ANSWER_TYPES = (NUMBER, FLAG, ERROR, FILE, ENV, IDENT)
# Inline code (``value``, `name`): what documentation writes as code is what a user types.
# Only the choice of the injected sentence asks for it (:func:`focus_types`).
LITERAL = "literal"
# The word "default" itself: a question about a default is answered where the docs say "default".
DEFAULT = "default"
# Every type a text can hold (:func:`types_in`); the copying grammar asks only for ANSWER_TYPES.
KNOWN_TYPES = (*ANSWER_TYPES, LITERAL, DEFAULT)

# Question cues, matched on the lower-cased question.  "what/which ... NOUN" is typed by
# its head noun: the first cue noun within two words ("which option skips hidden files"
# asks for an option, not a file).
_HEADS: dict[str, str] = {
    **dict.fromkeys(
        [
            "port",
            "size",
            "number",
            "version",
            "year",
            "limit",
            "percentage",
            "ratio",
            "count",
            "length",
            "status",
            "code",
            "constant",
            "threshold",
            "timeout",
            "budget",
        ],
        NUMBER,
    ),
    **dict.fromkeys(["option", "flag", "switch", "argument"], FLAG),
    **dict.fromkeys(["error", "exception", "warning"], ERROR),
    **dict.fromkeys(["file", "filename", "directory", "folder"], FILE),
    # The things API documentation names: the answer is a name written as code.
    **dict.fromkeys(
        [
            "class",
            "function",
            "method",
            "decorator",
            "parameter",
            "setting",
            "attribute",
            "signal",
            "loader",
            "helper",
            "extension",
            "middleware",
            "converter",
            "filter",
            "key",
            "keyword",
        ],
        IDENT,
    ),
}
_NOUN = "(" + "|".join(_HEADS) + r")(?:s|es)?\b"
# "what is the", then at most two modifiers, then the noun; a second cue noun right after it is
# the compound's head ("file size" asks for a size).
_LEAD = r"\b(?:what|which) (?:(?:is|are|was|were) (?:the |a |an )?)?(?:[\w-]+ ){0,2}?"
# A second cue noun in "-s" before a determiner is the question's verb: "which setting key caps
# the length" asks for a key, "which error codes does it return" for codes.
_VERB_S = r"(?!s (?:the|a|an|its|their|every|all|each|any|this|that|these|those)\b)"
_NOUN2 = "(" + "|".join(_HEADS) + r")" + _VERB_S + r"(?:s|es)?\b"
_HEAD_RE = re.compile(_LEAD + _NOUN + "(?: " + _NOUN2 + ")?")
# "How do I ..." asks for something to write: a call, a keyword argument, an option.
_HOWTO_RE = re.compile(r"^(?:how (?:do|can|should|would) (?:i|you|we)|how to)\b")
_CUES: dict[str, re.Pattern[str]] = {
    NUMBER: re.compile(
        r"\bhow (?:many|much|long|big|large|small|often|far|old|high|low|deep|wide)\b"
        r"|\bin (?:seconds|milliseconds|minutes|hours|days|bytes|characters|tokens|percent)\b"
        r"|\b(?:at most|at least|maximum|minimum)\b"
    ),
    ENV: re.compile(r"\benvironment variables?\b|\benv var"),
}

# Answer shapes, matched on the text as written.
_SHAPES: dict[str, re.Pattern[str]] = {
    NUMBER: re.compile(r"\b\d"),
    FLAG: re.compile(r"(?:^|[\s`(\[|,])--?[A-Za-z][\w-]*"),
    ERROR: re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z]*)*(?:Error|Exception|Warning)\b"),
    # name.ext, a dotfile (".lumenrc") or a path
    FILE: re.compile(r"[\w-]+\.[a-z][a-z0-9]{0,4}\b(?!\()|(?:^|[\s`'\"(])\.[a-z][\w.-]*|\w/\w"),
    ENV: re.compile(r"\$?\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b"),
    # a CamelCase name of two humps or more ("KnowledgeBase"), a call ("retrieve("), a snake_case
    # or dotted lower-case name ("keep_going", "job.attempt"), a keyword argument ("retry=True")
    IDENT: re.compile(
        r"\b[A-Z][a-z0-9]+[A-Z]\w*|\b[A-Za-z_]\w*\(|\b[a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9]\b"
        r"|(?<![/\w.])[a-z_]\w*\.[a-z_]\w*[a-z0-9]\b(?![./\w])|\b[a-z_]\w*=\S"
    ),
    LITERAL: re.compile(r"``[^`\n]+``|(?<![`\w])`[^`\n]+`(?!`)"),
    # a default stated, not the word in passing ("the default implementation"): "Default: X",
    # "defaults to X", "is X by default", "the default ``X``", "(default 8)", "default=1"
    DEFAULT: re.compile(
        r"\bdefault(?:s|ed|ing)?(?:\s*[:=]|\s+(?:is|are|was|to|value|of)\b|\s*(?:``|`|'|\"|\d))|\bby default\b", re.I
    ),
}
# The word "default" itself: in a question, it asks what a default is; in a table header, the
# column holds defaults.
_DEFAULT_WORD = re.compile(r"\bdefault(?:s|ed)?\b", re.I)
# A question asks for a default without the word: what is used "when none is given", "if it is not
# set", "if omitted".  Documentation states it as a default ("``string`` by default").
_ASKS_DEFAULT = re.compile(
    r"\b(?:when|if) (?:none|nothing|no \w+|it|they|one) (?:is|are) (?:not )?(?:given|set|specified|passed|provided)\b"
    r"|\bif (?:omitted|left out|not (?:given|set|specified|passed|provided))\b"
)
# "which/what NOUN ..." with a noun no cue names: documentation answers it with a name.
_WHICH_RE = re.compile(r"^(?:which|what) (?!(?:is|are|was|were|does|do|did|can|should|happens|if)\b)[\w-]+")


def expected_types(question: str) -> frozenset[str]:
    """The answer types ``question`` asks for (see the module doc); empty when none is clear."""
    text = " ".join(question.lower().split())
    if _HOWTO_RE.match(text):
        # The words after "how do I" say the task, not the answer's form: "how do I tell how many
        # files were skipped" asks for the call to write, not for a number.
        return frozenset((IDENT, FLAG))
    found = {kind for kind, cue in _CUES.items() if cue.search(text)}
    head = head_noun(text)
    if head:
        found.add(_HEADS[head])
    return frozenset(found)


def focus_types(question: str) -> frozenset[str]:
    """The answer types the sentence shown for ``question`` should hold: :func:`expected_types` and more.

    Every cue noun of the question counts, not only the head ("which job
    attribute caps ..." asks for an attribute whether or not "caps" is
    read as a noun); a "which NOUN" question no cue types asks for a name;
    and wherever a name or something to write is asked for, inline code
    holds it as well as an identifier does.
    """
    text = " ".join(question.lower().split())
    found = set(expected_types(text))
    head = _HEAD_RE.search(text)
    if head:
        found.update(_HEADS[noun] for noun in head.groups() if noun)
    if not found and _WHICH_RE.match(text):
        found.add(IDENT)
    if found & {IDENT, FLAG}:
        found.add(LITERAL)
    if says_default(text) or _ASKS_DEFAULT.search(text):
        found.add(DEFAULT)
    return frozenset(found)


def says_default(text: str) -> bool:
    """Whether ``text`` holds the word "default" at all (a stated default is the :data:`DEFAULT` type)."""
    return _DEFAULT_WORD.search(text) is not None


def asks_how(question: str) -> bool:
    """Whether ``question`` asks how to do something ("How do I ...", "How to ...")."""
    return _HOWTO_RE.match(" ".join(question.lower().split())) is not None


def head_noun(question: str) -> str | None:
    """The cue noun that names what ``question`` asks for ("port" in "what port does it use?"), if any."""
    head = _HEAD_RE.search(" ".join(question.lower().split()))
    return (head.group(2) or head.group(1)) if head else None


def types_in(text: str) -> frozenset[str]:
    """The answer types of which ``text`` holds at least one token."""
    return frozenset(kind for kind, shape in _SHAPES.items() if shape.search(text))


# Names written as code: inline literals (``name``, `name`, :role:`name`) and the identifier shapes.
_LITERAL_RE = re.compile(r"``([^`\n]{1,80})``|(?<![`\w])`([^`\n]{1,80})`(?!`)")

_PATH_RE = re.compile(r"[^\s`<>]*/[^\s`<>]*")


def code_names(text: str) -> list[str]:
    """The names ``text`` writes as code: its inline literals and its identifier-shaped tokens.

    Documentation names a thing after what it does (a reader of records from
    a file is a ``FileReader``), so the name that holds a
    question's words is often the answer to "which class ...".
    """
    # A path ("../middleware/proxy_fix", a cross-reference's target) names a page, not a thing.
    text = _PATH_RE.sub(" ", text)
    out = [m.group(1) or m.group(2) for m in _LITERAL_RE.finditer(text)]
    out += [m.group(0) for m in _SHAPES[IDENT].finditer(text)]
    return [name for name in out if name.strip()]


def tokens_of(text: str, kind: str) -> list[str]:
    """The tokens of answer type ``kind`` that ``text`` holds, as written."""
    return [m.group(0) for m in _SHAPES[kind].finditer(text)]
