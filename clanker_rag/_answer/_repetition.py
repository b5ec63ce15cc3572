"""Noticing an answer that repeats itself.

Small base models, held to a block's words by the copying grammar, often
copy one table cell or phrase again and again (``640 | 640 | 640 | ...``)
until the token limit.  Once the end of the answer is one piece written
:data:`REPEATS` times in a row, nothing new is coming: the caller stops the
generation there instead of streaming hundreds of copies.  A loop over a
whole clause ("runs the app using the file that runs the app using the file
that ...") is longer than any piece looked for that way; a phrase of
:data:`PHRASE_WORDS` words or more written twice in a row ends an answer too.
"""

from __future__ import annotations

__all__ = ["MAX_UNIT", "PHRASE_WORDS", "REPEATS", "loops_at_end", "phrase_repeats_at_end", "repeats_at_end"]

# Four copies in a row: two or three also occur in real text ("very, very",
# "a | a | b" in a table row), four of one piece of a short answer do not.
REPEATS = 4
# The longest piece looked for, in characters: a table row's cell or a short clause.
MAX_UNIT = 80
# Five words twice in a row: a short answer does not say one clause twice ("on and on" is
# three words; "it is what it is" repeats two), a model copying itself in a circle does.
PHRASE_WORDS = 5


def repeats_at_end(text: str, repeats: int = REPEATS, max_unit: int = MAX_UNIT) -> bool:
    """Whether ``text`` ends with one piece, holding a letter or digit, ``repeats`` times in a row.

    >>> repeats_at_end("It is 640 | 640 | 640 | 640 | ")
    True
    >>> repeats_at_end("It is 640 | 640 | 640 | ")
    False
    """
    end = len(text)
    for unit in range(1, min(max_unit, end // repeats) + 1):
        piece = text[end - unit :]
        # The slice comparisons run in C; the letter-or-digit test only for a repeat found.
        if all(text[end - (i + 1) * unit : end - i * unit] == piece for i in range(1, repeats)) and any(
            ch.isalnum() for ch in piece
        ):
            return True
    return False


def phrase_repeats_at_end(text: str, min_words: int = PHRASE_WORDS) -> bool:
    """Whether ``text``'s complete words end with a phrase of at least ``min_words`` words written twice.

    A word still being written (``text`` does not end with whitespace) is not
    looked at: it may grow into another word.

    >>> phrase_repeats_at_end("it runs the app from the file that runs the app from the file that ")
    True
    >>> phrase_repeats_at_end("it runs the app from the file that runs the app from the file th")
    False
    """
    words = text.split()
    if text and not text[-1].isspace():
        words = words[:-1]
    n = len(words)
    return any(words[n - unit :] == words[n - 2 * unit : n - unit] for unit in range(min_words, n // 2 + 1))


def loops_at_end(text: str) -> bool:
    """Whether ``text`` has turned into a loop: :func:`repeats_at_end` or :func:`phrase_repeats_at_end`."""
    return repeats_at_end(text) or phrase_repeats_at_end(text)
