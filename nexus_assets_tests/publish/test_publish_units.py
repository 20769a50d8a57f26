"""The publish rules without a vault (issue 51's mutation benchmark, docs/invariants.md §1 and §7):
the FINAL-brick guard, the seal check, the manifest hash and its chain, each problem by its exact
line, so a dropped check or a changed message fails here with the rule's name."""

from __future__ import annotations

import hashlib

from nexus_assets.core.fingerprint import brick_id, canonical_json, fingerprint
from nexus_assets.core.models import (
    Brick,
    Manifest,
    ManifestEntry,
    SourceAddress,
    Tombstone,
)
from nexus_assets.core.listing import canonical_entries, entries_sha256
from nexus_assets.publish.immutability import final_brick_changes, final_problems
from nexus_assets.publish.manifest import (
    altered,
    build_manifest,
    chain_problems,
    hash_of_listing,
    link_problems,
    manifest_entries,
    manifest_hash,
    next_manifest,
    tombstone_manifest,
)

T = "walk"


def _source(run: str = "r1") -> SourceAddress:
    return SourceAddress(run_id=run, json_path="$['m']", start=0, end=4, node_checksum="c")


def _brick(content: str, order: int, state: str = "FINAL", **kw) -> Brick:
    fp = fingerprint(content)
    values = {"brick_id": brick_id(T, fp), "topic_id": T, "content": content, "fingerprint": fp, "state": state,
              "order_index": order, "sources": (_source(),), **kw}
    return Brick(**values)


A, B = _brick("Alpha runs.", 0), _brick("Beta runs.", 1)


def _sealed(*bricks: Brick) -> Manifest:
    entries = manifest_entries(bricks)
    return Manifest(topic_id=T, previous_hash=None, bricks=entries, manifest_hash=manifest_hash(T, None, entries))


# The guard -----------------------------------------------------------------------------------------


def test_only_stale_may_change_on_a_final_brick():
    prior = {A.brick_id: A, B.brick_id: B}
    assert final_brick_changes(prior, [A.model_copy(update={"stale": True}), B]) == []
    changed = A.model_copy(update={"content": "ALPHA runs.", "order_index": 5})
    assert final_brick_changes(prior, [changed, B]) == [
        f"FINAL brick {A.brick_id[:12]} of topic 'walk': content, order_index would change"
    ]
    assert final_brick_changes(prior, [A]) == [f"FINAL brick {B.brick_id[:12]} of topic 'walk' would be dropped"]


def test_a_brick_not_yet_final_may_change_or_go():
    forming = _brick("Gamma runs.", 2, state="FORMING")
    prior = {forming.brick_id: forming}
    assert final_brick_changes(prior, [forming.model_copy(update={"order_index": 9})]) == []
    assert final_brick_changes(prior, []) == []
    assert final_brick_changes({}, [A]) == []


# The seal check ------------------------------------------------------------------------------------


def test_an_intact_sealed_topic_has_no_problems():
    sealed = _sealed(A, B)
    snapshot = {A.brick_id: A, B.brick_id: B}
    assert final_problems(T, [A, B], sealed, snapshot, sealed) == []
    assert final_problems(T, [A, B], sealed, snapshot, None) == []
    assert final_problems(T, [_brick("Open.", 0, state="FORMING")], None, {}, None) == []


def test_final_bricks_without_a_seal_are_named():
    assert final_problems(T, [B, A], None, {}, None) == [
        f"topic 'walk' has 2 FINAL bricks but no sealed manifest: {', '.join(sorted([A.brick_id[:12], B.brick_id[:12]]))}"
    ]


def _label(b: Brick) -> str:
    return f"FINAL brick #{b.order_index} {b.brick_id[:12]} of 'walk'"


def test_each_way_a_sealed_brick_can_differ_is_named():
    sealed = _sealed(A, B)
    snapshot = {A.brick_id: A, B.brick_id: B}
    edited = A.model_copy(update={"content": "Alpha walks.", "state": "FORMING", "order_index": 3})
    recomputed = fingerprint("Alpha walks.")
    assert final_problems(T, [edited, B], sealed, snapshot, sealed) == [
        f"{_label(A)}: state is now FORMING",
        f"{_label(A)}: order_index is now 3",
        f"{_label(A)}: content no longer matches its sealed fingerprint (recomputed {recomputed[:12]}… != {A.fingerprint[:12]}…)",
        f"{_label(A)}: content differs from the text sealed",
    ]
    refingered = A.model_copy(update={"fingerprint": "f" * 64, "sources": (_source("r2"),)})
    assert final_problems(T, [refingered, B], sealed, snapshot, sealed) == [
        f"{_label(A)}: stored fingerprint ffffffffffff… differs from the sealed one",
        f"{_label(A)}: source addresses differ from those at seal time",
    ]
    # Case only: the fingerprint (over normalized text) agrees, the snapshot does not.
    assert final_problems(T, [A.model_copy(update={"content": "ALPHA RUNS."}), B], sealed, snapshot, sealed) == [
        f"{_label(A)}: content differs from the text sealed"
    ]


def test_a_sealed_brick_gone_or_without_snapshot_is_named():
    sealed = _sealed(A, B)
    assert final_problems(T, [B], sealed, {A.brick_id: A, B.brick_id: B}, sealed) == [f"{_label(A)}: gone from the vault"]
    assert final_problems(T, [A, B], sealed, {B.brick_id: B}, sealed) == [f"{_label(A)}: no seal-time snapshot of it"]
    moved = {A.brick_id: A.model_copy(update={"order_index": 7}), B.brick_id: B}
    assert final_problems(T, [A, B], sealed, moved, sealed) == [f"{_label(A)}: the seal-time snapshot disagrees with the sealed manifest"]


def test_a_sealed_manifest_that_lies_is_named():
    entry = ManifestEntry(order_index=0, brick_id=A.brick_id, fingerprint=A.fingerprint, state="FORMING")
    wrong_id = ManifestEntry(order_index=1, brick_id=B.brick_id, fingerprint=A.fingerprint, state="FINAL")
    sealed = Manifest(topic_id=T, previous_hash=None, bricks=(entry, wrong_id), manifest_hash="h")
    snapshot = {A.brick_id: A, B.brick_id: B}
    problems = final_problems(T, [A, B], sealed, snapshot, sealed)
    assert problems[0] == f"{_label(A)}: the sealed manifest lists it as FORMING"
    assert f"{_label(B)}: its id is not sha256(topic_id:fingerprint) of the sealed fingerprint" in problems


def test_bricks_outside_the_seal_are_named():
    sealed = _sealed(A)
    extra_final, forming, superseded = _brick("Final too.", 1), _brick("New one.", 2, "FORMING"), _brick("Old one.", 3, "SUPERSEDED")
    snapshot = {A.brick_id: A, forming.brick_id: forming}
    assert final_problems(T, [A, extra_final, forming, superseded], sealed, snapshot, sealed) == [
        f"brick {extra_final.brick_id[:12]} of 'walk' is FINAL but not in the sealed manifest",
        f"brick {forming.brick_id[:12]} of sealed topic 'walk' is visible as FORMING after the seal",
        f"seal-time snapshot of 'walk' holds brick {forming.brick_id[:12]}, which the sealed manifest does not",
    ]
    later = Manifest(topic_id=T, previous_hash=sealed.manifest_hash, bricks=sealed.bricks, manifest_hash="9" * 64)
    assert final_problems(T, [A], sealed, {A.brick_id: A}, later) == [
        f"topic 'walk': latest manifest 999999999999… is not the sealed one {sealed.manifest_hash[:12]}…: "
        + "something was published after the seal"
    ]


# Manifests and their chain ------------------------------------------------------------------------


def test_the_manifest_lists_visible_bricks_in_order():
    old = _brick("Old.", 0, "SUPERSEDED")
    entries = manifest_entries([B, old, A])
    assert [e.brick_id for e in entries] == [A.brick_id, B.brick_id]
    assert entries[0] == ManifestEntry(order_index=0, brick_id=A.brick_id, fingerprint=A.fingerprint, state="FINAL")


def test_the_listing_hash_is_the_manifest_hash_over_the_same_bytes():
    entries = manifest_entries([A, B])
    assert canonical_entries(entries) == ",".join(canonical_json(e.model_dump()) for e in entries)
    for previous in (None, "p" * 64):
        assert hash_of_listing(T, previous, canonical_entries(entries)) == manifest_hash(T, previous, entries)
    assert entries_sha256(entries) == hashlib.sha256(canonical_entries(entries).encode()).hexdigest()
    body = {"topic_id": T, "previous_hash": None, "bricks": [e.model_dump() for e in entries]}
    assert manifest_hash(T, None, entries) == hashlib.sha256(canonical_json(body).encode()).hexdigest()


def _tombstone() -> Tombstone:
    return Tombstone(tombstone_id="x", run_ids=("r1",), file_sha256s=("s",), brick_ids=(A.brick_id,), reason="asked",
                     actor="ana (nexus forget)", forgotten_at="2025-01-01T00:00:00Z")


def test_a_tombstone_manifest_is_always_recorded_and_sealed_into_the_hash():
    first = build_manifest(T, [A, B], None)
    assert first.previous_hash is None and first.manifest_hash == manifest_hash(T, None, first.bricks)
    stone = tombstone_manifest(T, [A, B], first, _tombstone())
    assert stone.bricks == first.bricks and stone.previous_hash == first.manifest_hash and stone.tombstone == _tombstone()
    assert stone.manifest_hash == manifest_hash(T, first.manifest_hash, first.bricks, _tombstone())
    assert stone.manifest_hash != manifest_hash(T, first.manifest_hash, first.bricks)
    assert tombstone_manifest(T, [A], None, _tombstone()).previous_hash is None
    assert chain_problems([first, stone]) == []


def test_returning_to_an_earlier_list_returns_to_its_manifest_unless_a_tombstone_came_between():
    one = build_manifest(T, [A], None)
    two = next_manifest(T, manifest_entries([A, B]), one)
    assert next_manifest(T, one.bricks, two, earlier=one) is one
    assert next_manifest(T, two.bricks, two, earlier=one) is None
    stone = tombstone_manifest(T, [A], two, _tombstone())
    back = next_manifest(T, one.bricks, two, earlier=stone)
    assert back is not stone and back.previous_hash == two.manifest_hash
    other = next_manifest(T, manifest_entries([B]), two, earlier=one)
    assert other.bricks == manifest_entries([B]) and other.previous_hash == two.manifest_hash


def test_each_break_of_the_chain_is_named():
    assert link_problems(T, [(None, "a"), ("a", "b"), ("b", "c")]) == []
    assert link_problems(T, [(None, "a"), ("x", "b")]) == ["manifest #1 of walk points back to 'x', expected 'a'"]
    assert link_problems(T, [("x", "a")]) == ["manifest #0 of walk points back to 'x', expected None"]
    # A return to an earlier manifest repeats its (link, hash) pair whole.
    assert link_problems(T, [(None, "a"), ("a", "b"), (None, "a")]) == []
    assert altered(2, T, "s" * 64, "e" * 64) == ["manifest #2 of walk was altered: stored hash ssssssssssss… != recomputed eeeeeeeeeeee…"]
    assert altered(2, T, "s", "s") == []
    assert chain_problems([]) == []
    first = build_manifest(T, [A], None)
    forged = first.model_copy(update={"manifest_hash": "f" * 64})
    assert chain_problems([forged]) == [
        f"manifest #0 of walk was altered: stored hash ffffffffffff… != recomputed {first.manifest_hash[:12]}…"
    ]


def test_every_incoming_brick_is_checked_and_every_sealed_entry_too():
    new = _brick("New one.", 5, "FORMING")
    changed = A.model_copy(update={"order_index": 9})
    assert final_brick_changes({A.brick_id: A}, [new, changed]) == [
        f"FINAL brick {A.brick_id[:12]} of topic 'walk': order_index would change"
    ]
    sealed = _sealed(A, B)
    moved = B.model_copy(update={"order_index": 4})
    assert final_problems(T, [moved], sealed, {A.brick_id: A, B.brick_id: B}, sealed) == [
        f"{_label(A)}: gone from the vault", f"{_label(B)}: order_index is now 4",
    ]
    assert final_problems(T, [A, moved], sealed, {B.brick_id: B}, sealed) == [
        f"{_label(A)}: no seal-time snapshot of it", f"{_label(B)}: order_index is now 4",
    ]


def test_ten_final_bricks_without_a_seal_are_named_and_the_count_says_the_rest():
    bricks = [_brick(f"Text {i}.", i) for i in range(11)]
    (problem,) = final_problems(T, bricks, None, {}, None)
    ids = sorted(b.brick_id[:12] for b in bricks)
    assert problem == f"topic 'walk' has 11 FINAL bricks but no sealed manifest: {', '.join(ids[:10])}"


def test_a_tombstone_is_hashed_as_json_in_the_body():
    entries = manifest_entries([A])
    body = {"topic_id": T, "previous_hash": "p", "bricks": [e.model_dump() for e in entries],
            "tombstone": _tombstone().model_dump(mode="json")}
    assert manifest_hash(T, "p", entries, _tombstone()) == hashlib.sha256(canonical_json(body).encode()).hexdigest()


def test_a_broken_chain_names_its_topic():
    first = build_manifest(T, [A], None)
    second = next_manifest(T, manifest_entries([A, B]), first)
    assert chain_problems([second]) == [f"manifest #0 of walk points back to {first.manifest_hash!r}, expected None"]
