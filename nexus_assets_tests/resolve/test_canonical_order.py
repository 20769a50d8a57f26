"""§4 canonical order.

A brick's order key is its canonical first occurrence: (source timestamp — message timestamp,
else the run's start — then run_id, then the node's position in document order, then start).
`chronological` sorts by that key (missing timestamps last); `source-run-order` by run_id then
document order; `ingestion-order` by first ingestion, then the key.
"""

from __future__ import annotations

import random

import pytest

from nexus_assets.core.timestamps import normalize_timestamp
from nexus_assets.resolve.order import (
    brick_sort_key,
    occurrence_key,
)
from nexus_assets.resolve.rules import resolve_topic
from nexus_assets_tests.strategies import TOPIC, make_run, occ, statuses


def ordered(occurrences, rule="chronological", ingestion_seq=None, runs=()):
    status = statuses(*runs) if runs else {o.address.run_id: "OPEN" for o in occurrences}
    bricks = resolve_topic(TOPIC, occurrences, run_status=status, ordering_rule=rule, ingestion_seq=ingestion_seq)
    assert [b.order_index for b in bricks] == list(range(len(bricks)))
    return [b.content for b in bricks]


def all_orders(occurrences, **kwargs):
    """The resolved order, checked to be the same for a few arrival orders."""
    rng = random.Random(1)
    results = {tuple(ordered(list(occurrences), **kwargs)), tuple(ordered(list(reversed(occurrences)), **kwargs))}
    for _ in range(4):
        shuffled = list(occurrences)
        rng.shuffle(shuffled)
        results.add(tuple(ordered(shuffled, **kwargs)))
    assert len(results) == 1
    return list(results.pop())


# --- the corpus ------------------------------------------------------------------------------

# run-b starts first but its second message is stamped late; run-a's messages carry offsets.
RUN_A = make_run("run-a", ["A0 at 08:00Z.", "A1 no stamp, run start."],
                 started_at="2024-03-01T11:30:00+02:00",  # 09:30Z
                 timestamps=["2024-03-01T10:00:00+02:00", None])
RUN_B = make_run("run-b", ["B0 run start.", "B1 at 12:00Z."],
                 started_at="2024-03-01T07:00:00Z",
                 timestamps=[None, 1709294400])  # 2024-03-01T12:00:00Z
RUN_C = make_run("run-c", ["C0 no time at all.", "C1 no time either."])
RUN_D = make_run("run-d", ["D0 also untimed."])
RUN_E = make_run("run-e", ["E0 naive 09:30.", "E0 naive 09:30 again."],
                 timestamps=["2024-03-01T09:30:00", "2024-03-01T09:30:00"])
RUNS = (RUN_A, RUN_B, RUN_C, RUN_D, RUN_E)
OCCS = [
    occ(RUN_A, "A0 at 08:00Z.", 0),
    occ(RUN_A, "A1 no stamp, run start.", 1),
    occ(RUN_B, "B0 run start.", 0),
    occ(RUN_B, "B1 at 12:00Z.", 1),
    occ(RUN_C, "C0 no time at all.", 0),
    occ(RUN_C, "C1 no time either.", 1),
    occ(RUN_D, "D0 also untimed.", 0),
    occ(RUN_E, "E0 naive 09:30.", 0),
    occ(RUN_E, "E0 naive 09:30 again.", 1),
]


def test_chronological_by_timestamp_then_run_id_then_position_missing_last():
    assert all_orders(OCCS, runs=RUNS) == [
        "B0 run start.",  # 07:00Z (run start)
        "A0 at 08:00Z.",  # 08:00Z (message, +02:00)
        "A1 no stamp, run start.",  # 09:30Z (run start) — ties with run-e, run-a < run-e
        "E0 naive 09:30.",  # 09:30 naive = UTC, position 0
        "E0 naive 09:30 again.",  # same time, same run, position 1
        "B1 at 12:00Z.",  # epoch
        "C0 no time at all.",  # missing timestamps last, then run_id, then position
        "C1 no time either.",
        "D0 also untimed.",
    ]


def test_chronological_ties_within_a_node_go_by_start():
    run = make_run("r", "second part. first part.")
    occs = [occ(run, "first part."), occ(run, "second part.")]
    assert all_orders(occs) == ["second part.", "first part."]


def test_document_position_is_document_order_not_message_index_text():
    run = make_run("r", [f"message {i}." for i in range(12)])
    occs = [occ(run, f"message {i}.", i) for i in (11, 2, 10, 0, 1)]
    assert all_orders(occs) == ["message 0.", "message 1.", "message 2.", "message 10.", "message 11."]


def test_source_run_order_by_run_id_then_document_order_ignoring_time():
    assert all_orders(OCCS, rule="source-run-order", runs=RUNS) == [
        "A0 at 08:00Z.", "A1 no stamp, run start.",
        "B0 run start.", "B1 at 12:00Z.",
        "C0 no time at all.", "C1 no time either.",
        "D0 also untimed.",
        "E0 naive 09:30.", "E0 naive 09:30 again.",
    ]


def test_ingestion_order_by_first_ingestion_then_the_key():
    seq = {"run-d": 0, "run-b": 1, "run-a": 1, "run-c": 2}  # run-e never recorded: last
    assert all_orders(OCCS, rule="ingestion-order", ingestion_seq=seq, runs=RUNS) == [
        "D0 also untimed.",
        "B0 run start.", "A0 at 08:00Z.", "A1 no stamp, run start.", "B1 at 12:00Z.",  # seq 1, by the key
        "C0 no time at all.", "C1 no time either.",
        "E0 naive 09:30.", "E0 naive 09:30 again.",
    ]


def test_ingestion_order_uses_the_earliest_ingestion_of_any_source():
    late_run = make_run("late", ["Sync is nightly.", "Only late."])
    early_run = make_run("early", "SYNC IS NIGHTLY.")
    other = make_run("other", "Other text.")
    occs = [occ(late_run, "Sync is nightly."), occ(late_run, "Only late.", 1), occ(early_run, "SYNC IS NIGHTLY."),
            occ(other, "Other text.")]
    seq = {"early": 0, "other": 1, "late": 2}
    assert all_orders(occs, rule="ingestion-order", ingestion_seq=seq) == ["SYNC IS NIGHTLY.", "Other text.", "Only late."]


def test_brick_order_key_is_its_canonical_first_occurrence():
    late = make_run("z-late", "Sync is nightly.", started_at="2024-05-01T00:00:00Z")
    early = make_run("y-early", "sync is nightly.", started_at="2024-01-01T00:00:00Z")
    middle = make_run("x-middle", "Bricks are verbatim.", started_at="2024-03-01T00:00:00Z")
    occs = [occ(late, "Sync is nightly."), occ(early, "sync is nightly."), occ(middle, "Bricks are verbatim.")]
    assert all_orders(occs) == ["sync is nightly.", "Bricks are verbatim."]


def test_occurrence_key_shape():
    o = occ(RUN_A, "A0 at 08:00Z.", 0)
    assert occurrence_key(o)[:5] == (False, "2024-03-01T08:00:00.000000Z", "run-a", o.position, 0)
    untimed = occ(RUN_C, "C0 no time at all.", 0)
    assert occurrence_key(untimed)[:2] == (True, "")
    assert occurrence_key(o) < occurrence_key(untimed)
    assert brick_sort_key(o, "chronological") == occurrence_key(o)
    with pytest.raises(ValueError):
        brick_sort_key(o, "alphabetical")


def test_position_counts_string_leaves_in_document_order():
    run = make_run("r", ["first", "second"])
    # run_id and status come before the messages; role precedes content in each message.
    positions = {o.content: o.position for o in (occ(run, "first", 0), occ(run, "second", 1))}
    assert positions["first"] < positions["second"]
    assert run.positions[("messages", 0, "content")] == positions["first"]


# --- normalize_timestamp ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2024-03-01T10:00:00Z", "2024-03-01T10:00:00.000000Z"),
        ("2024-03-01T10:00:00z", "2024-03-01T10:00:00.000000Z"),
        ("2024-03-01T12:00:00+02:00", "2024-03-01T10:00:00.000000Z"),
        ("2024-03-01T05:30:00-04:30", "2024-03-01T10:00:00.000000Z"),
        ("2024-03-01T00:30:00+01:00", "2024-02-29T23:30:00.000000Z"),
        ("2024-03-01T10:00:00", "2024-03-01T10:00:00.000000Z"),
        ("2024-03-01 10:00:00", "2024-03-01T10:00:00.000000Z"),
        ("2024-03-01T10:00:00.123456Z", "2024-03-01T10:00:00.123456Z"),
        ("2024-03-01T10:00:00.5+00:00", "2024-03-01T10:00:00.500000Z"),
        ("  2024-03-01T10:00:00Z  ", "2024-03-01T10:00:00.000000Z"),
        ("2024-03-01", "2024-03-01T00:00:00.000000Z"),
        (1709287200, "2024-03-01T10:00:00.000000Z"),
        (1709287200.5, "2024-03-01T10:00:00.500000Z"),
        (0, "1970-01-01T00:00:00.000000Z"),
        (0.0, "1970-01-01T00:00:00.000000Z"),
    ],
)
def test_normalize_timestamp_readable(value, expected):
    assert normalize_timestamp(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        None, True, False, "", "   ", "garbage", "yesterday", "2024-13-01T00:00:00Z", "2024-02-30",
        "10:00", float("nan"), float("inf"), -float("inf"), 1e20, [], {}, b"2024-03-01",
        # readable dates whose UTC instant falls outside the representable years
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
    ],
    ids=repr,
)
def test_normalize_timestamp_garbage_is_none(value):
    assert normalize_timestamp(value) is None


def test_normalized_timestamps_sort_as_strings_like_the_instants_they_name():
    values = ["0999-06-01T00:00:00Z", "1969-12-31T23:59:59Z", 0, "2024-03-01T12:00:00+02:00",
              1709287200.5, "2024-03-01T10:00:01Z"]
    normalized = [normalize_timestamp(v) for v in values]
    assert all(isinstance(n, str) for n in normalized)
    assert normalized == sorted(normalized)


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_run_with_an_out_of_range_timestamp_still_reads_with_the_timestamp_missing(stamp):
    run = make_run("r", "Sync is nightly.", started_at=stamp, timestamps=[stamp])
    assert run.started_at is None
    assert occ(run, "Sync is nightly.").timestamp is None
