"""Invariant 4: topic isolation.

Uniqueness is decided inside one topic only: `brick_id = sha256(topic_id + ":" + fingerprint)`.
The same text in two topics is two bricks, and resolving one topic never sees the other.
"""

from __future__ import annotations

import hashlib
import unicodedata

import pytest
from hypothesis import given, settings

from nexus_assets.core.fingerprint import fingerprint
from nexus_assets.core.models import Occurrence, Rejection
from nexus_assets.gate.rules import validate_pointer
from nexus_assets.resolve.rules import resolve_topic
from nexus_assets_tests.strategies import make_run, occ, pointer, statuses, unicode_text

SYNC = "nexus-server-sync"
VAULT = "vault-design"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_same_text_in_two_topics_is_two_bricks_with_different_ids():
    run = make_run("r1", "Bricks are verbatim and traceable.")
    in_sync, in_vault = occ(run, "Bricks are verbatim", topic_id=SYNC), occ(run, "Bricks are verbatim", topic_id=VAULT)
    [a] = resolve_topic(SYNC, [in_sync], run_status=statuses(run))
    [b] = resolve_topic(VAULT, [in_vault], run_status=statuses(run))
    assert a.fingerprint == b.fingerprint == fingerprint("Bricks are verbatim")
    assert a.brick_id != b.brick_id
    assert a.brick_id == sha(f"{SYNC}:{a.fingerprint}")
    assert b.brick_id == sha(f"{VAULT}:{b.fingerprint}")
    assert (a.topic_id, b.topic_id) == (SYNC, VAULT)
    assert a.content == b.content and a.sources == b.sources


@settings(max_examples=100, deadline=None)
@given(text=unicode_text)
def test_brick_id_is_sha256_of_topic_colon_fingerprint(text):
    run = make_run("r1", text)
    raw = pointer(text, topic_id=SYNC)
    result = validate_pointer(raw, topic_id=SYNC, run=run)
    if isinstance(result, Rejection):  # whitespace-only text
        assert result.reason == "empty_quote"
        return
    [brick] = resolve_topic(SYNC, [result], run_status=statuses(run))
    normalized = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    assert brick.brick_id == sha(SYNC + ":" + sha(normalized))


def test_resolution_of_one_topic_never_sees_the_other():
    """A superset in another topic neither links nor supersedes a fragment in this one."""
    run = make_run("r1", "The sync engine runs nightly and is idempotent.")
    fragment = occ(run, "sync engine runs nightly", topic_id=SYNC)
    superset = occ(run, "The sync engine runs nightly and is idempotent.", topic_id=VAULT)
    [alone] = resolve_topic(SYNC, [fragment], run_status=statuses(run))
    assert alone.state == "IMPROVISE" and alone.superseded_by is None and alone.order_index == 0
    vault_bricks = resolve_topic(VAULT, [superset], run_status=statuses(run))
    assert {b.brick_id for b in vault_bricks}.isdisjoint({alone.brick_id})
    # Within one topic the same pair does supersede: isolation, not a missing rule.
    same_topic = resolve_topic(SYNC, [fragment, occ(run, superset.content, topic_id=SYNC)], run_status=statuses(run))
    assert [b.state for b in same_topic] == ["IMPROVISE", "SUPERSEDED"]


def test_resolve_topic_refuses_an_occurrence_of_another_topic():
    run = make_run("r1", "Sync is nightly.")
    mine, theirs = occ(run, "Sync is nightly.", topic_id=SYNC), occ(run, "Sync", topic_id=VAULT)
    with pytest.raises(ValueError, match=VAULT):
        resolve_topic(SYNC, [mine, theirs], run_status=statuses(run))


def test_gate_refuses_a_pointer_naming_another_topic():
    run = make_run("r1", "Sync is nightly.")
    result = validate_pointer(pointer("Sync", topic_id=VAULT), topic_id=SYNC, run=run)
    assert isinstance(result, Rejection) and result.reason == "unknown_topic"
    assert not isinstance(result, Occurrence)


def test_same_run_feeds_two_topics_independently():
    run = make_run("r1", ["Sync is nightly.", "Bricks are verbatim."], status="CLOSED")
    sync_bricks = resolve_topic(SYNC, [occ(run, "Sync is nightly.", 0, SYNC)], run_status=statuses(run))
    vault_bricks = resolve_topic(
        VAULT, [occ(run, "Bricks are verbatim.", 1, VAULT), occ(run, "Sync is nightly.", 0, VAULT)], run_status=statuses(run)
    )
    # Adding bricks to one topic does not move the other's order or states.
    assert [(b.content, b.order_index, b.state) for b in sync_bricks] == [("Sync is nightly.", 0, "FORMING")]
    assert [(b.content, b.order_index) for b in vault_bricks] == [("Sync is nightly.", 0), ("Bricks are verbatim.", 1)]
