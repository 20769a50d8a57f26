"""Invariant 2: the hallucination gate.

A pointer whose path does not resolve to exactly one string node, or whose quote is not found
verbatim in that node, is rejected with a reason code and never becomes an occurrence. The
quote's first occurrence in the node (`str.find`) is used.
"""

from __future__ import annotations

import pytest

from nexus_assets.core.models import (
    REASON_CODES,
    ExtractionPolicy,
    Occurrence,
    Rejection,
    Topic,
)
from nexus_assets.ingest.scope import Scope, in_scope_nodes, node_text
from nexus_assets.gate.rules import validate_pointer, validate_pointers
from nexus_assets.ingest.formats.chatgpt import chatgpt_run
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets_tests.strategies import TOPIC
from nexus_assets_tests.ingest.test_branches import edited_and_regenerated
from nexus_assets_tests.ingest.test_branches import message as branch_message
from nexus_assets_tests.ingest.test_branches import node as branch_node

DOCUMENT = {
    "run_id": "run-gate",
    "status": "OPEN",
    "started_at": "2024-03-01T10:00:00Z",
    "messages": [
        {"role": "user", "content": "The sync engine runs nightly. The sync engine is idempotent.",
         "timestamp": 1709287200, "tokens": 42},
        {"role": "assistant", "content": "Bricks are verbatim text units.", "meta": {"k": "v"}},
        {"role": "user", "content": "Sync is a pure function."},
    ],
}
RUN = nexus_run(DOCUMENT)
GOOD = {"topic_id": TOPIC, "json_path": "$.messages[0].content", "verbatim_quote": "runs nightly"}


def case(raw, reason, id):
    return pytest.param(raw, reason, id=id)


def with_(**changes):
    return {**GOOD, **changes}


def without(field):
    return {k: v for k, v in GOOD.items() if k != field}


CASES = [
    # malformed_pointer: not a dict, missing fields, non-string fields, unparseable path
    case("runs nightly", "malformed_pointer", "not-a-dict-string"),
    case(["$.messages[0].content", "runs nightly"], "malformed_pointer", "not-a-dict-list"),
    case(None, "malformed_pointer", "not-a-dict-none"),
    case(42, "malformed_pointer", "not-a-dict-number"),
    case(without("topic_id"), "malformed_pointer", "missing-topic_id"),
    case(without("json_path"), "malformed_pointer", "missing-json_path"),
    case(without("verbatim_quote"), "malformed_pointer", "missing-verbatim_quote"),
    case({}, "malformed_pointer", "empty-dict"),
    case(with_(json_path=3), "malformed_pointer", "json_path-not-string"),
    case(with_(verbatim_quote=["runs", "nightly"]), "malformed_pointer", "quote-not-string"),
    case(with_(verbatim_quote=None), "malformed_pointer", "quote-none"),
    case(with_(topic_id=7), "malformed_pointer", "topic_id-not-string"),
    case(with_(json_path="$.messages[0"), "malformed_pointer", "unparseable-path-bracket"),
    case(with_(json_path="$.messages[?(@.role=='user')].content"), "malformed_pointer", "unparseable-filter"),
    case(with_(json_path="$$$"), "malformed_pointer", "unparseable-dollars"),
    case(with_(json_path=""), "malformed_pointer", "empty-path"),
    case(with_(json_path="   "), "malformed_pointer", "blank-path"),
    # unknown_topic
    case(with_(topic_id="some-other-topic"), "unknown_topic", "other-topic"),
    case(with_(topic_id=TOPIC.upper()), "unknown_topic", "topic-case-changed"),
    # empty_quote, incl. whitespace-only
    case(with_(verbatim_quote=""), "empty_quote", "empty"),
    case(with_(verbatim_quote="   "), "empty_quote", "spaces"),
    case(with_(verbatim_quote="\t\n \u00a0\u3000"), "empty_quote", "unicode-whitespace"),
    # path_not_found
    case(with_(json_path="$.messages[3].content"), "path_not_found", "index-past-end"),
    case(with_(json_path="$.messages[-4].content"), "path_not_found", "negative-index-past-start"),
    case(with_(json_path="$.messages[0].text"), "path_not_found", "missing-key"),
    case(with_(json_path="$.conversation[0].content"), "path_not_found", "missing-root-key"),
    case(with_(json_path="$.messages[0].content[0]"), "path_not_found", "index-into-string"),
    # path_not_singular
    case(with_(json_path="$..content"), "path_not_singular", "descendants"),
    case(with_(json_path="$.messages[*].content"), "path_not_singular", "wildcard"),
    case(with_(json_path="$.messages[0,1].content"), "path_not_singular", "union"),
    case(with_(json_path="$.messages[0:2].content"), "path_not_singular", "slice"),
    # node_not_string: an object, a list, a number
    case(with_(json_path="$.messages[0]"), "node_not_string", "object"),
    case(with_(json_path="$.messages[1].meta"), "node_not_string", "nested-object"),
    case(with_(json_path="$.messages"), "node_not_string", "list"),
    case(with_(json_path="$.messages[0].tokens"), "node_not_string", "int"),
    case(with_(json_path="$.messages[0].timestamp"), "node_not_string", "epoch-number"),
    # quote_not_found: paraphrase, case change, normalisation-equivalent, other node
    case(with_(verbatim_quote="runs every night"), "quote_not_found", "paraphrase"),
    case(with_(verbatim_quote="RUNS NIGHTLY"), "quote_not_found", "case-changed"),
    case(with_(verbatim_quote="runs  nightly"), "quote_not_found", "whitespace-changed"),
    case(with_(verbatim_quote="ｒｕｎｓ nightly"), "quote_not_found", "fullwidth"),
    case(with_(verbatim_quote="Bricks are verbatim"), "quote_not_found", "quote-of-another-node"),
    case(with_(verbatim_quote="runs nightly. The sync engine is idempotent. And more"), "quote_not_found", "runs-past-end"),
    case(with_(verbatim_quote="The sync engine runs nightly.", json_path="$.messages[2].content"),
         "quote_not_found", "right-quote-wrong-node"),
]


@pytest.mark.parametrize("raw, reason", CASES)
def test_rejected_with_reason_code(raw, reason):
    result = validate_pointer(raw, topic_id=TOPIC, run=RUN)
    assert isinstance(result, Rejection), result
    assert not isinstance(result, Occurrence)
    assert result.reason == reason, result.detail
    assert result.reason in REASON_CODES
    assert result.topic_id == TOPIC and result.run_id == "run-gate"
    assert result.detail


def test_every_reason_code_is_exercised():
    # out_of_scope needs a topic's scope: see test_a_pointer_at_a_node_out_of_the_topic_scope_is_rejected;
    # semantic_veto is the LLM's, after the gate: see test_semantic_veto.py.
    assert {c.values[1] for c in CASES} | {"out_of_scope", "semantic_veto"} == set(REASON_CODES)


def test_rejections_keep_what_the_pointer_said():
    raw = with_(verbatim_quote="runs every night")
    result = validate_pointer(raw, topic_id=TOPIC, run=RUN)
    assert (result.json_path, result.verbatim_quote) == (raw["json_path"], raw["verbatim_quote"])


def test_validate_pointers_never_turns_a_rejection_into_an_occurrence():
    raws = [c.values[0] for c in CASES] + [GOOD]
    occurrences, rejections = validate_pointers(raws, topic_id=TOPIC, run=RUN)
    assert len(occurrences) == 1 and len(rejections) == len(CASES)
    assert [r.reason for r in rejections] == [c.values[1] for c in CASES]
    assert occurrences[0].content == "runs nightly"


def test_first_occurrence_is_used_when_the_quote_repeats():
    result = validate_pointer(with_(verbatim_quote="The sync engine"), topic_id=TOPIC, run=RUN)
    node = DOCUMENT["messages"][0]["content"]
    assert isinstance(result, Occurrence)
    assert result.address.start == node.find("The sync engine") == 0
    assert result.address.end == len("The sync engine")
    assert node.rfind("The sync engine") > 0  # it does repeat


def test_first_occurrence_with_overlapping_repeats():
    run = nexus_run({"run_id": "r", "status": "OPEN", "messages": [{"role": "user", "content": "xx aaaa aa"}]})
    result = validate_pointer(with_(verbatim_quote="aa"), topic_id=TOPIC, run=run)
    assert (result.address.start, result.address.end) == (3, 5)


def test_accepted_pointer_becomes_an_occurrence_with_its_context():
    result = validate_pointer(GOOD, topic_id=TOPIC, run=RUN)
    assert isinstance(result, Occurrence)
    assert result.topic_id == TOPIC
    assert result.content == "runs nightly"
    assert result.address.run_id == "run-gate"
    assert result.address.json_path == "$['messages'][0]['content']"
    assert result.timestamp == "2024-03-01T10:00:00.000000Z"


def test_extra_pointer_fields_are_ignored_not_trusted():
    raw = with_(start=0, end=3, content="The")
    result = validate_pointer(raw, topic_id=TOPIC, run=RUN)
    assert isinstance(result, Occurrence)
    assert result.content == "runs nightly"
    assert result.address.start == DOCUMENT["messages"][0]["content"].find("runs nightly")


def scoped_topic(**options) -> Topic:
    policy = {"scope_description": "The sync engine.", "required_keywords": ("sync",), **options.pop("policy", {})}
    return Topic(topic_id=TOPIC, display_name="Scoped", extraction_policy=ExtractionPolicy(**policy), state="ACTIVE", **options)


def hidden_and_branched_run():
    """An edited prompt and a regenerated answer (abandoned branches), plus a hidden system message."""
    conversation = edited_and_regenerated()
    hidden = branch_message("system", "The sync engine obeys these hidden instructions.", 1717000001)
    hidden["metadata"] = {"is_visually_hidden_from_conversation": True}
    conversation["mapping"]["root"]["children"].insert(0, "sys")
    conversation["mapping"]["sys"] = branch_node("sys", "root", [], hidden)
    return chatgpt_run(conversation)


def test_a_pointer_at_a_node_out_of_the_topic_scope_is_rejected():
    """An extractor is only shown the topic's in-scope nodes; a pointer at any other node, however
    true its quote, was guessed, and compiles nothing (docs/inputs.md: hidden messages only when asked,
    `branches: current` compiles the current path only)."""
    run = hidden_and_branched_run()
    paths = {n.path: n for n in run.nodes}
    by_text = {run_text: path for path, n in paths.items() if (run_text := node_text(run, n))}

    def verdict(topic: Topic, text: str, quote: str | None = None):
        raw = {"topic_id": TOPIC, "json_path": by_text[text], "verbatim_quote": quote or text}
        return validate_pointer(raw, topic_id=TOPIC, run=run, scope=Scope.of(topic.extraction_policy, topic))

    everything, current = scoped_topic(), scoped_topic(branches="current")
    abandoned, hidden = "The sync engine treats a rename as a move.", "The sync engine obeys these hidden instructions."
    assert isinstance(verdict(everything, abandoned), Occurrence)
    rejected = verdict(current, abandoned)
    assert rejected.reason == "out_of_scope" and "abandoned branch" in rejected.detail
    rejected = verdict(everything, hidden)
    assert rejected.reason == "out_of_scope" and "hidden message" in rejected.detail
    assert isinstance(verdict(scoped_topic(include_hidden=True), hidden), Occurrence)
    users_only = scoped_topic(policy={"target_node_types": ("user_message",)})
    rejected = verdict(users_only, "The sync engine records a rename as one operation.")
    assert rejected.reason == "out_of_scope" and "assistant_message" in rejected.detail
    rejected = verdict(scoped_topic(policy={"required_keywords": ("vault",)}), abandoned)
    assert rejected.reason == "out_of_scope" and "required keywords" in rejected.detail
    # A string that is no text node (the title) was never shown to any extractor.
    title = {"topic_id": TOPIC, "json_path": "$.title", "verbatim_quote": "Deletes"}
    rejected = validate_pointer(title, topic_id=TOPIC, run=run, scope=Scope.of(everything.extraction_policy, everything))
    assert rejected.reason == "out_of_scope" and "not a text node" in rejected.detail
    # A false quote in an in-scope node is still a lie of its own kind; without a scope, as before.
    assert verdict(everything, abandoned, "The sync engine deletes.").reason == "quote_not_found"
    assert isinstance(validate_pointer(title, topic_id=TOPIC, run=run), Occurrence)


def test_the_extractor_and_the_gate_agree_on_the_scope():
    """Every node the embedded extractor may be shown passes the gate's scope test, and no other."""
    run = hidden_and_branched_run()
    for topic in (scoped_topic(), scoped_topic(branches="current"), scoped_topic(include_hidden=True),
                  scoped_topic(policy={"target_node_types": ("assistant_message",)})):
        scope = Scope.of(topic.extraction_policy, topic)
        shown = {n.path for n, _ in in_scope_nodes(topic.extraction_policy, run, topic)}
        pointers = [{"topic_id": TOPIC, "json_path": n.path, "verbatim_quote": t} for n in run.nodes if (t := node_text(run, n))]
        occurrences, rejections = validate_pointers(pointers, topic_id=TOPIC, run=run, scope=scope)
        assert {o.address.json_path for o in occurrences} == shown
        assert {r.reason for r in rejections} <= {"out_of_scope"}
