"""The gate's parts one by one (issue 51's mutation benchmark): what an occurrence carries, a run
loaded from the vault's nodes, what a rejection keeps, and the per-batch memo that reads a node
once for all its quotes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nexus_assets.core.fingerprint import fingerprint, node_checksum
from nexus_assets.core.models import ExtractionPolicy, Occurrence, Rejection, Topic
from nexus_assets.ingest.scope import Scope
from nexus_assets.gate.rules import NeedsDocument, _NodeMemo, named_paths, validate_pointer, validate_pointers
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets_tests.strategies import TOPIC

DOCUMENT = {
    "run_id": "run-units",
    "status": "OPEN",
    "started_at": "2024-03-01T10:00:00Z",
    "messages": [
        {"role": "user", "content": "The sync engine runs nightly. The sync engine is idempotent.", "timestamp": 1709287200},
        {"role": "assistant", "content": "Bricks are verbatim text units. <antThinking>not a tag here</antThinking>"},
    ],
}
RUN = nexus_run(DOCUMENT)
PATH = "$.messages[0].content"
NORMALIZED = "$['messages'][0]['content']"


def pointer(quote, path=PATH, topic=TOPIC):
    return {"topic_id": topic, "json_path": path, "verbatim_quote": quote}


def test_an_occurrence_carries_what_the_gate_computed_from_the_node():
    text = DOCUMENT["messages"][0]["content"]
    occurrence = validate_pointer(pointer("is idempotent"), topic_id=TOPIC, run=RUN)
    steps = ("messages", 0, "content")
    assert isinstance(occurrence, Occurrence)
    assert occurrence.topic_id == TOPIC and occurrence.content == "is idempotent"
    assert occurrence.fingerprint == fingerprint("is idempotent")
    address = occurrence.address
    assert (address.run_id, address.json_path) == ("run-units", "$['messages'][0]['content']")
    assert (address.start, address.end) == (text.find("is idempotent"), text.find("is idempotent") + len("is idempotent"))
    assert address.node_checksum == node_checksum(text)
    assert (address.node_type, address.branch) == ("user_message", "current")
    assert occurrence.timestamp == "2024-03-01T10:00:00.000000Z"
    assert occurrence.position == RUN.positions[steps] >= 0


def test_tags_in_a_run_that_is_not_claude_are_text():
    """Only Claude's old exports hold reasoning inline; elsewhere `<antThinking>` is what was said."""
    occurrence = validate_pointer(pointer("not a tag here", "$.messages[1].content"), topic_id=TOPIC, run=RUN)
    assert isinstance(occurrence, Occurrence)
    assert occurrence.address.node_type == "assistant_message"


def _stored(run):
    """The run as the gate sees it when loaded from the vault's nodes: no document, texts stored."""
    nodes = tuple(replace(n, text=run.document[n.steps[0]][n.steps[1]][n.steps[2]], checksum=f"stored-{i}", position=10 + i)
                  for i, n in enumerate(run.nodes))
    return replace(run, document=None, nodes=nodes)


def test_a_run_loaded_from_the_vault_uses_its_stored_nodes():
    stored = _stored(RUN)
    occurrence = validate_pointer(pointer("runs nightly", NORMALIZED), topic_id=TOPIC, run=stored)
    assert isinstance(occurrence, Occurrence)
    assert occurrence.address.node_checksum == "stored-0"
    assert occurrence.position == 10
    assert occurrence.content == "runs nightly"
    assert occurrence.address.json_path == "$['messages'][0]['content']"
    missing = validate_pointer(pointer("nowhere in it", NORMALIZED), topic_id=TOPIC, run=stored)
    assert missing.reason == "quote_not_found"


def test_a_pointer_at_no_stored_node_needs_the_document():
    stored = _stored(RUN)
    with pytest.raises(NeedsDocument) as raised:
        validate_pointer(pointer("user", "$.messages[0].role"), topic_id=TOPIC, run=stored)
    assert raised.value.args == ("run-units",)
    with pytest.raises(NeedsDocument):
        validate_pointer(pointer("user", "$..role"), topic_id=TOPIC, run=stored)


def test_what_the_pointers_name_is_their_normalized_paths():
    raws = [pointer("a", NORMALIZED), pointer("b", "$['messages'][1]['content']"), pointer("c", "$..content"), pointer("d"), "junk", {"json_path": 3}]
    assert named_paths(raws) == {NORMALIZED, "$['messages'][1]['content']"}


def test_a_rejection_keeps_what_the_pointer_said_as_text():
    long = list(range(400))
    rejected = validate_pointer({"topic_id": TOPIC, "json_path": long, "verbatim_quote": 5}, topic_id=TOPIC, run=RUN)
    assert rejected.reason == "malformed_pointer"
    assert rejected.json_path == repr(long)[:500] and len(rejected.json_path) == 500
    assert rejected.verbatim_quote == "5"
    assert rejected.detail == "pointer is not {topic_id, json_path, verbatim_quote} strings: json_path: input should be a valid string; verbatim_quote: input should be a valid string"
    whole = validate_pointer("runs nightly", topic_id=TOPIC, run=RUN)
    assert whole.detail == "pointer is not {topic_id, json_path, verbatim_quote} strings: pointer: input should be a valid dictionary"
    assert (whole.json_path, whole.verbatim_quote) == (None, None)


def test_each_rejection_says_why_in_one_line():
    empty = validate_pointer(pointer("  \n"), topic_id=TOPIC, run=RUN)
    assert (empty.reason, empty.detail) == ("empty_quote", "verbatim_quote is empty or only whitespace")
    other = validate_pointer(pointer("runs nightly", topic="another-topic"), topic_id=TOPIC, run=RUN)
    assert (other.reason, other.detail) == ("unknown_topic", f"pointer names topic 'another-topic'; this extraction is for {TOPIC!r}")
    missing = validate_pointer(pointer("runs daily"), topic_id=TOPIC, run=RUN)
    assert (missing.reason, missing.detail) == ("quote_not_found", "quote is not a verbatim substring of $['messages'][0]['content']")
    scope = Scope.of(ExtractionPolicy(scope_description="x"), Topic.model_validate(
        {"topic_id": TOPIC, "display_name": "x", "extraction_policy": {"scope_description": "x"}, "state": "ACTIVE"}))
    not_a_node = validate_pointer(pointer("run-units", "$.run_id"), topic_id=TOPIC, run=RUN, scope=scope)
    assert (not_a_node.reason, not_a_node.detail) == ("out_of_scope", "$['run_id'] is not a text node of the run")


def test_one_node_is_searched_once_for_every_quote_the_batch_has_for_it():
    raws = [pointer("runs nightly"), pointer("is idempotent"), pointer("Bricks", "$.messages[1].content"), "junk"]
    memo = _NodeMemo(raws)
    assert memo.pending == {PATH: {"runs nightly", "is idempotent"}, "$.messages[1].content": {"Bricks"}}
    text = DOCUMENT["messages"][0]["content"]
    steps = ("messages", 0, "content")
    assert memo.find(steps, text, "runs nightly", PATH) == text.find("runs nightly")
    # The other quote of that node was found in the same pass, and the node's quotes are done.
    assert memo.found == {(steps, "runs nightly"): text.find("runs nightly"), (steps, "is idempotent"): text.find("is idempotent")}
    assert PATH not in memo.pending
    assert memo.checksum(steps, text) == node_checksum(text)
    assert memo.checksums == {steps: node_checksum(text)}
    assert memo.regions(steps, "a <antThinking>b</antThinking>") == memo.tagged[steps] == [(2, 30, "thinking")]


def test_validate_pointers_splits_occurrences_from_rejections_in_order():
    raws = [pointer("runs nightly"), pointer("nope"), pointer("is idempotent"), 7]
    occurrences, rejections = validate_pointers(raws, topic_id=TOPIC, run=RUN)
    assert [o.content for o in occurrences] == ["runs nightly", "is idempotent"]
    assert [r.reason for r in rejections] == ["quote_not_found", "malformed_pointer"]
    assert all(isinstance(r, Rejection) for r in rejections)


def test_first_offsets_is_str_find_across_hash_blocks_prefix_groups_and_short_quotes():
    """The long-node path agrees with `str.find` for every kind of quote: across the boundary of
    two hashed blocks, several quotes of one 16-character prefix (of one length and of several),
    quotes shorter than the prefix, repeated text (the first place wins) and quotes not there."""
    from nexus_assets.gate.quotes import _BLOCK, first_offsets

    filler = "".join(f"line {i:07d} of the long tool output\n" for i in range(_BLOCK // 36 + 4000))
    assert len(filler) > _BLOCK + 50_000
    at = _BLOCK - 20  # a sentence written across the first block's end
    # A lone surrogate (what a broken export can hold) is text like any other.
    node = filler[:at] + "The sync engine compiles every topic at night. \ud800 " + filler[at:] + "The sync engine compiles every topic at noon."
    quotes = [
        "The sync engine compiles every topic at night.",  # straddles the block boundary
        "The sync engine compiles every topic at noon.",  # same prefix, one shorter, at the very end
        "The sync engine compiles every topic at dawn.",  # same prefix and length as a real one, not there
        "The sync engine compiles",  # same prefix, another length: the first place
        "line 0000003 of the long tool output\nline 0000004",
        "line 0000003",  # shorter than the prefix
        "line 9999999 of the long tool output",  # not there
        "tool output\nline 0000000",
        filler[-40:],  # the filler's very end
        node[_BLOCK : _BLOCK + 30],  # starts at the second block's first window
        node[_BLOCK - 1 : _BLOCK + 29],  # at the first block's last window
        node[_BLOCK + 5 : _BLOCK + 21],  # exactly the prefix's length
        node[:20],  # the first window
        node[-16:],  # the last window
        "of the long",  # short, and everywhere: the first place
        "night. \ud800 line",
    ]
    found = first_offsets(node, quotes)
    assert found == {q: node.find(q) for q in quotes}
    assert found["The sync engine compiles every topic at night."] == at
    assert found["The sync engine compiles every topic at dawn."] == -1
    assert found[node[_BLOCK : _BLOCK + 30]] == _BLOCK
    short = ["of the long", "tool output", "line 0000009", "nowhere"]  # none as long as the prefix
    assert first_offsets(node, short) == {q: node.find(q) for q in short}
