"""The embedded extractor (docs/quality.md): offline and deterministic. It returns whole sentences of
in-scope nodes that contain a required keyword (whole word, any case) and read as statements (not
headings, questions, lead-ins or fragments: `test_embedded_statements.py`), as untrusted pointers
that go through the same gate as an LLM's."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.core.models import ExtractionPolicy, Occurrence, Topic
from nexus_assets.extract.embedded import extract_embedded, is_statement
from nexus_assets.core.sentences import sentence_units, sentences
from nexus_assets.gate.rules import validate_pointer
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets_tests.strategies import TOPIC, make_run


def topic(keywords=("sync", "brick", "compiler"), node_types=("user_message", "assistant_message")) -> Topic:
    return Topic(
        topic_id=TOPIC,
        display_name="Nexus Server Sync Architecture",
        extraction_policy=ExtractionPolicy(
            scope_description="Technical constraints and data-flow rules of the sync engine.",
            target_node_types=node_types,
            required_keywords=keywords,
            exclusion_criteria=("General pleasantries",),
        ),
        ordering_rule="chronological",
        state="ACTIVE",
    )


MESSAGES = [
    ("user", "We sync nightly. The async worker is separate! Syncing is done. Sync again tomorrow?"),
    ("assistant", "Bricks are verbatim. A brick is a unit. The COMPILER decides."),
    ("system", "The sync engine is configured here."),
    ("tool", "sync result is ok."),
    ("user", "Nothing relevant here. Just chatting."),
    ("user", "The sync_engine is a name. Resync happens. Also SYNC now."),
    ("assistant", "Use sync-engine mode. Thanks!"),
]
RUN = make_run("run-1", [c for _, c in MESSAGES], roles=[r for r, _ in MESSAGES])


def quotes(pointers):
    return [(p["json_path"], p["verbatim_quote"]) for p in pointers]


def test_whole_sentences_with_a_whole_word_keyword_in_any_case():
    assert quotes(extract_embedded(topic(), RUN)) == [
        ("$['messages'][0]['content']", "We sync nightly."),
        ("$['messages'][1]['content']", "Bricks are verbatim."),  # a plural of `brick` (core/keywords.py)
        ("$['messages'][1]['content']", "A brick is a unit."),
        ("$['messages'][1]['content']", "The COMPILER decides."),
        ("$['messages'][5]['content']", "Also SYNC now."),
        ("$['messages'][6]['content']", "Use sync-engine mode."),
    ]


@pytest.mark.parametrize(
    "text, matches",
    [
        ("Sync it now.", True),
        ("We SYNC now.", True),
        ("we sync every single night", True),
        ("(sync) it now.", True),
        ("re-sync it now.", True),
        ("Syncing now.", False),
        ("The async path.", False),
        ("Resync now.", False),
        ("sync_engine now.", False),
        ("sync2 now.", False),
        ("ｓｙｎｃ now.", False),  # fullwidth is a different word: keywords are matched, not normalised
    ],
)
def test_keyword_must_be_a_whole_word(text, matches):
    run = make_run("r", text)
    expected = [("$['messages'][0]['content']", sentences(text)[0])] if matches else []
    assert quotes(extract_embedded(topic(keywords=("Sync",)), run)) == expected


def test_keyword_list_case_does_not_matter():
    upper = extract_embedded(topic(keywords=("SYNC", "Brick", "compiler")), RUN)
    assert upper == extract_embedded(topic(), RUN)


def test_respects_target_node_types():
    system_only = extract_embedded(topic(node_types=("system_message",)), RUN)
    assert quotes(system_only) == [("$['messages'][2]['content']", "The sync engine is configured here.")]
    tools = extract_embedded(topic(node_types=("tool_message",)), RUN)
    assert quotes(tools) == [("$['messages'][3]['content']", "sync result is ok.")]
    everything = quotes(extract_embedded(topic(node_types=None), RUN))
    assert ("$['messages'][2]['content']", "The sync engine is configured here.") in everything
    # Tool output is read only by a topic that names it (docs/inputs.md).
    assert ("$['messages'][3]['content']", "sync result is ok.") not in everything


def test_without_required_keywords_every_statement_of_in_scope_nodes():
    got = quotes(extract_embedded(topic(keywords=None), RUN))
    expected = [
        (f"$['messages'][{i}]['content']", text[s:e])
        for i, (role, text) in enumerate(MESSAGES)
        if role in ("user", "assistant")
        for s, e, kind in sentence_units(text)
        if is_statement(text[s:e], kind)
    ]
    assert ("$['messages'][4]['content']", "Nothing relevant here.") in got
    assert got == expected


def test_pointers_name_the_topic_and_only_the_three_fields():
    for p in extract_embedded(topic(), RUN):
        assert set(p) == {"topic_id", "json_path", "verbatim_quote"}
        assert p["topic_id"] == TOPIC


def test_every_pointer_passes_the_gate_unchanged():
    for p in extract_embedded(topic(keywords=None, node_types=None), RUN):
        result = validate_pointer(p, topic_id=TOPIC, run=RUN)
        assert isinstance(result, Occurrence), result
        assert result.content == p["verbatim_quote"]
        assert result.address.json_path == p["json_path"]


def _reordered(run):
    """The same run with every JSON object's keys in reverse order (as another exporter writes it)."""

    def flip(value):
        if isinstance(value, dict):
            return {k: flip(value[k]) for k in reversed(list(value))}
        if isinstance(value, list):
            return [flip(v) for v in value]
        return value

    return nexus_run(flip(copy.deepcopy(run.document)))


def test_deterministic():
    """The answer is a function of the topic and the run's content: not of an earlier call (with
    another topic or run), of object identity, or of the order of keys in the run's JSON."""
    first = extract_embedded(topic(), RUN)
    assert quotes(first) == [
        ("$['messages'][0]['content']", "We sync nightly."),
        ("$['messages'][1]['content']", "Bricks are verbatim."),  # a plural of `brick` (core/keywords.py)
        ("$['messages'][1]['content']", "A brick is a unit."),
        ("$['messages'][1]['content']", "The COMPILER decides."),
        ("$['messages'][5]['content']", "Also SYNC now."),
        ("$['messages'][6]['content']", "Use sync-engine mode."),
    ]
    other = extract_embedded(topic(keywords=("nightly", "unit"), node_types=None), make_run("other", ["A unit runs nightly.", "Sync."]))
    assert quotes(other) == [("$['messages'][0]['content']", "A unit runs nightly.")]
    assert extract_embedded(topic(), RUN) == first
    assert extract_embedded(topic(), nexus_run(copy.deepcopy(RUN.document))) == first
    assert list(_reordered(RUN).document["messages"][0]) == ["content", "role"]
    assert extract_embedded(topic(), _reordered(RUN)) == first


def test_empty_and_blank_messages_give_nothing():
    run = make_run("r", ["", "   \n\t", "We sync nightly."])
    assert quotes(extract_embedded(topic(keywords=None), run)) == [("$['messages'][2]['content']", "We sync nightly.")]


# --- property --------------------------------------------------------------------------------

VOCAB = ["sync", "Sync", "SYNC", "async", "syncing", "brick", "bricks", "the", "engine", "is", "fast",
         "日本", "🧱", "e.g.", "Dr.", "3.14", "`code`", "sync_engine", "re-sync", "(sync)"]
ENDS = [".", "!", "?", "", "…", "。"]
KEYWORDS = ("sync", "brick")
# The keywords and their plurals, as whole words (core/keywords.py; "bricks" is in VOCAB, "syncing" is no form).
WHOLE_WORD = re.compile(r"(?<!\w)(?:syncs?|bricks?)(?!\w)", re.IGNORECASE)


@st.composite
def chatty_text(draw) -> str:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        words = draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6))
        words[0] = words[0][:1].upper() + words[0][1:]
        out.append(" ".join(words) + draw(st.sampled_from(ENDS)))
    return draw(st.sampled_from([" ", "\n", "  ", "\n\n- "])).join(out)


@st.composite
def chatty_runs(draw):
    n = draw(st.integers(1, 5))
    roles = draw(st.lists(st.sampled_from(["user", "assistant", "system", "tool", "other"]), min_size=n, max_size=n))
    texts = draw(st.lists(chatty_text(), min_size=n, max_size=n))
    return make_run("prop-run", texts, roles=roles)


@settings(max_examples=80, deadline=None)
@given(run=chatty_runs(), node_types=st.sampled_from([None, ("user_message",), ("user_message", "assistant_message")]))
def test_extracts_exactly_the_keyword_statements_of_in_scope_nodes(run, node_types):
    t = topic(keywords=KEYWORDS, node_types=node_types)
    pointers = extract_embedded(t, run)
    role_types = {"user": "user_message", "assistant": "assistant_message", "system": "system_message",
                  "tool": "tool_message"}
    expected = []
    for i, message in enumerate(run.document["messages"]):
        node_type = role_types.get(message["role"], "other")
        if node_types is not None and node_type not in node_types or node_types is None and node_type == "tool_message":
            continue
        text = message["content"]
        for start, end, kind in sentence_units(text):
            if WHOLE_WORD.search(text[start:end]) and is_statement(text[start:end], kind):
                expected.append((f"$['messages'][{i}]['content']", text[start:end]))
    assert quotes(pointers) == expected
    for p in pointers:
        result = validate_pointer(p, topic_id=TOPIC, run=run)
        assert isinstance(result, Occurrence) and result.content == p["verbatim_quote"]
    # The order of keys in the run's JSON is no input.
    assert extract_embedded(t, _reordered(run)) == pointers
