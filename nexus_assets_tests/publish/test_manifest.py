"""The topic manifest: the ordered list of visible bricks (order_index, brick_id, fingerprint,
state) and a sha256 over its canonical JSON that chains to the previous manifest. A new manifest
is recorded only when that list changes."""

from __future__ import annotations

import hashlib
import json

import pytest

from nexus_assets.core.models import ManifestEntry
from nexus_assets.publish.manifest import (
    build_manifest,
    chain_problems,
    manifest_entries,
    manifest_hash,
)
from nexus_assets.resolve.rules import resolve_topic
from nexus_assets_tests.strategies import TOPIC, make_run, occ, statuses

RUN_A = make_run("run-a", ["Sync is nightly.", "Bricks are verbatim."], status="OPEN", started_at="2024-01-01T00:00:00Z")
RUN_B = make_run("run-b", "The sync is nightly. And fast.", status="OPEN", started_at="2024-01-02T00:00:00Z")
OCCS = [occ(RUN_A, "Sync is nightly."), occ(RUN_A, "Bricks are verbatim.", 1)]


def bricks_for(occurrences=OCCS, status=None, **kwargs):
    return resolve_topic(TOPIC, occurrences, run_status=status or statuses(RUN_A, RUN_B), **kwargs)


def test_hash_is_sha256_over_canonical_json():
    bricks = bricks_for()
    m = build_manifest(TOPIC, bricks, None)
    body = {
        "topic_id": TOPIC,
        "previous_hash": None,
        "bricks": [
            {"order_index": b.order_index, "brick_id": b.brick_id, "fingerprint": b.fingerprint, "state": b.state}
            for b in bricks
        ],
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert m.manifest_hash == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert m.topic_id == TOPIC and m.previous_hash is None
    assert [e.order_index for e in m.bricks] == [0, 1]


def test_hash_is_stable_across_calls_and_arrival_orders():
    one = build_manifest(TOPIC, bricks_for(OCCS), None)
    two = build_manifest(TOPIC, bricks_for(OCCS[::-1]), None)
    three = build_manifest(TOPIC, list(reversed(bricks_for(OCCS))), None)  # input list order is irrelevant
    assert one == two == three
    # A known value, worked out by hand rather than by the code under test: any change to the
    # hashing scheme (ids, fingerprints, states, key order, separators) shows up here.
    #   fingerprint = sha256("sync is nightly.")  = 68cf310d…13b29 ; brick_id = sha256(TOPIC + ":" + it) = 4f355205…d841f
    #   fingerprint = sha256("bricks are verbatim.") = 89641b83…8f95d ; brick_id = 07858e97…befde
    canonical = (
        '{"bricks":['
        '{"brick_id":"4f3552058fd14d78cc530849670b585b850203f223bf0b165b08825ae79d841f",'
        '"fingerprint":"68cf310d478811b01bb7eac070ecd26176a0da2adff1df7750020d42baf13b29","order_index":0,"state":"IMPROVISE"},'
        '{"brick_id":"07858e9791694da280166b0aa63fe1359bf8f06ccfb85a15b045813e7fdbefde",'
        '"fingerprint":"89641b8380866e8358663be2812a8bddddb912ee5a6e3e6f88fa40436618f95d","order_index":1,"state":"IMPROVISE"}'
        '],"previous_hash":null,"topic_id":"nexus-server-sync"}'
    )
    known = "536b4c981800e50efb950acb68c112fed24ed4bb09fe394bf4d513183fd00312"
    assert hashlib.sha256(canonical.encode("utf-8")).hexdigest() == known
    assert one.manifest_hash == known


def test_superseded_bricks_are_not_in_the_manifest():
    bricks = bricks_for(OCCS + [occ(RUN_B, "The sync is nightly. And fast.")])
    assert any(b.state == "SUPERSEDED" for b in bricks)
    entries = manifest_entries(bricks)
    assert {e.brick_id for e in entries} == {b.brick_id for b in bricks if b.state != "SUPERSEDED"}
    assert [e.order_index for e in entries] == list(range(len(entries)))


def _entries():
    return manifest_entries(bricks_for())


def test_hash_changes_when_order_changes():
    a, b = _entries()
    swapped = (a.model_copy(update={"order_index": 1}), b.model_copy(update={"order_index": 0}))
    assert manifest_hash(TOPIC, None, (a, b)) != manifest_hash(TOPIC, None, (b, a))
    assert manifest_hash(TOPIC, None, (a, b)) != manifest_hash(TOPIC, None, swapped)


def test_hash_changes_when_state_changes():
    entries = _entries()
    forming = tuple(e.model_copy(update={"state": "FORMING"}) for e in entries)
    assert manifest_hash(TOPIC, None, entries) != manifest_hash(TOPIC, None, forming)
    closed = build_manifest(TOPIC, bricks_for(status={"run-a": "CLOSED", "run-b": "CLOSED"}), None)
    assert closed.manifest_hash != build_manifest(TOPIC, bricks_for(), None).manifest_hash


def test_hash_changes_when_the_brick_set_changes():
    entries = _entries()
    assert manifest_hash(TOPIC, None, entries) != manifest_hash(TOPIC, None, entries[:1])
    extra = ManifestEntry(order_index=2, brick_id="0" * 64, fingerprint="1" * 64, state="IMPROVISE")
    assert manifest_hash(TOPIC, None, entries) != manifest_hash(TOPIC, None, entries + (extra,))


def test_hash_depends_on_topic_and_previous_hash():
    entries = _entries()
    assert manifest_hash(TOPIC, None, entries) != manifest_hash("other-topic", None, entries)
    assert manifest_hash(TOPIC, None, entries) != manifest_hash(TOPIC, "0" * 64, entries)


def test_build_manifest_returns_none_when_the_list_is_unchanged():
    first = build_manifest(TOPIC, bricks_for(), None)
    assert build_manifest(TOPIC, bricks_for(), first) is None
    assert build_manifest(TOPIC, bricks_for(OCCS[::-1]), first) is None
    # a LINK adds a source but leaves the list (id, fingerprint, state, order) as it was
    linked = OCCS + [occ(make_run("run-c", "SYNC IS NIGHTLY.", started_at="2024-05-01T00:00:00Z"), "SYNC IS NIGHTLY.")]
    assert build_manifest(TOPIC, bricks_for(linked, status={"run-a": "OPEN", "run-c": "OPEN"}), first) is None


def test_build_manifest_chains_to_the_previous_one_when_the_list_changes():
    first = build_manifest(TOPIC, bricks_for(), None)
    second = build_manifest(TOPIC, bricks_for(status={"run-a": "CLOSED"}), first)
    assert second is not None
    assert second.previous_hash == first.manifest_hash
    assert second.manifest_hash == manifest_hash(TOPIC, first.manifest_hash, second.bricks)
    assert [e.state for e in second.bricks] == ["FORMING", "FORMING"]


def test_build_manifest_of_an_empty_topic():
    m = build_manifest(TOPIC, [], None)
    assert m is not None and m.bricks == ()
    assert build_manifest(TOPIC, [], m) is None


def _chain():
    first = build_manifest(TOPIC, bricks_for(OCCS[:1]), None)
    second = build_manifest(TOPIC, bricks_for(OCCS), first)
    third = build_manifest(TOPIC, bricks_for(OCCS, status={"run-a": "CLOSED"}), second)
    fourth = build_manifest(TOPIC, bricks_for(OCCS, status={"run-a": "CLOSED"}, sealed=True), third)
    return [first, second, third, fourth]


def test_intact_chain_has_no_problems():
    chain = _chain()
    assert all(m is not None for m in chain)
    assert chain_problems(chain) == []
    assert chain_problems([]) == []


@pytest.mark.parametrize("index", range(4))
def test_altered_bricks_break_the_chain(index):
    chain = _chain()
    m = chain[index]
    altered = m.bricks[:-1] if len(m.bricks) > 1 else (m.bricks[0].model_copy(update={"state": "FINAL"}),)
    chain[index] = m.model_copy(update={"bricks": altered})
    problems = chain_problems(chain)
    assert problems and any(f"#{index}" in p for p in problems)


@pytest.mark.parametrize("index", range(4))
def test_altered_brick_fields_break_the_chain(index):
    chain = _chain()
    m = chain[index]
    entry = m.bricks[0]
    for change in ({"fingerprint": "f" * 64}, {"brick_id": "b" * 64}, {"order_index": 7}, {"state": "SUPERSEDED"}):
        copy = list(chain)
        copy[index] = m.model_copy(update={"bricks": (entry.model_copy(update=change),) + m.bricks[1:]})
        assert chain_problems(copy), change


@pytest.mark.parametrize("index", range(4))
def test_altered_previous_hash_breaks_the_chain(index):
    chain = _chain()
    chain[index] = chain[index].model_copy(update={"previous_hash": "e" * 64})
    problems = chain_problems(chain)
    assert problems and any(f"#{index}" in p for p in problems)


@pytest.mark.parametrize("index", range(4))
def test_a_recomputed_hash_still_breaks_the_link_to_the_next_manifest(index):
    """Rewriting a manifest *and* its hash is caught by the next one (or, for the last, by its content)."""
    chain = _chain()
    m = chain[index]
    bricks = (m.bricks[0].model_copy(update={"fingerprint": "f" * 64}),) + m.bricks[1:]
    forged = m.model_copy(update={"bricks": bricks, "manifest_hash": manifest_hash(m.topic_id, m.previous_hash, bricks)})
    assert forged.manifest_hash != m.manifest_hash
    chain[index] = forged
    if index < len(chain) - 1:
        assert chain_problems(chain)
    else:
        assert chain_problems(chain) == []  # the head alone cannot be checked without an outside anchor


def test_dropped_or_reordered_manifests_break_the_chain():
    chain = _chain()
    assert chain_problems(chain[1:])
    assert chain_problems([chain[0], chain[2], chain[3]])
    assert chain_problems([chain[1], chain[0], chain[2], chain[3]])
