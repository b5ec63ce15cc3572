"""Sentence ends in running text, found incrementally.

:class:`SentenceSplitter` is an incremental decoder: ``feed`` it text piece by
piece (a model's output arrives a token at a time) and it releases the text
with the positions where sentences end; ``flush`` releases what it still holds
when the text is over.  Any split of the input gives the same sentences.

The rule is written for questions about code.  A sentence ends after a
terminator (``.``, ``!``, ``?``, an ellipsis, then optional closing quotes or
brackets) only when whitespace follows and then an uppercase letter, an opening
quote or bracket, or a line break; so ``json.tool``, ``setup.py``, ``3.10.2``,
``1.5``, URLs and ``a?.b`` never end one (no whitespace follows their dots),
nor does ``e.g. the`` (a lowercase word follows).  Some abbreviations never end
a sentence even before a capital (``e.g.``, ``i.e.``, ``vs.``, ``Dr.``,
``Mr.``...); ``etc.`` usually does, so it follows the rule.  An ellipsis, a
lone list marker (``1.``, ``a.``) and a terminator standing alone (``a ? b``)
end a sentence only at a line break.  A line break without a terminator ends
one when the next line does not start in lowercase (a list item, a heading),
so hard-wrapped prose stays whole; a blank line always ends one.

A sentence's end is placed right after its terminator, or before the line
break that ends it: the whitespace from there begins the next sentence.
Deciding needs the first character after that whitespace, so the splitter
holds it until the next visible character (or ``flush``) arrives; nothing
else is held.
At the end of the text, whitespace after a terminator or a line break ends the
sentence; the text's own end is left to the caller.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import NamedTuple

__all__ = ["Released", "SentenceSplitter", "is_question", "last_question", "last_question_start", "split_sentences"]

_TERMINATORS = ".!?\u2026"
# Closing quotes, brackets and markdown emphasis that may follow a terminator ("Stop." / (why?) / **done.**).
_CLOSERS = "\"'\u201d\u2019\u00bb)]}*`"
# Characters that may open a sentence besides a capital: quotes, brackets, emphasis, inverted marks.
_OPENERS = "\"'\u201c\u2018\u00ab\u201e`([*\u00bf\u00a1"
# Abbreviations that never end a sentence, whatever follows (compared lowercased, without the final dot).
_ABBREVIATIONS = frozenset(
    {
        *("e.g", "i.e", "eg", "ie", "vs", "cf", "viz", "al", "approx", "esp", "incl", "resp"),  # Latin, English
        *("dr", "mr", "mrs", "ms", "prof", "sr", "jr", "st", "mt"),  # titles
        *("fig", "figs", "eq", "eqs", "vol", "pp", "ch", "sec"),  # references
    }
)
_LIST_MARKER_RE = re.compile(r"\d{1,3}|[A-Za-z]|[ivxlcIVXLC]{1,5}")
_CHUNK_RE = re.compile(r"\s+|\S+")
_WORD_TAIL = 48  # how much of a long word is kept: enough for any abbreviation or list marker


class Released(NamedTuple):
    """Text the splitter has decided on, and where sentences end in it (offsets into ``text``)."""

    text: str
    ends: list[int]


class SentenceSplitter:
    """An incremental sentence splitter: ``feed`` pieces, then ``flush``.

    Concatenating every released text gives the input back exactly; cutting
    it at the released ends gives the sentences, each with the whitespace
    before it.  The text after the last end is the last sentence.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._word = ""  # the visible run being read (its last _WORD_TAIL characters)
        self._held = ""  # whitespace that may end the sentence (after a terminator, or from a line break on)
        self._ends_here = False  # the last finished word ends with a terminator that may end the sentence
        self._first_word = True  # no finished word yet in this sentence
        self._blank = True  # the sentence has no visible character yet

    def feed(self, text: str) -> Released:
        out: list[str] = []
        ends: list[int] = []
        size = 0
        for m in _CHUNK_RE.finditer(text):
            chunk = m.group()
            if chunk[0].isspace():
                if self._word:
                    self._finish_word()
                if not self._held and not self._ends_here:
                    # No terminator before it: only a line break can end the sentence, so the
                    # whitespace before the first one goes out at once.
                    cut = chunk.find("\n")
                    cut = len(chunk) if cut < 0 else cut
                    out.append(chunk[:cut])
                    size += cut
                    chunk = chunk[cut:]
                self._held += chunk
                continue
            if self._held:
                if self._decide(self._held, chunk[0]):
                    ends.append(size)
                    self._new_sentence()
                out.append(self._held)
                size += len(self._held)
                self._held = ""
            self._word = (self._word + chunk)[-_WORD_TAIL:]
            self._blank = False
            out.append(chunk)
            size += len(chunk)
        return Released("".join(out), ends)

    def flush(self) -> Released:
        """The text is over: release the whitespace held and start afresh.

        The end of the text ends a sentence where a terminator or a line
        break comes before the whitespace held ("Why? " does, "Why?" is left
        to the caller, as is any last sentence).
        """
        held = self._held
        ends = [0] if held and not self._blank and (self._ends_here or "\n" in held) else []
        self._reset()
        return Released(held, ends)

    def _new_sentence(self) -> None:
        self._first_word = True
        self._blank = True
        self._ends_here = False

    def _finish_word(self) -> None:
        self._ends_here = self._terminates(self._word)
        self._first_word = False
        self._word = ""

    def _terminates(self, word: str) -> bool:
        """Whether ``word`` (followed by whitespace) may end its sentence before a capital."""
        body = word.rstrip(_CLOSERS)
        stem = body.rstrip(_TERMINATORS)
        run = body[len(stem) :]
        stem = stem.lstrip(_OPENERS)
        if not run or not stem:
            return False  # no terminator, or one standing alone ("a ? b", "...")
        if "?" in run or "!" in run:
            return True
        if "\u2026" in run or ".." in run:
            return False  # an ellipsis: the sentence trails on
        if stem.lower() in _ABBREVIATIONS:
            return False
        return not (self._first_word and _LIST_MARKER_RE.fullmatch(stem))

    def _decide(self, space: str, nxt: str) -> bool:
        """Whether the sentence ends before ``space``, given the first visible character after it."""
        if self._blank:
            return False
        breaks = space.count("\n")
        if breaks >= 2:
            return True
        if self._ends_here:
            return breaks > 0 or _opens_sentence(nxt)
        return breaks > 0 and not nxt.islower()


def _opens_sentence(ch: str) -> bool:
    # A caseless letter (CJK, Arabic...) counts as a capital.
    return (ch.isalpha() and not ch.islower()) or ch in _OPENERS


def split_sentences(text: str) -> list[str]:
    """``text`` cut into sentences, each with the whitespace before it (they join back to ``text``)."""
    splitter = SentenceSplitter()
    released, ends = splitter.feed(text)
    rest, last = splitter.flush()
    cuts = [0, *ends, *(len(released) + end for end in last), len(released) + len(rest)]
    released += rest
    return [released[a:b] for a, b in pairwise(cuts) if b > a]


def is_question(sentence: str) -> bool:
    """Whether ``sentence`` ends with a question mark (closing quotes and brackets aside)."""
    return sentence.rstrip().rstrip(_CLOSERS).endswith("?")


_QUESTION_END_RE = re.compile(rf"(?<=\S)\?+(?=$|[\s<{re.escape(_CLOSERS)}])")


def _last_question(text: str) -> tuple[int, str] | None:
    end = len(text)
    for sentence in reversed(split_sentences(text)):
        start = end - len(sentence)
        end = start
        marks = list(_QUESTION_END_RE.finditer(sentence))
        if marks:
            question = " ".join(sentence[: marks[-1].end()].split())
            if question:
                return start + len(sentence) - len(sentence.lstrip()), question
    return None


def last_question(text: str) -> str | None:
    """The last question in ``text``: its last sentence with a question mark, up to that mark.

    A question mark counts where a word ends with it (so ``a ? b`` and
    ``?q=1`` do not); text after it in the same sentence (a lowercase
    "thanks", a chat template's closing tag) is cut off.
    """
    found = _last_question(text)
    return found[1] if found else None


def last_question_start(text: str) -> int | None:
    """Where the sentence of :func:`last_question` begins in ``text`` (its first visible character)."""
    found = _last_question(text)
    return found[0] if found else None
