"""Noticing an answer that repeats itself.

Small base models held to a block's words often copy one table cell or
phrase again and again (``640 | 640 | 640 | ...``) until the token limit.  An
answer ending in one piece written :data:`REPEATS` times in a row, or in a
phrase of :data:`PHRASE_WORDS` words or more written twice, brings nothing
new: the caller stops it there.
"""

from __future__ import annotations

__all__ = ["PHRASE_WORDS", "REPEATS", "loops_at_end", "phrase_repeats_at_end", "repeats_at_end"]

# Four copies in a row: two or three occur in real text ("very, very", "a | a | b" in a table row).
REPEATS = 4
# Five words twice in a row: a short answer does not say one clause twice ("it is what it is" repeats two).
PHRASE_WORDS = 5


def repeats_at_end(text: str, repeats: int = REPEATS) -> bool:
    """Whether ``text`` ends with one piece, holding a letter or digit, ``repeats`` times in a row."""
    end = len(text)
    for unit in range(1, end // repeats + 1):
        piece = text[end - unit :]
        if any(ch.isalnum() for ch in piece) and all(
            text[end - (i + 1) * unit : end - i * unit] == piece for i in range(1, repeats)
        ):
            return True
    return False


def phrase_repeats_at_end(text: str, min_words: int = PHRASE_WORDS) -> bool:
    """Whether ``text``'s complete words (not one still being written) end with a phrase written twice."""
    words = text.split()
    if text and not text[-1].isspace():
        words = words[:-1]
    n = len(words)
    return any(words[n - unit :] == words[n - 2 * unit : n - unit] for unit in range(min_words, n // 2 + 1))


def loops_at_end(text: str) -> bool:
    """Whether ``text`` has turned into a loop: :func:`repeats_at_end` or :func:`phrase_repeats_at_end`."""
    return repeats_at_end(text) or phrase_repeats_at_end(text)
