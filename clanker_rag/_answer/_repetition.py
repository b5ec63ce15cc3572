"""Noticing an answer that repeats itself.

Small base models, held to a block's words by the copying grammar, often
copy one table cell or phrase again and again (``2000 | 2000 | 2000 | ...``)
until the token limit.  Once the end of the answer is one piece written
:data:`REPEATS` times in a row, nothing new is coming: the caller stops the
generation there instead of streaming hundreds of copies.
"""

from __future__ import annotations

__all__ = ["MAX_UNIT", "REPEATS", "repeats_at_end"]

# Four copies in a row: two or three also occur in real text ("very, very",
# "a | a | b" in a table row), four of one piece of a short answer do not.
REPEATS = 4
# The longest piece looked for, in characters: a table row's cell or a short clause.
MAX_UNIT = 80


def repeats_at_end(text: str, repeats: int = REPEATS, max_unit: int = MAX_UNIT) -> bool:
    """Whether ``text`` ends with one piece, holding a letter or digit, ``repeats`` times in a row.

    >>> repeats_at_end("It is 2000 | 2000 | 2000 | 2000 | ")
    True
    >>> repeats_at_end("It is 2000 | 2000 | 2000 | ")
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
