"""Topic keywords (docs/inputs.md "Keywords", core/keywords.py): whole words in any case, and under a
topic's default rule their regular plurals and possessives, derived from the keyword alone; never a
longer word; keywords in scripts without those inflections match exactly as written."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.core.keywords import keyword_forms, keyword_pattern
from nexus_assets.core.models import ExtractionPolicy, Topic

LETTERS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=10)
SUFFIXES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6)


def matched(keyword: str, text: str, forms="inflected") -> str | None:
    found = keyword_pattern((keyword,), forms).search(text)
    return found.group() if found else None


# The rule, example by example


@pytest.mark.parametrize(
    ("keyword", "said"),
    [
        ("simulation", "simulations"), ("simulation", "Simulation's"), ("simulation", "simulations'"),
        ("simulation", "simulation\u2019s"), ("sync", "SYNCS"), ("bus", "buses"), ("bus", "bus'"), ("box", "boxes"),
        ("church", "churches"), ("wish", "wishes"), ("potato", "potatoes"), ("photo", "photos"),
        ("policy", "policies"), ("policy", "policies'"), ("Kennedy", "Kennedys"), ("key", "keys"),
        ("on-call", "on-calls"), ("server sync", "server syncs"), ("café", "cafés"), ("API", "APIs"),
    ],
)
def test_a_keyword_matches_its_plurals_and_possessives_as_whole_words(keyword, said):
    assert matched(keyword, f"We discussed the {said} today.") == said


@pytest.mark.parametrize(
    ("keyword", "said"),
    [
        ("sim", "simulation"), ("sim", "simulations"), ("sync", "async"), ("sync", "syncing"), ("sync", "synced"),
        ("rat", "rates"), ("plan", "planes"), ("key", "keies"), ("box", "boxs"), ("bus", "buss"), ("brick", "bricklayer"),
        ("policy", "policie"), ("note", "notees"),
    ],
)
def test_a_keyword_never_matches_a_longer_word(keyword, said):
    assert matched(keyword, f"We discussed the {said} today.") is None


@pytest.mark.parametrize("keyword", ["同步", "データ", "синхронизация", "συγχρονισμός", "مزامنة", "c++", "v5", "c#"])
def test_a_keyword_that_does_not_end_in_a_latin_letter_is_matched_exactly_as_written(keyword):
    assert keyword_forms(keyword) == (keyword,)
    assert matched(keyword, f"({keyword}) here") == keyword
    assert matched(keyword, f"({keyword}s) here") is None


def test_the_exact_rule_matches_the_words_as_written_only():
    assert keyword_forms("simulation", "exact") == ("simulation",)
    assert matched("simulation", "three simulations", "exact") is None
    assert matched("simulation", "the simulation ran", "exact") == "simulation"
    # A possessive was always a match of the bare word: the apostrophe is not a word character.
    assert matched("simulation", "the simulation's end", "exact") == "simulation"


def test_the_forms_are_derived_from_the_keyword_alone_in_a_fixed_order():
    assert keyword_forms("bus") == ("bus", "buses", "bus's", "bus\u2019s", "bus'", "bus\u2019", "buses'", "buses\u2019")
    assert keyword_forms("policy")[:3] == ("policy", "policys", "policies")
    assert keyword_forms("  sync ") == keyword_forms("sync")
    assert keyword_forms("   ") == ()


def test_a_topic_matches_its_keywords_by_its_rule():
    def topic(**extra) -> Topic:
        return Topic(topic_id="t", display_name="T", **extra,
                     extraction_policy=ExtractionPolicy(scope_description="x", required_keywords=("simulation",)))

    assert topic().keyword_forms == "inflected" and topic().keyword_pattern().search("two simulations")
    assert topic(keyword_forms="exact").keyword_pattern().search("two simulations") is None
    # The default is left out of the definition's JSON, so topics that do not say hash as before.
    assert "keyword_forms" not in topic().model_dump() and topic(keyword_forms="exact").model_dump()["keyword_forms"] == "exact"


# Properties


@settings(max_examples=300, deadline=None)
@given(keyword=LETTERS)
def test_every_form_matches_whole_and_in_any_case(keyword):
    for form in keyword_forms(keyword):
        assert matched(keyword, f"({form})") == form
        assert matched(keyword, f"{form.upper()}.") == form.upper()
        assert matched(keyword, f"x{form}") is None  # never the end of a longer word


@settings(max_examples=300, deadline=None)
@given(keyword=LETTERS)
def test_the_plural_and_possessive_endings_match(keyword):
    plural = keyword + ("es" if keyword.endswith(("s", "x", "z", "ch", "sh")) else "s")
    for said in (plural, keyword + "'s", keyword + "\u2019s", plural + "'"):
        assert matched(keyword, f"({said})") == said


@settings(max_examples=500, deadline=None)
@given(keyword=LETTERS, suffix=SUFFIXES)
def test_a_longer_word_matches_only_when_it_is_a_form(keyword, suffix):
    word = keyword + suffix
    assert matched(keyword, f"({word})") == (word if word in keyword_forms(keyword) else None)


KEYWORD_ALPHABET = "abcksS -+_.!é\u017f\u212a\u0130\u0131Kk\u00df'\u2019"


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet=KEYWORD_ALPHABET, max_size=40),
    keywords=st.lists(st.text(alphabet="abcksy+-\u00e9\u00df", min_size=1, max_size=4), min_size=1, max_size=3),
    forms=st.sampled_from(["inflected", "exact"]),
)
def test_keyword_search_finds_what_the_whole_word_regex_of_the_forms_finds(text, keywords, forms):
    """The ASCII short-cut in front of the regex never changes its answer: not on ASCII text, and
    not on text whose characters match ASCII letters only under Unicode case folding ('ſ', 'K')."""
    pattern = keyword_pattern(tuple(keywords), forms)
    words = {f for k in keywords for f in keyword_forms(k, forms)}
    if not words:
        assert pattern is None
        return
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=lambda w: (-len(w), w)))
    reference = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE).search(text)
    found = pattern.search(text)
    assert (found.span() if found else None) == (reference.span() if reference else None)


def test_keyword_search_on_non_ascii_text_uses_case_folding():
    assert keyword_pattern(("sync",)).search("we \u017fync nightly")  # LATIN SMALL LETTER LONG S
    assert keyword_pattern(("kit",)).search("a \u212ait")  # KELVIN SIGN
    assert keyword_pattern(("sync",)).search("we SYNC nightly")
    assert keyword_pattern(("sync",)).search("async only") is None
    assert keyword_pattern(("sync",)).search("two \u017fyncs") is not None
