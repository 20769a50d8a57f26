"""Resolution's pure pieces one rule at a time (issue 51's mutation benchmark, docs/invariants.md §4
and §6): timestamps as they sort, order keys as bytes, brick states, the superset search and its
anchors, and the ranking an incremental resolution re-applies."""

from __future__ import annotations

import pytest

from nexus_assets.core.fingerprint import brick_id, fingerprint
from nexus_assets.core.models import Occurrence, SourceAddress
from nexus_assets.resolve.incremental import StoredBrick, ranked_order
from nexus_assets.core.timestamps import normalize_timestamp
from nexus_assets.resolve.order import (
    brick_sort_key,
    canonical_key,
    first_ingestion,
    key_bytes,
    occurrence_key,
)
from nexus_assets.resolve.rules import (
    _anchors,
    _Haystack,
    _held,
    _smallest_supersets,
    _Text,
    brick_state,
    resolve_topic,
)

T = "units"


@pytest.mark.parametrize("value, expected", [
    (None, None), (True, None), (False, None), ([1], None), ("", None), ("  ", None), ("nope", None),
    (1e20, None), (float("nan"), None),
    (0, "1970-01-01T00:00:00.000000Z"),
    (1.5, "1970-01-01T00:00:01.500000Z"),
    ("2025-01-02T03:04:05Z", "2025-01-02T03:04:05.000000Z"),
    ("2025-01-02T03:04:05z", "2025-01-02T03:04:05.000000Z"),
    ("2025-01-02T03:04:05+02:00", "2025-01-02T01:04:05.000000Z"),
    ("2025-01-02 03:04:05", "2025-01-02T03:04:05.000000Z"),  # naive: taken as UTC
    (" 2025-01-02 ", "2025-01-02T00:00:00.000000Z"),
    ("0999-01-01T00:00:00Z", "0999-01-01T00:00:00.000000Z"),  # a four-digit year sorts before 2024
])
def test_timestamps_are_normalized_to_sortable_utc_or_missing(value, expected):
    assert normalize_timestamp(value) == expected


def test_order_keys_as_bytes_sort_as_the_tuples_do():
    assert key_bytes((True, "a\x00b", 5, ("x",), -1)) == (
        b"\x01" + b"a\x00\xffb\x00\x00" + (5 + (1 << 63)).to_bytes(8, "big") + b"x\x00\x00" + ((1 << 63) - 1).to_bytes(8, "big")
    )
    assert key_bytes((False,)) == b"\x00"
    keys = [("a",), ("a\x00",), ("ab",), ("b",)]
    assert sorted(keys, key=key_bytes) == keys
    ints = [(-5,), (0,), (3,), (1 << 40,)]
    assert sorted([(3,), (-5,), (1 << 40,), (0,)], key=key_bytes) == ints
    with pytest.raises(TypeError, match="^cannot encode float in an order key$"):
        key_bytes((1.5,))


def _occ(content: str, run: str, position: int, timestamp: str | None, start: int = 0, version_seq: int | None = None) -> Occurrence:
    address = SourceAddress(run_id=run, json_path=f"$['m'][{position}]", start=start, end=start + len(content), node_checksum="c")
    return Occurrence(topic_id=T, address=address, content=content, fingerprint=fingerprint(content), timestamp=timestamp,
                      position=position, version_seq=version_seq)


def test_occurrence_and_brick_keys_follow_the_ordering_rule():
    late, early = _occ("x", "r2", 1, "2025-01-02"), _occ("y", "r1", 5, "2025-01-01")
    missing = _occ("z", "r0", 0, None)
    assert sorted([missing, late, early], key=occurrence_key) == [early, late, missing]
    assert occurrence_key(late) == (False, "2025-01-02", "r2", 1, 0, 1, "$['m'][1]", "x")
    assert brick_sort_key(late, "chronological") == occurrence_key(late)
    assert brick_sort_key(late, "source-run-order") == ("r2", 1, 0, occurrence_key(late))
    assert brick_sort_key(late, "ingestion-order", 7) == (7, occurrence_key(late))
    assert brick_sort_key(late, "ingestion-order") == (1 << 62, occurrence_key(late))
    with pytest.raises(ValueError, match="^unknown ordering rule 'alphabetical'$"):
        brick_sort_key(late, "alphabetical")
    # Versions of one node: the oldest first, an unknown version last.
    v1, v2, vn = (_occ("x", "r", 0, "t", version_seq=s) for s in (1, 2, None))
    assert sorted([vn, v2, v1], key=canonical_key) == [v1, v2, vn]
    assert canonical_key(v2)[-4:] == (False, 2, "x", "c") and canonical_key(vn)[-4:-2] == (True, 0)


def test_first_ingestion_is_the_earliest_known():
    assert first_ingestion(["a", "b", "c"], {"b": 5, "c": 2}) == 2
    assert first_ingestion(["z"], {"b": 1}) is None


def test_a_brick_is_improvised_while_a_source_run_is_open():
    assert brick_state(["a", "b"], {"a": "CLOSED"}, sealed=False) == "IMPROVISE"  # an unknown run is open
    assert brick_state(["a", "b"], {"a": "CLOSED", "b": "OPEN"}, sealed=False) == "IMPROVISE"
    assert brick_state(["a", "b"], {"a": "CLOSED", "b": "CLOSED"}, sealed=False) == "FORMING"
    assert brick_state(["a"], {"a": "OPEN"}, sealed=True) == "FINAL"


def test_anchors_are_interior_triples_pairs_or_words():
    assert _anchors("a b c d e") == [("b", "c", "d")]
    assert _anchors("a b c d e f") == [("b", "c", "d"), ("c", "d", "e")]
    assert _anchors("a b c d") == [("b", "c")]
    assert _anchors("a b c") == [("b",)]
    assert _anchors("a b") == [] and _anchors("a") == []
    assert _held("x a b c y", {("a", "b", "c")}, {("b", "c")}, {("y",)}) == [("a", "b", "c"), ("b", "c"), ("y",)]
    assert _held("x a b c y", set(), set(), {("q",)}) == []


def test_the_smallest_strict_superset_wins_ties_by_canonical_order():
    texts = [_Text("1", "b c"), _Text("2", "a b c d"), _Text("3", "b c d"), _Text("4", "x b c d y"), _Text("5", "c"),
             _Text("6", "b c d e f g"), _Text("7", "z b c d e f"), _Text("8", "c d e f")]
    assert _smallest_supersets(texts, texts) == {"1": "3", "3": "2", "5": "1", "8": "6"}
    # Ties by the order given instead of the list's.
    assert _smallest_supersets([texts[7]], texts, {t.brick_id: -int(t.brick_id) for t in texts}) == {"8": "7"}
    assert _smallest_supersets([texts[7]], texts, {t.brick_id: int(t.brick_id) for t in texts}) == {"8": "6"}
    # An empty text, or one with the separator, is never searched.
    odd = [_Text("e", ""), _Text("s", "b\x00c"), _Text("9", "b c")]
    assert _smallest_supersets(odd[:2], odd) == {}


def test_the_haystack_finds_each_longer_text_once():
    texts = [_Text("1", "c c"), _Text("2", "c"), _Text("3", "a c"), _Text("4", "b")]
    assert [t.brick_id for t in _Haystack(texts).containing("c")] == ["1", "3"]
    assert list(_Haystack(texts).containing("q")) == []


def test_resolution_supersedes_an_improvised_text_by_its_smallest_superset():
    occs = [_occ("The vault", "r1", 0, "2025-01-01"), _occ("The vault keeps bricks", "r1", 1, "2025-01-02"),
            _occ("The vault keeps bricks forever", "r1", 2, "2025-01-03")]
    bricks = resolve_topic(T, occs, run_status={"r1": "OPEN"})
    assert [(b.content, b.state, b.order_index, b.superseded_by) for b in bricks] == [
        ("The vault keeps bricks forever", "IMPROVISE", 0, None),
        ("The vault", "SUPERSEDED", None, brick_id(T, fingerprint("The vault keeps bricks"))),
        ("The vault keeps bricks", "SUPERSEDED", None, brick_id(T, fingerprint("The vault keeps bricks forever"))),
    ]
    closed = resolve_topic(T, occs, run_status={"r1": "CLOSED"})
    assert [(b.state, b.order_index) for b in closed] == [("FORMING", 0), ("FORMING", 1), ("FORMING", 2)]
    with pytest.raises(ValueError, match="^occurrence of topic 'units' passed to resolution of 'other'$"):
        resolve_topic("other", occs, run_status={})


def test_the_ranking_keeps_final_places_and_ranks_the_rest_after_them():
    rows = [("f", "FINAL", 0, b"9", None), ("s", "SUPERSEDED", 4, b"0", None), ("a", "FORMING", 7, b"5", b"1"),
            ("b", "IMPROVISE", None, b"2", None), ("g", "FINAL", None, b"3", None)]
    assert ranked_order(rows) == {"f": 0, "s": None, "a": 1, "b": 2, "g": None}


def test_a_stored_brick_is_retired_only_when_superseded_by_nothing():
    row = StoredBrick("b", "fp", "text", "SUPERSEDED", None, b"k")
    assert row.retired and not StoredBrick("b", "fp", "text", "SUPERSEDED", "o", b"k").retired
    assert not StoredBrick("b", "fp", "text", "FORMING", None, b"k").retired
