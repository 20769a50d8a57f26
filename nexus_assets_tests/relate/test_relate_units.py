"""The conflict and relation rules piece by piece (issue 51's mutation benchmark, docs/conflicts.md):
each test pins one rule of `nexus_assets/relate/rules.py` with the smallest pair that takes it, so a
changed comparison, boundary or folding step fails here with the rule's name."""

from __future__ import annotations

import pytest

from nexus_assets.relate import rules
from nexus_assets.relate.rules import (
    Line,
    conflict_between,
    contains_either,
    line_of,
    nearest,
    round_similarity,
    states_no_value,
    states_nothing,
    values_of,
)

# Relations -----------------------------------------------------------------------------------


def test_similarities_are_rounded_to_four_decimals_as_floats():
    assert round_similarity(0.123456) == 0.1235
    assert round_similarity(1) == 1.0 and isinstance(round_similarity(1), float)


def test_containment_is_either_way_after_normalizing():
    assert contains_either("The SYNC runs", "the sync runs every night")
    assert contains_either("the sync runs every night", "The SYNC runs")
    assert not contains_either("The sync runs", "The export waits")


def test_nearest_is_highest_first_ties_by_id_without_the_brick_itself():
    candidates = [("c", 0.5), ("self", 0.99), ("b", 0.9), ("a", 0.9), ("d", 0.7)]
    assert nearest("self", candidates) == [("a", 0.9), ("b", 0.9), ("d", 0.7), ("c", 0.5)]
    assert nearest("self", candidates, limit=2) == [("a", 0.9), ("b", 0.9)]


# Values a sentence states ---------------------------------------------------------------------


@pytest.mark.parametrize("word, folded", [
    ("Gardening's", "gardening"), ("Gardening’s", "gardening"), ("gardenings'", "gardening"),
    ("cats", "cat"), ("Files", "file"),  # a plural 's' goes from a word of four letters or more
    ("gas", "gas"), ("class", "class"), ("status", "status"), ("analysis", "analysis"),
])
def test_a_value_is_folded_without_possessive_or_plural(word, folded):
    assert rules._fold(word) == folded


def test_a_sentence_names_its_values_and_words():
    v = values_of("- Ana prefers **Berlin** for the 15 % discount.")
    assert v.words == {"ana", "prefer", "berlin", "for", "the", "15", "discount"}
    assert v.names == {"berlin"} and v.numbers == {"15%"} and not v.negated
    quoted = values_of('Name the file "alpha" now.')
    assert quoted.quoted == {"alpha"} and quoted.words == {"name", "the", "file", "now"} and quoted.identifiers == set()
    assert values_of("Pay the TAX now.").identifiers == {"tax"}
    # A capital after an opening bracket still starts the text: it names nothing.
    assert values_of("(Berlin is the venue)").names == set()
    assert values_of("You needn't run it.").negated


def test_a_capital_after_a_sentence_end_names_nothing():
    assert rules._sentence_start("Berlin wins", "Berlin")
    assert rules._sentence_start("Done.  Berlin wins", "Berlin")
    assert not rules._sentence_start("Use Berlin. Berlin wins", "Berlin")  # its first place counts
    assert not rules._sentence_start("Pay TAX Berlin", "Berlin")


def test_small_set_rules():
    assert rules._jaccard(set(), set()) == 1.0
    assert rules._jaccard({"a"}, {"b"}) == 0.0
    assert rules._jaccard({"a", "b"}, {"b"}) == 0.5
    assert rules._holds(["use", "parquet"], frozenset({"parquet"}))
    assert rules._holds(["parquet-files"], frozenset({"parquet"}))
    assert not rules._holds(["use", "csv"], frozenset({"parquet"}))
    assert rules._differ(frozenset({"3", "5", "9"}), frozenset({"4", "6", "9"})) == ("3, 5", "4, 6")
    assert rules._differ(frozenset({"3"}), frozenset({"3", "4"})) is None


# Lines, headings, statements -------------------------------------------------------------------


def test_a_line_keeps_its_label_and_value():
    assert line_of("- Use **Parquet** now.") == Line(None, "plain", "Use Parquet now.")
    assert line_of("Subject: Pricing update") == Line("subject", "field", "Pricing update")
    assert line_of("Subject line: Pricing update").kind == "field"  # named by its first word
    assert line_of("- Week 11: 16 miles") == Line("week 11", "step", "16 miles")
    assert line_of("July 9th: 15 miles").label == "july 9"
    eight = "one two three four five six seven eight: the value"
    assert line_of(eight).kind == "item" and line_of("nine " + eight).kind == "plain"


def test_headings_and_titles_state_no_value_sentences_do():
    assert states_no_value("- ## Storage decisions")
    assert states_no_value("Storage decisions：")
    assert states_no_value("__Storage decisions__")
    assert states_no_value("**Storage decisions**.")
    twelve = " ".join(["word"] * 12)
    assert states_no_value(f"**{twelve}**") and not states_no_value(f"**{twelve} word**")
    assert not states_no_value("**Note** the sync runs 3 times a day.")
    for end in ".!?":
        assert not states_no_value(f"The Pure Gardening Company Promise{end}")
    assert states_no_value("The Pure Gardening Company Promise")


def test_tool_output_and_narration_state_nothing():
    assert states_nothing("\x1b[31mthree tests failed in the sync suite")
    assert states_nothing("- I'll set the retries to 3 for the sync.")
    assert not states_nothing("The sync retries 3 times.")


# Conflicts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, why", [
    # One side a heading or narration: never a conflict, whichever side it is.
    ("The sync retries 3 times.", "## The sync retries 5 times", None),
    ("The sync retries 3 times.", "I'll set the sync retries to 5 times.", None),
    # Only stop words in common: nothing to disagree about.
    ("It is 3.", "It is 4.", None),
    # Each side states several values: all are named, sorted.
    ("The sync runs at 3 and 5 daily.", "The sync runs at 4 and 6 daily.", "number: 3, 5 ≠ 4, 6"),
    # Two items of a list under two labels are two things; an item and a sentence are compared whole.
    ("**Primary store**: Use Parquet for exports.", "**Backup store**: Use CSV for exports.", None),
    # Names in two different places of two alike sentences are two things.
    ("Ana uses Parquet for exports daily.", "Ana uses exports for CSV daily.", None),
    ("Run the exports on UNIX hosts.", "Run the exports on MINIX hosts.", "identifier: unix ≠ minix"),
    # "The same thing" is an overlap of half the other words, at least: each pair is just at it.
    ("Backups run at 15 daily.", "Backups run at 20 weekly.", "number: 15 ≠ 20"),
    ("Ana runs Berlin daily.", "Ana runs Lisbon weekly.", "name: berlin ≠ lisbon"),
    ("Use nexus_v2 store daily.", "Use nexus_v3 store weekly.", "identifier: nexus_v2 ≠ nexus_v3"),
    ("Backups couldn't run.", "Backups run every night.", "negation: first negated, second affirmed"),
    ("Backups are enabled nightly.", "Backups are disabled weekly.", "antonym: enabled ≠ disabled"),
    # A word with an opposite is an antonym only when the other side says the opposite.
    ("The backup is enabled.", "The backup is ready.", None),
])
def test_conflict_rules_at_their_edges(a, b, why):
    assert conflict_between(a, b) == why
    flipped = why
    if why and why.startswith("negation"):
        flipped = "negation: first affirmed, second negated"
    elif why and "≠" in why:
        kind, _, values = why.partition(": ")
        left, _, right = values.partition(" ≠ ")
        flipped = f"{kind}: {right} ≠ {left}"
    assert conflict_between(b, a) == flipped
