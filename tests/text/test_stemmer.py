"""clanker_rag._text._stemmer against the reference Snowball implementation.

The expected values come from the ``snowballstemmer`` package (pure-Python
code generated from the official ``english.sbl``), never from our stemmer.
Porter2 is not idempotent (stem(stem(w)) may differ from stem(w)), so only
equality with the reference is asserted.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# Test-only dependency (pip install 'snowballstemmer>=3.1'); a missing one
# must fail the run, not skip it.
from snowballstemmer.english_stemmer import EnglishStemmer  # type: ignore[import-untyped]

from clanker_rag._text._stemmer import stem
from tests.helpers._profiles import examples

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("CLANKER_RAG_SHARED", REPO_ROOT.parent / "shared"))
CRANFIELD = SHARED / "datasets" / "cranfield" / "corpus.jsonl"

# The algorithm revision implemented here (``inter``/``past``/... R1 prefixes,
# ``-ogist``) is the one shipped from Snowball 3.1 on; older references stem
# e.g. "international" differently.
MIN_REFERENCE = (3, 1)

_REFERENCE = EnglishStemmer()


def reference(word: str) -> str:
    result: str = _REFERENCE.stemWord(word)
    return result


def test_reference_is_recent_enough() -> None:
    version = importlib.metadata.version("snowballstemmer")
    parts = tuple(int(p) for p in version.split(".")[:2])
    assert parts >= MIN_REFERENCE, (
        f"snowballstemmer {version} implements an older English algorithm; pip install 'snowballstemmer>=3.1'"
    )


# Words chosen to exercise every rule and special case of the algorithm.
TRICKY = """
a i an as is at be by we us ox
sky skies skis news howe atlas cosmos bias andes idly gently ugly early only
singly dying lying tying vying eying spying
inning innings outing outings canning herring herrings earring earrings
evening evenings proceed proceeds proceeded proceeding succeed succeeded
succeeding exceed exceeds exceeded exceedingly agreed agreedly feed feeds
bleed bleeding breed guaranteed disagreed freed freedly heedless
generate generates generated generating generation generations general
generally generality generosity generous generously generic genericity
communism communist community communities communication communicate commune
arsenal arsenals arsenic arsenical past paste pasted pasting pastes pastime
universe universal universally university universities later lateral
laterally latest latter emerge emerged emergency emergent emerging organ
organic organism organize organization organizational intern internal
internally international interval intervals interfere interference
interest interesting interested
caress caresses ponies ties cries dies lies flies tries tied cried pied
died spied gas gases this kiwis bus buses gaps cats dogs its ours yes
sses ss boss bosses stress stresses actress actresses glass glasses
luxurious status focus consensus campus virus viruses
hopping hopped hoping hoped running runner runs ran sitting sat fitted
fizzed fizzing filing filled falling failing tanned tanning planned
planning controlled controlling rolled rolling add adding added egg
egged err erred off offed ebb ebbed inn bb dd
luxuriate luxuriating luxuriated conflated conflating troubled troubling
sized sizing bled hoped feeling feelings
cry crying cried say saying says said boy boys toy toys buy buying
yell yelling yellow yes yesterday you young youth yacht
sayyid ayy yyy eyyy played playing player enjoy enjoyed enjoying
annoyance destroy destroyed employ employment employer
happy happier happiest happily happiness by ly fly flying flies
reply replied replies apply applied applies supply supplied supplies
deny denied denies dye dyes dyed
quickly quietly slowly friendly lovely lonely family rely truly fully
nobly doubly simply humbly really finally
hopefully hopefulness carelessly carelessness joyfully usefulness
relational conditional rational valenci valency hesitancy digitizer
conformabli radically differently vileli analogousli
conformably conformable vietnamization predication operator feudalism
decisiveness hopefulness callousness formality sensitivity sensibility
geologist geologists geology geological biologist biology apologist
analogy analogies anthology theology tautology etymology archaeology
triplicate formative formalize electricity electrical electrically
hopeful goodness
revival allowance inference airliner gyroscopic adjustable defensible
irritant replacement adjustment dependent adoption homologou
communism activate angularity homologous effective bowdlerize
adoption adoptions suggestion suggestions question fusion motion
erosion cession
probate rate cease sense prove hinge
roll ball bell tell controlled controll fulfill
consign consigned consigning consignment consist consisted consistency
consistent consistently consisting consists consolation consolations
consolatory console consoled consoles consolidate consolidated
consolidating consoling consolingly consols consonant consort consorted
consorting conspicuous conspicuously conspiracy conspirator conspirators
conspire conspired conspiring constable constables constance constancy
constant knack knackeries knacks knag knave knaves knavish kneaded
kneading knee kneel kneeled kneeling kneels knees knell knelt knew knick
knif knife knight knightly knights knit knits knitted knitting knives
knob knobs knock knocked knocker knockers knocking knocks knopp knot
knots
abandon abandoned abandonment abbey abilities ability aboard
aeroplane aerodynamic aerodynamics aerofoil airfoil airfoils supersonic
hypersonic subsonic transonic turbulence turbulent laminar viscous
viscosity boundary boundaries layer layers separation separated
freestream slipstream propeller propellers
dr mr mrs etc ie eg
yielding yielded sayings sprayed strayed preyed obeyed conveyed
skiing skied
cat's cats' o'neill o'neills rock'n'roll 'tis don't won't can't
isn't shouldn't y'all ma'am 'n' '' ''' ' 's 's' ''s ''s'
"""


def _tricky_words() -> list[str]:
    words = sorted(set(TRICKY.split()))
    assert len(words) > 300
    return words


@pytest.mark.parametrize("word", _tricky_words())
def test_tricky_words_match_reference(word: str) -> None:
    assert stem(word) == reference(word)


def test_known_stems_from_the_spec() -> None:
    # Spot checks straight from the algorithm's description, so a broken
    # reference package cannot make the suite vacuous.
    expected = {
        "generously": "generous",
        "communism": "communism",
        "arsenal": "arsenal",
        "dying": "die",
        "skies": "sky",
        "news": "news",
        "succeeded": "succeed",
        "caresses": "caress",
        "ties": "tie",
        "cries": "cri",
        "gas": "gas",
        "gaps": "gap",
        "kiwis": "kiwi",
        "hopping": "hop",
        "hoping": "hope",
        "luxuriating": "luxuri",
        "cry": "cri",
        "say": "say",
        "by": "by",
        "running": "run",
        "inning": "inning",
        "geologist": "geolog",
    }
    assert {w: stem(w) for w in expected} == expected


def test_every_cranfield_word_matches_reference() -> None:
    assert CRANFIELD.is_file(), f"dataset missing: {CRANFIELD}"
    words: set[str] = set()
    with CRANFIELD.open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            for token in f"{doc.get('title', '')} {doc.get('text', '')}".split():
                token = token.lower()
                if token.isalpha() and token.isascii():
                    words.add(token)
    assert len(words) > 5000
    mismatches = {w: (stem(w), reference(w)) for w in sorted(words) if stem(w) != reference(w)}
    assert mismatches == {}


@pytest.mark.slow
@settings(max_examples=800, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz'", max_size=15))
def test_random_ascii_words_match_reference(word: str) -> None:
    assert stem(word) == reference(word)


# Random words built from the pieces the rules look at, so that suffix and
# prefix rules fire far more often than in uniformly random strings.
_PIECE_TEXT = """
    a e i o u y b d l n s t '
    gener commun arsen past univers later emerg organ inter
    succ proc exc even cann inn earr herr out
    ying ing ed eed edly eedly ingly ly ies ied sses ss us 's 's'
    ational tional enci anci abli entli izer ization ation ator alism aliti
    alli fulness ousli ousness iveness iviti biliti bli ogi ogist fulli lessli li
    alize icate iciti ical ful ness ative
    al ance ence er ic able ible ant ement ment ent ism ate iti ous ive ize ion
    sion tion ll bb dd tt at iz
"""
_PIECES = st.sampled_from(_PIECE_TEXT.split())


@settings(max_examples=examples(1500), deadline=None)
@given(st.lists(_PIECES, max_size=5).map("".join))
def test_suffix_heavy_words_match_reference(word: str) -> None:
    assert stem(word) == reference(word)


@pytest.mark.parametrize("word", ["", "a", "y", "'", "ab", "ys", "'s", "ed"])
def test_short_words_unchanged(word: str) -> None:
    assert stem(word) == word


@pytest.mark.parametrize(
    "word",
    [
        "mp3s",
        "h2o",
        "covid19",
        "café",
        "naïve",
        "año",
        "übersetzungen",
        "работающий",
        "学习",
        "ｒｕｎｎｉｎｇ",
        "running’s",
        "x-rays",
        "Running",
        "YES",
        "Yes",
        "flY",
        "\udc80ing",
        "runs\udcff",
        "RUNNING",
        "hello world",
        "tab\tbed",
    ],
)
def test_words_outside_a_to_z_are_unchanged(word: str) -> None:
    assert stem(word) == word


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz'", max_size=8),
    st.characters(exclude_characters="abcdefghijklmnopqrstuvwxyz'", exclude_categories=()),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz'", max_size=8),
)
def test_any_foreign_character_leaves_word_unchanged(left: str, foreign: str, right: str) -> None:
    word = left + foreign + right
    assert stem(word) == word
