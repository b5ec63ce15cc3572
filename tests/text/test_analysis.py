import pytest

from clanker_rag import Analyzer, KnowledgeBase


def test_unicode_words_and_case_folding():
    an = Analyzer(stemmer=None, stopwords=False)
    assert an("Straße café ÉCOLE") == ["strasse", "café", "école"]
    assert an("naïve—Zürich") == ["naïve", "zürich"]


def test_stopwords_and_stemming_on_by_default():
    an = Analyzer()
    terms = an("The runners were running quickly")
    assert "the" not in terms and "were" not in terms
    assert terms == ["runner", "run", "quick"]


def test_switch_off_and_custom():
    assert Analyzer(stopwords=False, stemmer=None)("The Running") == ["the", "running"]
    custom = Analyzer(custom=lambda s: s.split("|"))
    assert custom("a|b||c") == ["a", "b", "c"]
    assert custom.settings()["type"] == "custom"


def test_code_identifiers_yield_parts():
    an = Analyzer()
    assert an("getUserName") == [*an("getusername"), "get", "user", "name"]
    assert an("get_user_name") == ["get_user_name", "get", "user", "name"]
    # the lowercase spelling of an identifier meets it
    assert an("assertequal")[0] == an("assertEqual")[0]
    assert an("HTTPServer2") == ["httpserver2", "http", "server"]
    # prose query terms meet the code parts
    assert set(an("user names")) <= set(an("getUserName"))


def test_digits_split_out_of_an_identifier_are_not_terms():
    an = Analyzer()
    assert an("hunter2prod") == ["hunter2prod", "hunter", "prod"]
    assert an("sha256_digest") == ["sha256_digest", "sha", "digest"]
    assert an("page 2") == ["page", "2"]  # a number on its own is still a term
    kb = KnowledgeBase(chunk_size=None)
    kb.add_text("the password is hunter2prod", "secret.txt")
    kb.add_text("see the table on page 2 of the report", "report.pdf")
    assert [h.source for h in kb.search("2")] == ["report.pdf"]
    assert [h.source for h in kb.search("hunter2prod")] == ["secret.txt"]
    assert [h.source for h in kb.search("hunter")] == ["secret.txt"]


def test_version_1_analyser_settings_keep_digit_parts():
    # An index written before the change holds those terms: a query must agree with it.
    old = Analyzer.from_settings({**Analyzer().settings(), "version": 1})
    assert old("hunter2prod") == ["hunter2prod", "hunter", "2", "prod"]
    assert Analyzer.from_settings(Analyzer().settings())("hunter2prod") == ["hunter2prod", "hunter", "prod"]
    assert old.settings()["version"] == 1  # saved again, it still says how its terms were made


def test_cjk_runs_become_bigrams():
    an = Analyzer()
    terms = an("東京都に住む")
    assert "東京" in terms and "京都" in terms
    assert max(len(t) for t in terms) <= 2
    long_run = "漢" * 200
    assert max(len(t) for t in an(long_run)) <= 2


def test_settings_round_trip():
    an = Analyzer(stopwords=["Foo", "bar"], stemmer=None, split_identifiers=False)
    again = Analyzer.from_settings(an.settings())
    text = "foo Bar bazQux running"
    assert again(text) == an(text) == ["bazqux", "running"]


from collections import Counter  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from clanker_rag._text._analysis import find_words  # noqa: E402

pieces = st.sampled_from(
    [
        "the",
        "The",
        "getUserName",
        "get_user_name",
        "HTTPServer2",
        "running",
        "x1",
        "東京都",
        "Straße",
        " ",
        "\n",
        ".",
        "_",
        "__init__",
        "a",
        "ÉCOLE",
        "ünïcode",
        "don't",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=40).map("".join))
def test_fast_counting_equals_plain_analysis(text):
    an = Analyzer()
    assert an.count(find_words(text)) == Counter(an(text))


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(st.characters(max_codepoint=127)), st.lists(pieces, max_size=40).map("".join), st.text()))
def test_word_finding_fast_path_equals_the_splitting_regex(text):
    # find_words blanks ASCII gaps with bytes.translate; split_words uses the regex.
    from clanker_rag._text._analysis import split_words

    assert find_words(text) == split_words(text)[1::2]


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(st.characters(max_codepoint=127)), st.lists(pieces, max_size=40).map("".join), st.text()))
def test_piece_offsets_fast_path_equals_the_splitting_regex(text):
    # piece_offsets finds ASCII gaps by blanking the words; the definition is
    # the running length of split_words' pieces.
    from itertools import accumulate

    from clanker_rag._text._analysis import piece_offsets, split_words

    expected = list(accumulate(map(len, split_words(text)), initial=0))
    assert list(piece_offsets(text, find_words(text))) == expected


words_of_code = st.lists(pieces, max_size=12).map("".join).map(find_words).filter(bool)
settings_of_analyzers = st.fixed_dictionaries(
    {
        "stopwords": st.booleans(),
        "stemmer": st.sampled_from(["porter2", None]),
        "split_identifiers": st.booleans(),
        "cjk_bigrams": st.booleans(),
    }
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(words_of_code, max_size=6).map(lambda w: [x for ws in w for x in ws]), settings_of_analyzers)
def test_a_words_terms_do_not_depend_on_the_words_analysed_before(words, options):
    # The word cache is read inline while a word is analysed (its parts): a word's terms must be
    # those of a fresh analyser whatever was cached before, and expand() (not kept) the same as terms_of().
    warm = Analyzer(**options)
    in_turn = [warm.terms_of(w) for w in words]
    assert in_turn == [Analyzer(**options).expand(w) for w in words]
    assert [warm.expand(w) for w in reversed(words)] == in_turn[::-1]
