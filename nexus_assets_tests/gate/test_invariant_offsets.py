"""Invariants 1 and 2: zero paraphrasing, and the address a brick's text is lifted from.

For every pointer the gate accepts: `resolve(run, json_path)[start:end] == content`, offsets are
code-point indices of the quote's first occurrence, the path is stored in RFC 9535 normalized
form (one node, one address, whatever syntax the pointer used), and `node_checksum` is the
sha256 of the node's UTF-8.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nexus_assets.core.models import Occurrence
from nexus_assets.core.paths import format_path, resolve_steps, resolve_string
from nexus_assets.gate.rules import validate_pointer
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets_tests.strategies import (
    TOPIC,
    has_quotable_text,
    make_run,
    message_paths,
    nexus_documents,
    pointer,
    quoting_targets,
)

NORMALIZED = re.compile(r"^\$(\[(\d+|'([^'\\]|\\.)*')\])*$")


def assert_address_holds(run, occurrence: Occurrence, quote: str, node: str, steps: tuple) -> None:
    address = occurrence.address
    resolved_steps, resolved = resolve_string(run.document, address.json_path)
    assert resolved_steps == steps
    assert resolved == node
    assert resolved[address.start : address.end] == occurrence.content == quote
    assert address.start == node.find(quote)
    assert address.end == address.start + len(quote)
    assert address.json_path == format_path(steps)
    assert NORMALIZED.match(address.json_path), address.json_path
    assert address.node_checksum == hashlib.sha256(node.encode("utf-8")).hexdigest()
    assert address.run_id == run.run_id


@settings(max_examples=60, deadline=None)
@given(data=st.data(), document=nexus_documents())
def test_every_accepted_quote_is_lifted_verbatim_at_a_normalized_address(data, document):
    assume(has_quotable_text(document))
    run = nexus_run(document)
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(quoting_targets(document))
        addresses = set()
        for path in target.paths:
            result = validate_pointer(pointer(target.quote, path=path), topic_id=TOPIC, run=run)
            assert isinstance(result, Occurrence), (path, result)
            assert_address_holds(run, result, target.quote, target.node, target.steps)
            addresses.add(result.address)
        # Every syntax naming the same node gives one and the same address.
        assert len(addresses) == 1


@pytest.mark.parametrize("path", message_paths(3, 5))
def test_all_syntaxes_name_one_node_by_one_normalized_path(path):
    run = make_run("r1", [f"message {i}" for i in range(5)])
    result = validate_pointer(pointer("message 3", path=path), topic_id=TOPIC, run=run)
    assert isinstance(result, Occurrence)
    assert result.address.json_path == "$['messages'][3]['content']"
    assert (result.address.start, result.address.end) == (0, 9)


def test_negative_index_is_stored_non_negative():
    run = make_run("r1", ["first", "second", "third"])
    result = validate_pointer(pointer("third", path="$.messages[-1].content"), topic_id=TOPIC, run=run)
    assert result.address.json_path == "$['messages'][2]['content']"


def test_offsets_are_code_points_not_bytes_or_utf16_units():
    node = "🧱e\u0301日本 — the sync 👍🏽 engine"
    run = make_run("r1", node)
    result = validate_pointer(pointer("the sync 👍🏽"), topic_id=TOPIC, run=run)
    assert node[result.address.start : result.address.end] == "the sync 👍🏽"
    assert result.address.start == 8  # 🧱, e, U+0301, 日, 本, space, —, space
    assert result.address.end == result.address.start + len("the sync 👍🏽")


def test_quote_is_stored_exactly_as_found_never_normalised():
    node = "Ｆｕｌｌｗｉｄｔｈ  and ﬁne\tSTRASSE\u00a0text"
    run = make_run("r1", node)
    result = validate_pointer(pointer(node), topic_id=TOPIC, run=run)
    assert result.content == node
    assert (result.address.start, result.address.end) == (0, len(node))


# --- format_path / resolve_steps round trip ---------------------------------------------------

ROUND_TRIP_KEYS = [
    "it's",
    "back\\slash",
    "trailing\\",
    "\\'",
    "a.b",
    "a-b",
    "with space",
    "",
    "$",
    "*",
    "[0]",
    '"double"',
    "ünïcödé 日本 😀",
    "e\u0301",
    "line\nbreak",
    "tab\there",
    "carriage\rreturn",
    "bell\x07",
    "unit\x1fsep",
    "nul\x00",
    "\b\f",
]


def _document_at(steps: tuple, leaf) -> dict:
    """A document in which `steps` names `leaf`; siblings are decoys named like escapes gone wrong."""
    value = leaf
    for step in reversed(steps):
        if isinstance(step, int):
            value = [f"filler {i}" for i in range(step)] + [value]
        else:
            decoys = {step.encode("unicode_escape").decode("ascii"): "decoy",
                      "".join(ch for ch in step if ord(ch) >= 0x20): "decoy"}
            decoys.pop(step, None)
            value = {**decoys, step: value}
    return value


@pytest.mark.parametrize("key", ROUND_TRIP_KEYS, ids=[repr(k) for k in ROUND_TRIP_KEYS])
def test_format_path_round_trips_through_resolve_steps(key):
    steps = ("messages", 1, key, 0)
    document = _document_at(steps, "the node")
    path = format_path(steps)
    assert resolve_steps(document, path) == (steps, "the node")


_key_chars = st.one_of(
    st.sampled_from("'\\.- \"$*@[](){}`"),
    st.characters(codec="utf-8"),
    st.characters(max_codepoint=0x1F),
)
_steps = st.lists(st.one_of(st.integers(0, 4), st.text(alphabet=_key_chars, max_size=6)), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(steps=_steps.map(tuple))
def test_format_path_round_trip_property(steps):
    document = _document_at(steps, "leaf")
    path = format_path(steps)
    assert NORMALIZED.match(path), path
    assert resolve_steps(document, path) == (steps, "leaf")


def test_format_path_is_the_rfc9535_normalized_form():
    assert format_path(("messages", 12, "content")) == "$['messages'][12]['content']"
    assert format_path(("it's", "a\\b")) == "$['it\\'s']['a\\\\b']"
    assert format_path(()) == "$"
