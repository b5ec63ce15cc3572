"""The blocks injected into a model's context, and the guard on retrieved text.

One place builds every ``<result>`` and ``<context>`` block, for the stream
controller and for the proxy's up-front injection alike:

* :func:`neutralize` makes retrieved text unable to act as a delimiter: our
  own tags, the chat-template markers of the common open model families, and
  a line shaped like a passage header;
* :class:`BlockBuilder` numbers the passages, writes where each came from and
  keeps the block within its size budget;
* :func:`last_question` and friends find the question a turn retrieves for.

The guard works on the text as a tokenizer or a careful reader would see it:
folded with Unicode NFKC (so full-width ``＜`` is ``<`` and DeepSeek's
``｜`` is ``|``) and with invisible format characters (zero-width spaces,
joiners, bidi marks: category Cf) removed.  Only the delimiter character that
opens a marker is escaped (``<`` becomes ``&lt;``, ``[`` becomes ``&#91;``),
so ordinary text, code and markup such as ``<div>`` or ``a < b`` pass
unchanged, and a look-alike character is kept as written unless it opens a
marker.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .._text import _sentences
from .._types import HitLike
from .._validate import check_int

__all__ = [
    "DEFAULT_BLOCK_CHARS",
    "MIN_BLOCK_CHARS",
    "Block",
    "BlockBuilder",
    "BlockTag",
    "Passage",
    "guard_pattern",
    "is_question_sentence",
    "last_question",
    "neutralize",
    "norm_query",
    "squash_ws",
]

BlockTag = Literal["result", "context"]

DEFAULT_BLOCK_CHARS = 2000
MIN_BLOCK_CHARS = 64
# A passage that would get fewer characters than this is left out rather than
# cut to a stub.
_MIN_PASSAGE_ROOM = 40

_WS_RE = re.compile(r"\s+")

# -- the guard ----------------------------------------------------------------------

# Characters str.splitlines() ends a line at: a header-shaped line is judged
# the way a reader of the block splits it.
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_BREAK_RUN_RE = re.compile(f"[{_BREAKS}]+")

# Invisible characters outside category Cf that renderers and many tokenizers
# also ignore: the combining grapheme joiner, Hangul fillers, Khmer inherent
# vowels, Mongolian free variation selectors and the variation selectors.
_IGNORABLE = frozenset(
    (0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x3164, 0xFFA0,
     *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0))
)  # fmt: skip

# The opening delimiter of each marker, matched in the folded text.  Group
# "lt" / "sq" / "rb" / "lb" / "gt" is the character that gets escaped.
_MARKER_RE = re.compile(
    r"""
    (?P<lt><)(?=
        \|                                            # <|im_start|>, <|eot_id|>, <|begin_of_query|>, DeepSeek <｜...｜>
      | \s*/?\s*(?:tool|result|context|function       # our tags; <tool_call>, <tool_response>, <function=...>
                  |think|reason                       # <think>, <thinking>, <reasoning>
                  |start_of_|end_of_|im_|fim_         # Gemma <start_of_turn>; ChatML and FIM without pipes
                  |extra_id_|jupyter_|commit_         # Nemotron/T5 <extra_id_1>; StarCoder's notebook and git tokens
                  |seed:|minimax:|reserved_           # Seed-OSS <seed:eos>; MiniMax <minimax:tool_call>; Baichuan
                  |file_sep|repo_name|issue_|pr_|code_to_|empty_output
                                                      # StarCoder2's repository and issue tokens
                  |(?:eos|bos|start_of_turn|end_of_turn)_token)  # Cohere <EOS_TOKEN>, <BOS_TOKEN>
      | \s*/?\s*(?:s|unk|pad|mask|bos|eos|eot|eom|sop|eop|cls|sep|sys
                  |eoh|eoa|eosys                      # InternLM
                  |search|information|answer          # Search-R1 / ReSearch calls and answers
                  |role|pr                            # Ling <role>; StarCoder2 <pr>
                  |_(?:user|bot|end|system|start)     # TeleChat <_user> <_bot> <_end>
                  |用户|(?-i:AI)                      # MiniCPM <用户> <AI>
                  |(?-i:PRE|SUF|MID)                  # CodeLlama infilling (upper case: HTML's <pre> is not one)
                  |unused\d*                          # Gemma's reserved <unused0>...
                  |image|video|audio                  # LLaVA and other multimodal placeholders
                  |filename|reponame|gh_stars)\s*>    # StarCoder
                                                      # Llama/Mistral <s></s>; Gemma <bos><eos>; <<SYS>>
      | <\s*/?\s*sys\b                                # the first "<" of Llama 2's <<SYS>> and <</SYS>>
    )
    | (?P<gt>>)(?=>[a-z_]+<<)                         # Falcon >>QUESTION<< >>ANSWER<< >>SUFFIX<<...
    | (?P<sq>\[)(?=
        \s*/?\s*(?:inst|sys|system_prompt|tool_calls|available_tools|tool_results|tool_content
                  |think|img|prefix|middle|suffix|gmask|smask|args|call_id)\s*\]
                                                      # Mistral [INST] [/INST] [TOOL_CALLS] [ARGS] [CALL_ID]...
      | \|                                            # EXAONE [|system|] [|endofturn|]
      | e~\[                                          # MiniMax [e~[
    )
    | (?P<rb>\])(?=~!?b[\]\[])                        # MiniMax ]~b] ]~!b[
    | (?P<lb>\{)(?=\s*"name"\s*:\s*"[^"]{0,64}"\s*,\s*"(?:parameters|arguments)"\s*:)
                                                      # a Llama 3 JSON tool call
    """,
    re.IGNORECASE | re.VERBOSE,
)
# A line that would read as a passage header: "[7] docs/official.md:1-3".
_HEADER_RE = re.compile(rf"(?:\A|(?<=[{_BREAKS}]))[^\S{_BREAKS}]*(?P<sq>\[)(?=\s*\d+\s*\])")
_ESCAPES = {"<": "&lt;", "[": "&#91;", ">": "&gt;", "]": "&#93;", "{": "&#123;"}
# A reader (or a model copying a passage) may drop combining marks and blank
# braille cells: "<" + U+0301 + "tool" copied that way is "<tool".  Markers
# are also looked for with them taken out.
_BRAILLE_BLANK = "\u2800"


@functools.lru_cache(maxsize=4096)
def _dropped_when_copied(ch: str) -> bool:
    return ch == _BRAILLE_BLANK or unicodedata.category(ch) in ("Mn", "Mc", "Me")


def _marker_spots(folded: str, extra: re.Pattern[str] | None = None) -> list[int]:
    """Where markers open in ``folded``: as it is, and with the characters a
    copy may drop (combining marks, blank braille) taken out.  ``extra``
    matches the served model's own control tokens (see :func:`guard_pattern`)."""
    if not _OPENERS.intersection(folded):
        return []  # every marker opens with one of them
    spots = [m.start() for m in _MARKER_RE.finditer(folded)]
    spots += [m.start("sq") for m in _HEADER_RE.finditer(folded)]
    if extra is not None:
        spots += [m.start() for m in extra.finditer(folded)]
    if folded.isascii() or not any(_dropped_when_copied(ch) for ch in set(folded) if ord(ch) > 0x7F):
        return sorted(set(spots))
    # Only what follows each opener can make a marker: it is matched again
    # with the droppable characters taken out (however many there are).
    found = set(spots)
    for m in _OPENER_RE.finditer(folded):
        at = m.start()
        if at in found:
            continue
        ahead = _squeezed(folded, at, _LOOKAHEAD)
        hit: re.Match[str] | None = None
        if ahead != folded[at : at + len(ahead)]:
            hit = _MARKER_RE.match(ahead) or (extra.match(ahead) if extra is not None else None)
        # A header is judged with what a copy drops before it on its line
        # taken out too, whether or not anything after the "[" was dropped.
        if hit is None and ahead[0] == "[" and _opens_line(folded, at):
            hit = _HEADER_RE.match(ahead)
        if hit is not None:
            found.add(at)
    return sorted(found)


def _opens_line(text: str, at: int) -> bool:
    """Whether only blanks and characters a copy may drop precede ``at`` on its line."""
    j = at - 1
    while j >= 0 and text[j] not in _BREAKS:
        ch = text[j]
        if not (ch.isspace() or (ord(ch) > 0x7F and _dropped_when_copied(ch))):
            return False
        j -= 1
    return True


# The characters that open a marker, and how far past one a marker can reach.
_OPENER_RE = re.compile(r"[<\[>\]{]")
_OPENERS = frozenset("<[>]{")
_LOOKAHEAD = 64


def _squeezed(text: str, start: int, count: int) -> str:
    """Up to ``count`` characters of ``text`` from ``start``, those a copy may drop left out."""
    out: list[str] = []
    end = len(text)
    i = start
    while i < end and len(out) < count:
        ch = text[i]
        i += 1
        if ord(ch) > 0x7F and _dropped_when_copied(ch):
            continue
        out.append(ch)
    return "".join(out)


def _ignorable(ch: str) -> bool:
    return unicodedata.category(ch) == "Cf" or ord(ch) in _IGNORABLE


@functools.lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    """One character NFKC-folded; empty for a character the guard drops."""
    return "" if _ignorable(ch) else unicodedata.normalize("NFKC", ch)


def _fold(text: str) -> tuple[str, list[str], list[int], list[int]]:
    """``text`` NFKC-folded with ignorable characters dropped.

    Returns the folded text, the kept original characters, for each folded
    character the index of the kept character it came from, and for each kept
    character where its fold starts.  Folding is done character by character
    so every folded character traces back to one original; NFKC composition
    never produces an ASCII character, so this finds the same markers as
    folding the whole text.
    """
    kept: list[str] = []
    pieces: list[str] = []
    origin: list[int] = []
    starts: list[int] = []
    for ch in text:
        folded = _fold_char(ch) if ord(ch) > 0x7F else ch
        if not folded:
            continue
        starts.append(len(origin))
        origin.extend([len(kept)] * len(folded))
        kept.append(ch)
        pieces.append(folded)
    return "".join(pieces), kept, origin, starts


@functools.lru_cache(maxsize=64)
def guard_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    """A pattern finding ``tokens`` (a served model's control tokens) at their first character.

    Only tokens that open with a character the guard escapes (``<``, ``[``,
    ``{``, ``]``, ``>``) can be neutralised by escaping it; the others are
    left out.  Tokens are matched as written (case matters to a tokenizer).
    """
    usable = sorted({t for t in tokens if len(t) > 1 and t[0] in _ESCAPES}, key=len, reverse=True)
    if not usable:
        return None
    return re.compile("|".join(re.escape(t[0]) + "(?=" + re.escape(t[1:]) + ")" for t in usable))


def neutralize(text: str, extra: Sequence[str] = ()) -> str:
    """Make retrieved text unable to act as a tag, a chat-template token or a passage header.

    After NFKC folding and with format characters removed, the result holds
    no ``<tool``, ``</result>``, ``<context>``, ``<|...|>`` control token,
    ``<think>``, ``<start_of_turn>``, ``<s>``, ``<<SYS>>``, ``[INST]``,
    ``>>QUESTION<<`` and the like, and no line starting with ``[N]``, nor
    any once combining marks and blank braille cells are dropped too (as a
    copy may drop them): the opening ``<`` becomes ``&lt;``, the opening
    ``[`` ``&#91;`` and the first ``>`` of ``>>...<<`` ``&gt;``.  Format
    characters are dropped; everything else is kept as written.  The
    call markers of every dialect (``<search>``, ``<|begin_of_query|>``,
    ``[TOOL_CALLS]``, a JSON ``{"name": ..., "parameters": ...}``, ...)
    and the turn tokens of the families listed above count as markers;
    ``extra`` adds a served model's own control tokens.
    """
    # Most text, accented or not, is already folded and has nothing to drop:
    # then positions in the folded text are positions in the text.
    plain = text.isascii() or (
        unicodedata.is_normalized("NFKC", text) and not any(_ignorable(ch) for ch in set(text) if ord(ch) > 0x7F)
    )
    kept: list[str]
    origin: list[int]
    starts: list[int]
    if plain:
        folded, kept, origin, starts = text, [], [], []
    else:
        folded, kept, origin, starts = _fold(text)
    spots = _marker_spots(folded, guard_pattern(tuple(extra)) if extra else None)
    if plain:
        if not spots:
            return text
        out = list(text)
        for pos in spots:
            out[pos] = _ESCAPES[text[pos]]
        return "".join(out)
    # A kept character that opens a marker is replaced by its fold with the
    # opener escaped (a full-width "＜" becomes "&lt;").
    escape_at: dict[int, list[int]] = {}
    for pos in spots:
        escape_at.setdefault(origin[pos], []).append(pos)
    out = kept
    for index, positions in escape_at.items():
        first = starts[index]
        end = starts[index + 1] if index + 1 < len(starts) else len(folded)
        chars = list(folded[first:end])
        for pos in positions:
            chars[pos - first] = _ESCAPES[folded[pos]]
        out[index] = "".join(chars)
    return "".join(out)


def _one_line(text: str) -> str:
    # A source name with a line break could start a forged header line.
    return _BREAK_RUN_RE.sub(" ", text)


# -- questions ------------------------------------------------------------------------


def squash_ws(text: str) -> str:
    """``text`` with every run of whitespace made one space, trimmed."""
    return _WS_RE.sub(" ", text).strip()


def norm_query(query: str) -> str:
    """The form two queries are compared in (a query is retrieved once per turn)."""
    return squash_ws(query).lower()


def last_question(text: str, *, window: int = 4000) -> str | None:
    """The last question in the final ``window`` characters of ``text``, whole (see ``_text._sentences``)."""
    return _sentences.last_question(text[-window:])


def is_question_sentence(sentence: str) -> bool:
    """Whether a sentence the model wrote is a question worth retrieving for."""
    return _sentences.is_question(sentence) and len(sentence.strip()) > 3


# -- blocks ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Passage:
    """What a block shows of one hit: its text and where it came from."""

    source: str
    text: str
    start_line: int | None = None
    end_line: int | None = None

    @classmethod
    def of(cls, hit: HitLike) -> Passage:
        start = getattr(hit, "start_line", None)
        end = getattr(hit, "end_line", None)
        if not (isinstance(start, int) and isinstance(end, int) and end >= start > 0):
            start = end = None
        return cls(hit.source, hit.text, start, end)

    @property
    def location(self) -> str:
        """``source`` or ``source:first-last`` (lines), as the header shows it."""
        if self.start_line is None or self.end_line is None:
            return self.source
        return f"{self.source}:{self.start_line}-{self.end_line}"


@dataclass(frozen=True, slots=True)
class Block:
    """One block as the model reads it: ``text`` is its bytes, ``passages`` what it shows of each hit.

    Each passage's ``text`` is exactly what the block holds of it
    (neutralised, cut to the budget), so code that needs the shown words
    (the copying grammar) reads them here instead of parsing ``text``.
    """

    tag: BlockTag
    text: str
    passages: tuple[Passage, ...] = ()
    note: str | None = None


@dataclass(frozen=True, slots=True)
class BlockBuilder:
    """Formats the blocks of one controller or proxy; ``budget`` caps each block's characters.

    A block is ``\\n<tag>\\n`` + an optional note + numbered passages
    (``[1] source:lines`` then the text) + ``</tag>\\n``; a ``frame``
    (a dialect's result format, e.g. ``<information>`` ... ``</information>``)
    replaces the tags.  Passages are neutralised (with ``guard``, a served
    model's own control tokens, as extra markers), then cut with an ellipsis
    to fit; a passage with less than a useful amount of room left is dropped.
    """

    budget: int = DEFAULT_BLOCK_CHARS
    guard: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_int("block_chars", self.budget, MIN_BLOCK_CHARS)

    def block(self, tag: BlockTag, hits: Sequence[HitLike] = (), note: str | None = None) -> str:
        return self.build(tag, hits, note).text

    def build(
        self,
        tag: BlockTag,
        hits: Sequence[HitLike] = (),
        note: str | None = None,
        frame: tuple[str, str] | None = None,
    ) -> Block:
        """The block of ``hits`` as a typed value (see :class:`Block`)."""
        return self.build_passages(tag, [Passage.of(hit) for hit in hits], note, frame)

    def passages_block(self, tag: BlockTag, passages: Sequence[Passage], note: str | None = None) -> str:
        return self.build_passages(tag, passages, note).text

    def build_passages(
        self,
        tag: BlockTag,
        passages: Sequence[Passage],
        note: str | None = None,
        frame: tuple[str, str] | None = None,
    ) -> Block:
        head, tail = frame if frame is not None else (f"\n<{tag}>\n", f"</{tag}>\n")
        guard = self.guard
        room_total = self.budget - len(head) - len(tail)
        parts: list[str] = []
        shown: list[Passage] = []
        used = 0
        if note is not None:
            parts.append(neutralize(note, guard)[: max(room_total - 1, 0)] + "\n")
            used = len(parts[0])
        for number, passage in enumerate(passages, 1):
            header = f"[{number}] {neutralize(_one_line(passage.location), guard)}\n"
            text = neutralize(passage.text.strip(), guard)
            room = room_total - used - len(header) - 1
            if room < _MIN_PASSAGE_ROOM:
                break
            if len(text) > room:
                text = text[: room - 1].rstrip() + "\u2026"
            parts.append(header + text + "\n")
            shown.append(Passage(passage.source, text, passage.start_line, passage.end_line))
            used += len(parts[-1])
        return Block(tag, head + "".join(parts) + tail, tuple(shown), note)
