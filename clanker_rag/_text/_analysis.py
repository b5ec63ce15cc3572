"""Turning text into index terms.

The analyser is part of the index: its settings are saved with it, so a query
is always analysed exactly like the documents it is matched against.

Pipeline for one raw word token (a maximal run of word characters, or a run
of at most 16 CJK characters):

1. Code-aware splitting: ``getUserName``, ``get_user_name`` and ``HTTPServer2``
   yield the whole lowercased identifier *and* its word parts (``get``,
   ``user``, ``name``; ``http``, ``server``), so prose queries find code and
   code queries find prose.  Digit runs split out of an identifier are not
   terms: the ``2`` of ``hunter2prod`` must not match a "page 2".
2. Case folding (``str.casefold``), so ``Straße`` matches ``STRASSE``.
3. Stopword removal (English list, on by default).
4. Stemming (Snowball English / Porter2, on by default).
5. CJK runs become overlapping character bigrams instead of one giant token.

Results are cached per distinct raw token, which is what makes analysis cheap:
corpora repeat the same few hundred thousand words millions of times.
"""

from __future__ import annotations

import functools
import re
import weakref
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate, chain
from typing import Any

from .._exceptions import ConfigError
from ._stemmer import stem as porter2_stem
from ._stopwords import ENGLISH_STOPWORDS

__all__ = ["Analyzer", "find_words", "piece_offsets", "split_words"]

# Hiragana, Katakana and the CJK ideograph blocks: scripts written without
# spaces, where a "word" run can span a whole paragraph.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# Capturing group: ``split`` then returns gap, word, gap, word, ..., gap.
_WORD_SPLIT_PATTERN = rf"([^\W{_CJK}]+|[{_CJK}]{{1,16}})"
# The same split for pure-ASCII text, where it is equivalent and twice as fast.
_ASCII_SPLIT = re.compile(r"(\w+)", re.ASCII)
_IDENT_PART_PATTERN = r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\W_0-9A-Za-z]+"


@functools.cache
def _unicode_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    # Compiled on first use: the Unicode classes take a noticeable share of the
    # command-line tool's start-up, and pure-ASCII text never needs them.
    return re.compile(_WORD_SPLIT_PATTERN), _ident_part()


@functools.cache
def _ident_part() -> re.Pattern[str]:
    # Apart from the word split (2 ms to compile, its CJK ranges): an identifier
    # in pure-ASCII text (a note's "word12") needs only this one (0.15 ms).
    return re.compile(_IDENT_PART_PATTERN)


def _is_cjk(ch: str) -> bool:
    return (
        "\u3040" <= ch <= "\u30ff"
        or "\u3400" <= ch <= "\u4dbf"
        or "\u4e00" <= ch <= "\u9fff"
        or ("\uf900" <= ch <= "\ufaff")
    )


_MAX_CACHE = 2_000_000


def split_words(text: str) -> list[str]:
    """Split ``text`` into alternating gaps and words: ``[gap, word, gap, ..., gap]``.

    The list always has odd length; ``"".join`` of it is ``text`` again, which
    is what lets chunking return exact slices of the original.
    """
    return (_ASCII_SPLIT if text.isascii() else _unicode_patterns()[0]).split(text)


# ASCII word characters (what ``\w`` matches with re.ASCII) kept, the rest blanked.
_BLANK_NON_WORD = bytes(c if (chr(c).isalnum() and c < 128) or c == 0x5F else 0x20 for c in range(256))


def find_words(text: str) -> list[str]:
    """The words of ``text``, as :func:`split_words` finds them."""
    if text.isascii():
        # Blanking the gaps with bytes.translate and splitting on whitespace
        # finds the same words as the regex, in well under its time.
        return text.encode("ascii").translate(_BLANK_NON_WORD).decode("ascii").split()
    return _unicode_patterns()[0].findall(text)


# Word characters (left non-blank by _BLANK_NON_WORD) blanked, blanks kept as "x".
_BLANK_WORD = bytes(0x78 if c == 0x20 else 0x20 for c in range(256))


def piece_offsets(text: str, words: list[str]) -> array[int]:
    """Where each piece of :func:`split_words` starts, plus ``len(text)`` at the end.

    ``words`` is ``find_words(text)``.  Offset ``2i`` is where the gap before
    word ``i`` starts and ``2i + 1`` where word ``i`` starts.
    """
    if not text.isascii():
        return array("q", accumulate(map(len, split_words(text)), initial=0))
    # The gaps are the runs that the word blanking left blank: swap the two
    # and split, instead of running the splitting regex over the whole text.
    blanked = text.encode("ascii").translate(_BLANK_NON_WORD)
    gaps = list(map(len, blanked.translate(_BLANK_WORD).split()))
    if not words:
        gaps = [len(text)]
    else:
        if not blanked[:1].isspace():
            gaps.insert(0, 0)
        if not blanked[-1:].isspace():
            gaps.append(0)
    lengths = [0] * (2 * len(words) + 1)
    lengths[0::2] = gaps
    lengths[1::2] = map(len, words)
    # A packed array: a list of int objects for a big file's two offsets
    # per word would take more memory than the words themselves.
    return array("q", accumulate(lengths, initial=0))


_MISSING = "\x00"  # not a word: marks a _word_cache miss


class _TermCache(dict[str, tuple[str, ...]]):
    """Raw token -> analysed terms; ``__missing__`` keeps hits at C speed."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Analyzer) -> None:
        super().__init__()
        # The owning analyser, held weakly: a bound method of it here would make every
        # analyser (and the index holding it) a reference cycle.
        self._owner = weakref.ref(owner)

    def __missing__(self, raw: str) -> tuple[str, ...]:
        if len(self) >= _MAX_CACHE:
            self.clear()
        owner = self._owner()
        if owner is None:
            raise ReferenceError("the analyser this cache belongs to is gone")
        terms = owner._expand(raw)
        self[raw] = terms
        return terms


class Analyzer:
    """Configurable text analyser; call it on a string to get its terms.

    Parameters
    ----------
    stopwords:
        ``True`` for the built-in English list, ``False``/``None`` for none, or
        an iterable of words (compared after case folding).
    stemmer:
        ``"porter2"`` (Snowball English) or ``None``.
    split_identifiers:
        Also emit the parts of ``camelCase``, ``snake_case`` and ``HTTPServer2``.
    custom:
        Any callable ``str -> iterable of str``; when given it replaces the
        whole pipeline.  A custom analyser cannot be described in the saved
        index, so ``KnowledgeBase.load`` then needs it passed in again.
    """

    def __init__(
        self,
        *,
        stopwords: bool | Iterable[str] | None = True,
        stemmer: str | None = "porter2",
        split_identifiers: bool = True,
        cjk_bigrams: bool = True,
        custom: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        if stemmer not in (None, "porter2"):
            raise ConfigError(f"stemmer={stemmer!r} is not supported: expected 'porter2' or None")
        if stopwords is True:
            self._stop: frozenset[str] = ENGLISH_STOPWORDS
            self._stop_setting: bool | list[str] = True
        elif not stopwords:
            self._stop = frozenset()
            self._stop_setting = False
        else:
            words = sorted({w.casefold() for w in stopwords})
            self._stop = frozenset(words)
            self._stop_setting = words
        self.stemmer = stemmer
        self.split_identifiers = bool(split_identifiers)
        self.cjk_bigrams = bool(cjk_bigrams)
        self.custom = custom
        self._stem: Callable[[str], str] | None = porter2_stem if stemmer == "porter2" else None
        self.cache = _TermCache(self)
        self._word_cache: dict[str, str | None] = {}
        # Analyser version 1 also indexed the digit runs split out of an
        # identifier ("hunter2prod" -> "2"), which then matched every "page 2";
        # an index written by it keeps that behaviour, so its terms still agree.
        self._digit_parts = False

    # -- settings round trip -------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """A JSON-able description, stored in the index."""
        if self.custom is not None:
            name = getattr(self.custom, "__qualname__", type(self.custom).__qualname__)
            module = getattr(self.custom, "__module__", "?")
            return {"type": "custom", "name": f"{module}.{name}"}
        return {
            "type": "standard",
            "version": 1 if self._digit_parts else 2,
            "stopwords": self._stop_setting,
            "stemmer": self.stemmer,
            "split_identifiers": self.split_identifiers,
            "cjk_bigrams": self.cjk_bigrams,
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Analyzer:
        if settings.get("type") != "standard" or settings.get("version") not in (1, 2):
            raise ConfigError(f"unknown analyser settings {dict(settings)!r}")
        analyzer = cls(
            stopwords=settings["stopwords"],
            stemmer=settings["stemmer"],
            split_identifiers=settings["split_identifiers"],
            cjk_bigrams=settings["cjk_bigrams"],
        )
        analyzer._digit_parts = settings["version"] == 1
        return analyzer

    # -- analysis ------------------------------------------------------------
    def __call__(self, text: str) -> list[str]:
        if self.custom is not None:
            return [t for t in self.custom(text) if t]
        return list(chain.from_iterable(map(self.cache.__getitem__, find_words(text))))

    def terms_of(self, raw: str) -> tuple[str, ...]:
        """The terms of one raw word (as :func:`find_words` yields them); cached."""
        return self.cache[raw]

    def expand(self, raw: str) -> tuple[str, ...]:
        """:meth:`terms_of`, analysed now and not kept: for a caller that keeps its own
        table of raw words (a bulk count's), so each new word is stored once, not twice."""
        return self._expand(raw)

    def count(self, words: Sequence[str]) -> Counter[str]:
        """Term frequencies of already split raw words."""
        if self.custom is not None:
            return Counter(t for t in self.custom(" ".join(words)) if t)
        return Counter(chain.from_iterable(map(self.cache.__getitem__, words)))

    def _word(self, low: str) -> str | None:
        cached = self._word_cache.get(low, _MISSING)
        if cached != _MISSING:
            return cached
        return self._new_word(low)

    def _new_word(self, low: str) -> str | None:
        """:meth:`_word` of a word not in the cache: analysed and kept."""
        if low in self._stop:
            term = None
        else:
            stem = self._stem
            # The stemmer leaves words with digits or underscores as they are:
            # skipping it for them saves most of the calls on code.
            term = stem(low) if stem is not None and low.isascii() and (low.isalpha() or "'" in low) else low
        if len(self._word_cache) >= _MAX_CACHE:
            self._word_cache.clear()
        self._word_cache[low] = term
        return term

    def _expand(self, raw: str) -> tuple[str, ...]:
        # Each raw word of a corpus passes here once (then it is cached), but a big corpus
        # holds hundreds of thousands of them, most of them identifiers: the word cache
        # is read inline (a method call per part cost about as much as the rest).
        first = raw[0]
        if first >= "\u3040" and _is_cjk(first):
            if not self.cjk_bigrams or len(raw) == 1:
                return (raw,)
            return tuple(raw[i : i + 2] for i in range(len(raw) - 1))
        low = raw.casefold()
        cached = self._word_cache.get
        if not self.split_identifiers or (raw.isalpha() and (raw.islower() or raw.isupper() or raw[1:].islower())):
            # Plain word ("word", "Word"): the common case.
            term = cached(low, _MISSING)
            if term == _MISSING:
                term = self._new_word(low)
            return (term,) if term else ()
        ident_part = _ident_part()
        # The part pattern never matches "_", so underscores separate parts by themselves.
        parts = ident_part.findall(raw)
        whole = cached(low, _MISSING)
        if whole == _MISSING:
            whole = self._new_word(low)
        if len(parts) <= 1 and "_" not in raw:
            return (whole,) if whole else ()
        # The whole identifier is stemmed like a plain word, so the lowercase
        # query "assertequal" meets the code token "assertEqual".
        out = [whole] if whole else []
        keep_digits = self._digit_parts
        for part in parts:
            if not keep_digits and part.isdigit():
                continue  # "2" of "hunter2prod": the whole identifier is term enough
            part = part.casefold()
            term = cached(part, _MISSING)
            if term == _MISSING:
                term = self._new_word(part)
            if term and term != whole:
                out.append(term)
        return tuple(out)
