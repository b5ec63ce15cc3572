"""English stemming: the Snowball English ("Porter2") algorithm in plain Python.

This follows the algorithm as currently published by the Snowball project
(snowballstem.org, ``algorithms/english``), i.e. the revision shipped with
Snowball 3.x, which differs from the 2006 text in a few places:

* R1 may be fixed by a prefix: ``gener``, ``commun``, ``arsen``, ``past``,
  ``univers``, ``later``, ``emerg``, ``organ``, ``inter``;
* a "short syllable" also includes a word ending in ``past`` (pasted/pasting);
* step 1b keeps ``succeed``/``proceed``/``exceed``, turns ``dying``-like words
  (consonant + ``ying``) into ``die``, and leaves ``inning``, ``outing``,
  ``canning``, ``herring``, ``earring``, ``evening`` alone -- the job the old
  "invariant after step 1a" list used to do; a doubled consonant after
  ``a``/``e``/``o`` in a three letter word (``add``, ``egg``, ``off``) stays;
* step 2 maps ``-ogist`` to ``-og`` (geologist/geology).

The reference implementation (the ``snowballstemmer`` package) is used only
by the test suite; this module is self-contained so the library keeps its
zero-dependency promise.

Input is expected to be lowercased already.  Words made of anything but
``a-z`` and the ASCII apostrophe are returned unchanged: the rules are
written for English letters only, and running them over digits, other
scripts or accented letters would chop arbitrary "suffixes" off identifiers,
numbers and foreign words (``mp3s``, ``año``) and conflate tokens that have
nothing in common.  Keeping such tokens intact is the safer failure mode for
retrieval.  Callers that want curly apostrophes (U+2019) treated as ``'``
must map them before calling.

Speed (it runs once per distinct token, over vocabularies of 10^5 words):
no regular expressions; suffixes are dispatched on the last one or two
letters with plain comparisons and dict look-ups, and the R1/R2 boundaries
come from one ``bytes.translate`` into a vowel/consonant "shape" searched
with ``bytes.find``, memoised per shape.  ``bench/bench_stemmer.py``
measures it (about 3 us a word on the 2-core development machine).
"""

from __future__ import annotations

__all__ = ["stem"]

# Vowels for the purposes of the algorithm.  "Y" (a y acting as a consonant,
# marked in the prelude) and the apostrophe are consonants.
_VOWELS = "aeiouy"
# Consonants that do not end a short syllable (``non-v_WXY`` in the spec).
_VOWELS_WXY = "aeiouywxY"
_VALID_LI = "cdeghkmnrt"
_ADD_E = frozenset(("at", "bl", "iz"))
_DOUBLES = frozenset(("bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt"))


def _shape_table(chars: bytes) -> bytes:
    return bytes.maketrans(chars, bytes(b"v"[0] if c in b"aeiouy" else b"c"[0] for c in chars))


# A word's "shape": each vowel becomes "v", each other letter or apostrophe
# "c".  Finding "vc" in it is the spec's "gopast v gopast non-v", done in C.
# Any other character (upper case, digit, the bytes of a non-ASCII letter)
# is left as it is, so a shape made only of "c" and "v" also proves the word
# is all a-z and apostrophes.  The second table is for after the prelude,
# when a consonant y has become "Y".
_SHAPE_IN = _shape_table(b"abcdefghijklmnopqrstuvwxyz'")
_SHAPE = _shape_table(b"abcdefghijklmnopqrstuvwxyzY'")

# Region boundaries depend only on the shape, and shapes repeat a lot (about
# 1,100 distinct ones for Cranfield's 6,500 words, 9,000 for 56,000 words of
# the Python stdlib), so they are memoised: shape -> (p1, p2, first vowel),
# for words without an R1 prefix.  Bounded so a stream of junk tokens cannot
# grow it without limit (a few MB at most).
_REGIONS: dict[bytes, tuple[int, int, int]] = {}
_MAX_REGIONS = 1 << 15

# Whole words with a fixed stem, checked before anything else.
_EXCEPTIONS: dict[str, str] = {
    "skis": "ski",
    "skies": "sky",
    "idly": "idl",
    "gently": "gentl",
    "ugly": "ugli",
    "early": "earli",
    "only": "onli",
    "singly": "singl",
    # left as they are
    "sky": "sky",
    "news": "news",
    "howe": "howe",
    "atlas": "atlas",
    "cosmos": "cosmos",
    "bias": "bias",
    "andes": "andes",
}

# Prefixes that fix R1 (so "generous" and "general" keep "gener").
_R1_PREFIXES = (
    "gener",
    "commun",
    "arsen",
    "past",
    "univers",
    "later",
    "emerg",
    "organ",
    "inter",
)

# The prefixes' first four letters are all different: one dict look-up
# finds the only candidate.
_R1_BY_HEAD = {prefix[:4]: prefix for prefix in _R1_PREFIXES}

# Step 1b: what precedes "-ing" when the word must stay as it is.
_ING_KEEP = frozenset(("even", "cann", "inn", "earr", "herr", "out"))
# Step 1b: what precedes "-eed"/"-eedly" when the word must stay as it is.
_EED_KEEP = frozenset(("succ", "proc", "exc"))

# Markers for step 2 rules that are not a plain replacement.
_LI = "\x00li"  # delete "li" if preceded by a valid li-ending
_OGI = "\x00ogi"  # "ogi" -> "og" if preceded by "l"
_R2_DELETE = "\x00r2"  # step 3 "ative": delete if in R2
_ION = "\x00ion"  # step 4 "ion": delete if preceded by "s" or "t"


def _suffix_table(rules: dict[str, str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Group rules by their last two letters, longest suffix first.

    The spec always acts on the *longest* matching suffix and never falls
    back to a shorter one, so the first ``endswith`` hit in each bucket is
    the one to apply.
    """
    buckets: dict[str, list[tuple[str, str]]] = {}
    for suffix, action in rules.items():
        buckets.setdefault(suffix[-2:], []).append((suffix, action))
    return {key: tuple(sorted(items, key=lambda item: -len(item[0]))) for key, items in buckets.items()}


_STEP2 = _suffix_table(
    {
        "tional": "tion",
        "enci": "ence",
        "anci": "ance",
        "abli": "able",
        "entli": "ent",
        "izer": "ize",
        "ization": "ize",
        "ational": "ate",
        "ation": "ate",
        "ator": "ate",
        "alism": "al",
        "aliti": "al",
        "alli": "al",
        "fulness": "ful",
        "fulli": "ful",
        "ousli": "ous",
        "ousness": "ous",
        "iveness": "ive",
        "iviti": "ive",
        "biliti": "ble",
        "bli": "ble",
        "ogist": "og",
        "ogi": _OGI,
        "lessli": "less",
        "li": _LI,
    }
)

_STEP3 = _suffix_table(
    {
        "tional": "tion",
        "ational": "ate",
        "alize": "al",
        "icate": "ic",
        "iciti": "ic",
        "ical": "ic",
        "ful": "",
        "ness": "",
        "ative": _R2_DELETE,
    }
)

_STEP4 = _suffix_table(
    {
        suffix: ""
        for suffix in (
            "al",
            "ance",
            "ence",
            "er",
            "ic",
            "able",
            "ible",
            "ant",
            "ement",
            "ment",
            "ent",
            "ism",
            "ate",
            "iti",
            "ous",
            "ive",
            "ize",
        )
    }
    | {"ion": _ION}
)


def _ends_short_syllable(word: str) -> bool:
    """True if ``word`` ends in a short syllable (``shortv`` in the spec)."""
    n = len(word)
    if n >= 3:
        if word[-1] not in _VOWELS_WXY and word[-2] in _VOWELS and word[-3] not in _VOWELS:
            return True
    elif n == 2 and word[0] in _VOWELS and word[1] not in _VOWELS:
        return True
    return word.endswith("past")


def stem(word: str) -> str:
    """Return the Snowball English (Porter2) stem of a lowercased word.

    Words of two characters or fewer, and words with any character outside
    ``a-z`` and ``'``, come back unchanged.

    >>> [stem(w) for w in ("running", "generously", "skies", "dying")]
    ['run', 'generous', 'sky', 'die']
    """
    if len(word) <= 2:
        return word
    fixed = _EXCEPTIONS.get(word)
    if fixed is not None:
        return fixed
    try:
        shape = word.encode().translate(_SHAPE_IN)
    except UnicodeEncodeError:  # lone surrogates
        return word

    # --- prelude -------------------------------------------------------
    w = word
    y_found = False
    if "y" in w or "'" in w:
        if shape.strip(b"cv"):
            return word  # not a-z and apostrophes only
        if w[0] == "'":
            w = w[1:]
        if "y" in w:
            # A y that starts the word or follows a vowel is a consonant:
            # mark it "Y".  Left to right, so in "ayy" only the first y is.
            chars = list(w)
            if chars[0] == "y":
                chars[0] = "Y"
            i = w.find("y", 1)
            while i != -1:
                if chars[i - 1] in _VOWELS:
                    chars[i] = "Y"
                i = w.find("y", i + 1)
            w = "".join(chars)
            y_found = "Y" in w
        shape = w.encode().translate(_SHAPE)

    # --- regions -------------------------------------------------------
    n = len(w)
    regions = _REGIONS.get(shape)
    if regions is None:
        if shape.strip(b"cv"):
            return word  # not a-z and apostrophes only
        p1 = shape.find(b"vc")
        p1 = n if p1 == -1 else p1 + 2
        p2 = shape.find(b"vc", p1)
        p2 = n if p2 == -1 else p2 + 2
        # "The part before index X contains a vowel" is first_vowel < X.
        first_vowel = shape.find(b"v")
        if first_vowel == -1:
            first_vowel = n
        if len(_REGIONS) < _MAX_REGIONS:
            _REGIONS[shape] = (p1, p2, first_vowel)
    else:
        p1, p2, first_vowel = regions
    prefix = _R1_BY_HEAD.get(w[:4])
    if prefix is not None and w.startswith(prefix):
        p1 = len(prefix)
        p2 = shape.find(b"vc", p1)
        p2 = n if p2 == -1 else p2 + 2

    # --- step 1a ---------------------------------------------------------
    if "'" in w:
        if w.endswith("'"):
            w = w[:-3] if w.endswith("'s'") else w[:-1]
        elif w.endswith("'s"):
            w = w[:-2]
        if not w:
            return w
    last = w[-1]
    if last == "s":
        before = w[-2:-1]
        if before == "s" or before == "u":
            pass  # "-ss", "-us" stay
        elif before == "e" and w.endswith("sses"):
            w = w[:-2]
        elif before == "e" and w.endswith("ies"):
            w = w[:-3] + ("i" if len(w) > 4 else "ie")
        elif first_vowel < len(w) - 2:
            # The letter right before the "s" does not count ("gas", "this").
            w = w[:-1]
    elif last == "d" and w.endswith("ied"):
        w = w[:-3] + ("i" if len(w) > 4 else "ie")

    # --- step 1b ---------------------------------------------------------
    cut = 0  # length of an "ed"-class suffix to delete, if any
    last = w[-1]
    if last == "d":
        if w.endswith("eed"):
            start = len(w) - 3
            if start >= p1 and w[:start] not in _EED_KEEP:
                w = w[:-1]
        elif w.endswith("ed"):
            cut = 2
    elif last == "y":
        if w.endswith("eedly"):
            start = len(w) - 5
            if start >= p1 and w[:start] not in _EED_KEEP:
                w = w[:-3]
        elif w.endswith("edly"):
            cut = 4
        elif w.endswith("ingly"):
            cut = 5
    elif last == "g" and w.endswith("ing"):
        head = w[:-3]
        if head in _ING_KEEP:
            pass
        elif len(head) == 2 and head[1] == "y" and head[0] not in _VOWELS:
            w = head[0] + "ie"
        else:
            cut = 3
    if cut and first_vowel < len(w) - cut:
        w = w[:-cut]
        tail = w[-2:]
        if tail in _ADD_E:
            w += "e"
        elif tail in _DOUBLES:
            if not (len(w) == 3 and w[0] in "aeo"):
                w = w[:-1]
        elif len(w) == p1 and _ends_short_syllable(w):
            w += "e"

    # --- step 1c ---------------------------------------------------------
    if len(w) > 2 and w[-1] in "yY" and w[-2] not in _VOWELS:
        w = w[:-1] + "i"

    # --- step 2 ----------------------------------------------------------
    # Every suffix of steps 2-4 has at least two letters: when the last two
    # are not inside R1 (R2), nothing can match and the look-up is skipped.
    rules = _STEP2.get(w[-2:]) if len(w) - 2 >= p1 else None
    if rules is not None:
        for suffix, action in rules:
            if w.endswith(suffix):
                start = len(w) - len(suffix)
                if start >= p1:
                    if action is _LI:
                        if start > 0 and w[start - 1] in _VALID_LI:
                            w = w[:start]
                    elif action is _OGI:
                        if start > 0 and w[start - 1] == "l":
                            w = w[:start] + "og"
                    else:
                        w = w[:start] + action
                break

    # --- step 3 ----------------------------------------------------------
    rules = _STEP3.get(w[-2:]) if len(w) - 2 >= p1 else None
    if rules is not None:
        for suffix, action in rules:
            if w.endswith(suffix):
                start = len(w) - len(suffix)
                if start >= p1:
                    if action is _R2_DELETE:
                        if start >= p2:
                            w = w[:start]
                    else:
                        w = w[:start] + action
                break

    # --- step 4 ----------------------------------------------------------
    rules = _STEP4.get(w[-2:]) if len(w) - 2 >= p2 else None
    if rules is not None:
        for suffix, action in rules:
            if w.endswith(suffix):
                start = len(w) - len(suffix)
                if start >= p2:
                    if action is _ION:
                        if start > 0 and w[start - 1] in "st":
                            w = w[:start]
                    else:
                        w = w[:start]
                break

    # --- step 5 ----------------------------------------------------------
    last = w[-1]
    if last == "e":
        k = len(w) - 1
        if k >= p2 or (k >= p1 and not _ends_short_syllable(w[:k])):
            w = w[:k]
    elif last == "l":
        k = len(w) - 1
        if k >= p2 and w[k - 1 : k] == "l":
            w = w[:k]

    # --- postlude ----------------------------------------------------------
    if y_found:
        w = w.replace("Y", "y")
    return w
