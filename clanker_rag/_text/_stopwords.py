"""English stop words: the very frequent function words lexical search ignores.

The idea and rough extent follow the classic stop lists used with the
Snowball stemmers and in NLTK (the Snowball project's ``english/stop.txt``
and NLTK's ``stopwords`` corpus): pronouns, forms of *be*/*have*/*do*,
articles, conjunctions, common prepositions and adverbs, plus the pieces a
tokenizer leaves when it splits English contractions at the apostrophe
("don't" -> "don", "t"; "it's" -> "it", "s"; "we'll" -> "we", "ll").  The
whole contractions are listed too, for tokenizers that keep the apostrophe.

Words are lowercase and unstemmed: filter tokens *before* stemming, since
stemming can map a content word onto a stop word's stem and vice versa.
The list is deliberately conservative -- no domain words, no numbers, and
none of the modals or pronouns that double as content words ("may", "must",
"mine", "us") -- because a stop word can never be found by a query.
"""

from __future__ import annotations

__all__ = ["ENGLISH_STOPWORDS"]

_PRONOUNS = """
i me my myself we our ours ourselves you your yours yourself
yourselves he him his himself she her hers herself it its itself they them
their theirs themselves
"""

_QUESTION_AND_DEMONSTRATIVE = """
what which who whom whose this that these those
"""

_AUXILIARIES = """
am is are was were be been being have has had having do does did doing
can will would should
"""

_ARTICLES_AND_CONJUNCTIONS = """
a an the and but if or because as until while nor than so
"""

_PREPOSITIONS = """
of at by for with about against between into through during before after
above below to from up down in out on off over under
"""

_ADVERBS_AND_DETERMINERS = """
again further then once here there when where why how all any both each few
more most other some such no not only own same too very just now
"""

# What a split at the apostrophe leaves behind.
_CONTRACTION_PIECES = """
s t d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma
mightn mustn needn shan shouldn wasn weren won wouldn don
"""

_CONTRACTIONS = """
don't doesn't didn't isn't aren't wasn't weren't hasn't haven't hadn't
won't wouldn't shouldn't can't couldn't
it's that's that'll you're you've you'll you'd she's should've
"""

ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    (
        _PRONOUNS
        + _QUESTION_AND_DEMONSTRATIVE
        + _AUXILIARIES
        + _ARTICLES_AND_CONJUNCTIONS
        + _PREPOSITIONS
        + _ADVERBS_AND_DETERMINERS
        + _CONTRACTION_PIECES
        + _CONTRACTIONS
    ).split()
)
