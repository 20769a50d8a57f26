"""The core's pure helpers one rule at a time (issue 51's mutation benchmark): identity hashes,
safe display, JSON paths, the source filter, authority, trusted models, run lookups, input errors.
Each assertion is an exact value, so a changed constant, comparison or branch shows here."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_assets.core.actors import user_actor
from nexus_assets.core.display import json_for_terminal, visible
from nexus_assets.core.fingerprint import (
    brick_id,
    canonical_json,
    fingerprint,
    node_checksum,
    normalize,
    sha256_hex,
)
from nexus_assets.core.links import DEFAULT_BASE, topic_url
from nexus_assets.core.models import (
    Brick,
    ExtractionPolicy,
    Manifest,
    ManifestEntry,
    ManifestHead,
    Node,
    Run,
    SourceAddress,
    SourceFilter,
    Topic,
    trusted,
)
from nexus_assets.core.paths import (
    PathError,
    depth_of,
    format_path,
    resolve_steps,
    resolve_string,
    string_leaves,
    value_at,
)
from nexus_assets.core.utf8 import utf8_problem
from nexus_assets.core.validation import explain
from nexus_assets.core.wording import is_title_case

ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


# Identity ---------------------------------------------------------------------------------------


def test_identity_hashes_are_sha256_over_the_normalized_text():
    assert sha256_hex("abc") == sha256_hex(b"abc") == ABC
    assert normalize("  Ｆｏｏ\u00a0 BAR\n\tbaz ") == "foo bar baz"
    assert fingerprint("  ABC ") == ABC
    assert brick_id("topic", "fp") == hashlib.sha256(b"topic:fp").hexdigest()
    assert node_checksum(" ABC ") == hashlib.sha256(b" ABC ").hexdigest()
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'


# Showing text ---------------------------------------------------------------------------------------


def test_control_characters_are_shown_not_obeyed():
    assert visible("a\x1b[2Kb\tc\r\nd\re\x7f\x9f\x00") == "a\\x1b[2Kb\tc\r\nd\\x0de\\x7f\\x9f\\x00"
    assert visible("") == "" and visible("plain é") == "plain é"
    assert json_for_terminal('"\x85\x7f é\x1b"') == '"\\u0085\\u007f é\x1b"'


def test_topic_links_quote_the_id_under_the_base():
    assert topic_url("a b/c") == f"{DEFAULT_BASE}/topics/a%20b%2Fc"
    assert topic_url("t", "http://h:1/") == "http://h:1/topics/t"
    assert topic_url("t", "http://BOX/") == "http://BOX/topics/t"


def test_the_actor_is_the_user_and_the_command(monkeypatch):
    assert user_actor("nexus activate", "alice") == "alice (nexus activate)"
    monkeypatch.setenv("LOGNAME", "bob")
    assert user_actor("nexus forget") == "bob (nexus forget)"


def test_text_that_is_not_utf8_names_the_byte_or_the_character():
    assert utf8_problem("plain é") is None
    assert utf8_problem("é\udcff") == "not valid UTF-8 at byte 2 (0xff)"
    assert utf8_problem("ab\udcc3") == "not valid UTF-8 at byte 2 (0xc3)"
    assert utf8_problem("a\ud800") == "not valid UTF-8 at character 1 (U+D800)"


def test_a_title_is_mostly_capitalised_words():
    assert is_title_case(["The", "Pure", "Gardening", "Company", "Difference"])
    assert is_title_case(["A", "Tale", "of", "Two", "Cities"])
    assert is_title_case(['"The', "Storage", 'Plan"'])  # quote marks aside
    assert not is_title_case(["Storage", "Plan"])  # fewer than three words
    assert not is_title_case(["of", "the", "and"])  # only small words
    assert is_title_case(["One", "Two", "Three", "Four", "five"])  # four of five: 80%
    assert not is_title_case(["One", "Two", "Three", "four", "five"])
    # Brackets and quotes around a word neither make it significant nor hide its capital.
    assert is_title_case(["(of", "Big", "Red", "Dogs"]) and is_title_case(["(Big", "Red", "Dogs", "Run"])


# Input errors ----------------------------------------------------------------------------------------


class _Message(BaseModel):
    model_config = ConfigDict(strict=True)
    text: str


class _Conversation(BaseModel):
    messages: list[_Message]
    title: str
    size: int = Field(ge=0)


def _error(value) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Conversation.model_validate(value)
    return caught.value


def test_input_errors_are_said_as_paths_into_the_input():
    exc = _error({"messages": ["x", {"text": 2}], "size": -1})
    assert explain(exc, whole="conversation") == (
        "messages[0]: input should be a valid dictionary; messages[1].text: input should be a valid string; "
        "title: field required; size: input should be greater than or equal to 0"
    )
    assert explain(exc, whole="conversation", limit=2) == (
        "messages[0]: input should be a valid dictionary; messages[1].text: input should be a valid string (+2 more)"
    )
    assert explain(_error(3), whole="conversation") == "conversation: input should be a valid dictionary"
    # Five errors are all named; a sixth is counted.
    five = _error({"messages": ["a", "b", "c", "d"], "size": 0})
    assert explain(five, whole="c").count(": input should be") + explain(five, whole="c").count(": field required") == 5
    assert "more)" not in explain(five, whole="c")
    six = _error({"messages": ["a", "b", "c", "d", "e"], "size": 0})
    assert explain(six, whole="c").endswith("; messages[4]: input should be a valid dictionary (+1 more)")


# JSON paths -------------------------------------------------------------------------------------------

DOC = {"a\nb": "x", "m": [{"c": "t0"}, {"c": "t1"}], "s": ["x", "y"], "n": {"k": 5}}


def test_a_path_is_written_in_normalized_form_with_escapes():
    format_path.cache_clear()  # paths met before (by other tests of this process) come from the cache
    assert format_path(("a'b\\c\b\f\n\r\t\x01", 3, "plain")) == "$['a\\'b\\\\c\\b\\f\\n\\r\\t\\u0001'][3]['plain']"
    assert format_path(("a b\x1f",)) == "$['a b\\u001f']"  # a space is no control character


@pytest.mark.parametrize("path, steps, value", [
    ("$['a\\nb']", ("a\nb",), "x"),
    ("$.m[-1].c", ("m", 1, "c"), "t1"),
    ("$.s[-2]", ("s", 0), "x"),
    ("$.m[0].c", ("m", 0, "c"), "t0"),
    ("$['m'][1]['c']", ("m", 1, "c"), "t1"),
    ("$.n.k", ("n", "k"), 5),
])
def test_a_path_resolves_to_its_normalized_steps(path, steps, value):
    assert resolve_steps(DOC, path) == (steps, value)


@pytest.mark.parametrize("path, reason, detail", [
    ("", "malformed_pointer", "json_path is empty"),
    ("  ", "malformed_pointer", "json_path is empty"),
    (None, "malformed_pointer", "json_path is empty"),
    ("$['zz']", "path_not_found", "json_path \"$['zz']\" matches no node"),
    ("$['s'][5]", "path_not_found", "json_path \"$['s'][5]\" matches no node"),
    ("$['s']['k']", "path_not_found", "json_path \"$['s']['k']\" matches no node"),
    ("$.zz", "path_not_found", "json_path '$.zz' matches no node"),
    ("$.m[*].c", "path_not_singular", "json_path '$.m[*].c' matches 2 nodes"),
    ("$['a\\nc']", "path_not_found", "json_path \"$['a\\\\nc']\" matches no node"),
    ("$..['a\\nb','a\\nb']", "path_not_singular", "json_path \"$..['a\\\\nb','a\\\\nb']\" matches 2 nodes"),
    ("$.m[0]", "node_not_string", "json_path '$.m[0]' names a dict, not a string"),
    ("$.n.k", "node_not_string", "json_path '$.n.k' names a int, not a string"),
])
def test_a_path_that_names_no_single_string_says_why(path, reason, detail):
    with pytest.raises(PathError) as caught:
        resolve_string(DOC, path)
    assert (caught.value.reason, caught.value.detail, str(caught.value)) == (reason, detail, detail)


@pytest.mark.parametrize("path, start", [
    ("$[", "json_path '$[' is not valid JSONPath: "),
    ("$['a\\q']", "json_path \"$['a\\\\q']\" is not valid JSONPath: "),
])
def test_a_path_that_does_not_parse_is_malformed(path, start):
    with pytest.raises(PathError) as caught:
        resolve_steps(DOC, path)
    assert caught.value.reason == "malformed_pointer" and caught.value.detail.startswith(start)


def test_a_path_that_cannot_be_evaluated_is_not_found():
    with pytest.raises(PathError) as caught:
        resolve_steps({"s": "text"}, "$.s[0]")
    assert caught.value.reason == "path_not_found"
    with pytest.raises(PathError) as caught:
        resolve_steps(DOC, "$.n & $.zz")
    assert caught.value.reason == "path_not_found"
    assert caught.value.detail.startswith("json_path '$.n & $.zz' could not be evaluated: ")


def test_steps_are_followed_only_into_their_kind_of_node():
    assert value_at(DOC, ("m", 1, "c")) == "t1"
    with pytest.raises(TypeError, match="^index into a non-array$"):
        value_at(DOC, ("n", 0))
    with pytest.raises(TypeError, match="^key into a non-object$"):
        value_at(DOC, ("s", "k"))


def test_string_leaves_in_document_order_and_depth():
    doc = {"b": ["x", {"c": "y"}], "a": "z", "n": 3}
    assert list(string_leaves(doc)) == [(("b", 0), "x"), (("b", 1, "c"), "y"), (("a",), "z")]
    assert list(string_leaves("only")) == [((), "only")]
    assert depth_of({"a": [1, [2]]}) == 3 and depth_of({"a": {"b": {}}}) == 2
    assert depth_of(3) == 0 and depth_of([]) == 0 and depth_of([[[]], 1]) == 2


# Topics ---------------------------------------------------------------------------------------------


def _admits(f: SourceFilter, run="r1", file="exports/chatgpt/a.zip", title="Marathon plan", started="2025-03-10T09:00:00Z"):
    return f.admits(run, file, title, started)


def test_a_source_filter_admits_a_run_only_by_every_criterion_it_names():
    assert _admits(SourceFilter())
    assert _admits(SourceFilter(runs=("r1", "r2"))) and not _admits(SourceFilter(runs=("r2",)))
    assert _admits(SourceFilter(files=("chatgpt/*.zip",)))
    assert _admits(SourceFilter(files=("chatgpt/*.zip",)), file="exports\\chatgpt\\a.zip")
    assert not _admits(SourceFilter(files=("claude/*.zip",)))
    assert not _admits(SourceFilter(files=("chatgpt/*.zip",)), file=None)
    assert _admits(SourceFilter(titles=("^Mara", "x")))
    assert not _admits(SourceFilter(titles=("^plan",)))
    assert not _admits(SourceFilter(titles=("plan",)), title=None)
    assert _admits(SourceFilter(since="2025-03-10", until="2025-03-10"))
    assert not _admits(SourceFilter(since="2025-03-11"))
    assert not _admits(SourceFilter(until="2025-03-09"))
    assert _admits(SourceFilter(since="2025-03-01")) and _admits(SourceFilter(until="2025-03-31"))
    assert not _admits(SourceFilter(since="2025-03-01"), started=None)
    assert not _admits(SourceFilter(until="2025-03-31"), started="someday")


def test_a_bad_title_pattern_is_refused():
    with pytest.raises(ValidationError, match="title pattern '\\(' is not a regular expression"):
        SourceFilter(titles=("(",))


def _topic(**kw) -> Topic:
    return Topic(topic_id="t", display_name="T", extraction_policy=ExtractionPolicy(scope_description="s"), **kw)


def test_authority_is_the_best_level_whose_pattern_matches():
    topic = _topic(authority={"records/*": 1, "records/reviewed/*": 2, "*.md": 2})
    assert topic.authority_of("records/reviewed/a.md") == 1
    assert topic.authority_of("notes/a.md") == 2
    assert topic.authority_of("notes/a.json") == 3
    assert topic.authority_of(None) == 3
    assert _topic().authority_of("records/a") == 3


# Addresses, trusted models, runs ----------------------------------------------------------------


def _address(**kw) -> SourceAddress:
    return SourceAddress(**{"run_id": "r", "json_path": "$['m']", "start": 0, "end": 3, "node_checksum": "c", **kw})


def test_an_address_is_its_place_not_its_description():
    a = _address(node_type="user_message", speaker="ana", stale=True, branch="abandoned")
    assert a == _address() and hash(a) == hash(_address()) == hash(("r", "$['m']", 0, 3, "c"))
    assert a != _address(end=4) and a != _address(run_id="q")
    assert (a == "r") is False


def test_a_trusted_model_equals_the_validated_one_fields_in_order():
    address = trusted(SourceAddress, run_id="r", json_path="$['m']", start=0, end=3, node_checksum="c")
    assert address.model_dump() == _address().model_dump()
    assert list(address.model_dump()) == list(SourceAddress.model_fields)
    assert address.model_fields_set == set(SourceAddress.model_fields)
    assert address.model_copy(update={"stale": True}).stale and not address.stale
    entry = trusted(ManifestEntry, order_index=1, brick_id="b", fingerprint="f", state="FINAL")
    assert entry == ManifestEntry(order_index=1, brick_id="b", fingerprint="f", state="FINAL")
    brick = trusted(Brick, brick_id="b", topic_id="t", content="x", fingerprint="f", state="FINAL", order_index=0,
                    sources=(_address(branch="abandoned"),))
    assert brick.abandoned and brick.superseded_by is None and brick.stale is False
    assert json.loads(brick.model_dump_json())["sources"][0]["branch"] == "abandoned"


class _WithFactory(BaseModel):
    name: str
    tags: list[str] = Field(default_factory=list)


def test_a_trusted_model_with_a_default_factory_is_constructed():
    obj = trusted(_WithFactory, name="n", tags=["a"])
    assert obj.model_dump() == {"name": "n", "tags": ["a"]}
    assert obj.model_fields_set == {"name", "tags"}
    assert trusted(_WithFactory, name="n").model_fields_set == {"name", "tags"}  # every field counts as given


def test_a_manifest_head_counts_its_bricks():
    entry = ManifestEntry(order_index=0, brick_id="b", fingerprint="f", state="FINAL")
    manifest = Manifest(topic_id="t", previous_hash="p", bricks=(entry, entry), manifest_hash="h")
    assert ManifestHead.of(manifest) == ManifestHead("h", "p", 2)


def test_a_run_finds_the_kind_and_timestamp_of_a_path_through_its_message():
    nodes = (
        Node(("m", 0, "content"), "user_message", "2025-01-01", message_steps=("m", 0)),
        Node(("m", 1, "parts", 0), "assistant_message", None, message_steps=("m", 1), branch="abandoned"),
        Node(("m", 2, "content"), "tool_message", "2025-01-03"),
        Node(("title",), "other", "2025-01-04"),
    )
    run = Run("r", "CLOSED", "2024-12-31", "nexus", None, nodes)
    assert run.kind_of(("m", 0, "content")) == ("user_message", "current")
    assert run.kind_of(("m", 0, "content", "deeper")) == ("user_message", "current")
    assert run.kind_of(("m", 0, "name")) == ("user_message", "current")  # the message's kind
    assert run.kind_of(("m", 1, "parts", 0)) == ("assistant_message", "abandoned")
    assert run.kind_of(("x",)) == (None, "current")
    assert run.kind_of(("m", 2, "content", "x")) == ("tool_message", "current")  # found one step up
    assert run.kind_of(("title", "x")) == ("other", "current")
    assert run.timestamp_of(("m", 2, "content", "x")) == "2025-01-03"
    assert run.timestamp_of(("title", "x")) == "2025-01-04"
    assert run.timestamp_of(("m", 0, "content", "deeper")) == "2025-01-01"
    assert run.timestamp_of(("m", 1, "parts", 0)) == "2024-12-31"  # no stamp: the run's start
    assert run.timestamp_of(("m", 2, "content")) == "2025-01-03"
    assert run.timestamp_of(("m", 2)) == "2024-12-31"
    assert run.node_index[format_path(("m", 2, "content"))] is nodes[2]
