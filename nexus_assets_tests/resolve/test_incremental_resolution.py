"""Incremental equals full (issue 33 item 4): a sync that regroups only the fingerprints its new or
changed runs touch, and re-ranks the rest from their kept keys, leaves exactly the bricks, states,
supersessions, sources, order and keys that resolving every occurrence again would.

Pure here (`resolve_changes` + `ranked_order` against `resolve_keyed`), over random corpora whose
runs arrive in pieces, close later and are sealed in between, under every ordering rule; the
vault's own path (SQL ranking, partial stage) is held to the same standard in
`test_incremental_sync.py`.
"""

from __future__ import annotations

from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from nexus_assets.core.fingerprint import brick_id as make_brick_id
from nexus_assets.resolve.incremental import (
    Changes,
    StoredBrick,
    Wider,
    ranked_order,
    resolve_changes,
)
from nexus_assets.resolve.order import key_bytes
from nexus_assets.resolve.rules import Keyed, resolve_keyed
from nexus_assets_tests.strategies import TOPIC, corpora

RULES = ["chronological", "source-run-order", "ingestion-order"]


def full(seen, status, rule, seq, previous: dict[str, Keyed], sealed=False) -> dict[str, Keyed]:
    prior = {bid: k.brick for bid, k in previous.items()}
    keyed = resolve_keyed(TOPIC, list(seen), run_status=status, ordering_rule=rule, prior=prior, ingestion_seq=seq, sealed=sealed)
    return {k.brick.brick_id: k for k in keyed}


def as_stored(k: Keyed) -> StoredBrick:
    b = k.brick
    return StoredBrick(b.brick_id, b.fingerprint, b.content, b.state, b.superseded_by, k.first_key)


def incremental(stored: dict[str, Keyed], seen, changed_runs: set[str], status, rule, seq) -> dict[str, Keyed]:
    """What the vault does: touch the fingerprints of the changed runs, resolve those, apply, re-rank."""
    stored = dict(stored)
    touched = {o.fingerprint for o in seen if o.address.run_id in changed_runs}
    touched |= {k.brick.fingerprint for k in stored.values() if any(s.run_id in changed_runs for s in k.brick.sources)}
    touched |= {k.brick.fingerprint for k in stored.values() if k.brick.state == "SUPERSEDED" and k.brick.superseded_by is None}
    while True:
        ids = {make_brick_id(TOPIC, fp) for fp in touched}
        result = resolve_changes(
            TOPIC,
            [o for o in seen if o.fingerprint in touched],
            run_status=status,
            ordering_rule=rule,
            stored={bid: as_stored(stored[bid]) for bid in ids if bid in stored},
            final={bid: stored[bid].brick for bid in ids if bid in stored and stored[bid].brick.state == "FINAL"},
            candidates=[
                as_stored(k)
                for bid, k in stored.items()
                if bid not in ids and (k.brick.state == "IMPROVISE" or (k.brick.state == "SUPERSEDED" and k.brick.superseded_by))
            ],
            superseders={k.brick.superseded_by: as_stored(stored[k.brick.superseded_by]) for k in stored.values() if k.brick.superseded_by},
            everything=lambda: [as_stored(k) for bid, k in stored.items() if bid not in ids],
            ingestion_seq=seq,
        )
        if isinstance(result, Wider):
            assert not result.fingerprints <= touched
            touched |= result.fingerprints
            continue
        break
    assert isinstance(result, Changes)
    for k in result.keyed:
        stored[k.brick.brick_id] = k
    for bid, (state, by) in result.restated.items():
        k = stored[bid]
        stored[bid] = Keyed(k.brick.model_copy(update={"state": state, "superseded_by": by, "order_index": None}), k.first_key, k.rank_key)
    order = ranked_order((bid, k.brick.state, k.brick.order_index, k.first_key, k.rank_key) for bid, k in stored.items())
    return {
        bid: k if k.brick.order_index == order[bid] else Keyed(k.brick.model_copy(update={"order_index": order[bid]}), k.first_key, k.rank_key)
        for bid, k in stored.items()
    }


def dumped(bricks: dict[str, Keyed]) -> dict[str, tuple]:
    return {bid: (k.brick.model_dump_json(), k.first_key, k.rank_key) for bid, k in bricks.items()}


@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(corpus=corpora(max_runs=5, max_pointers=14), rule=st.sampled_from(RULES), data=st.data())
def test_incremental_resolution_equals_full(corpus, rule, data):
    occurrences = corpus.occurrences()
    finally_closed = [rid for rid, r in corpus.runs.items() if r.status == "CLOSED"]
    # Events: pieces of the occurrences arriving (a run's pointers may come in several), runs
    # closing, and now and then a seal.
    pieces = data.draw(st.lists(st.integers(0, len(occurrences)), max_size=4), label="cuts")
    bounds = sorted(set(pieces)) + [len(occurrences)]
    events: list[tuple] = []
    start = 0
    for bound in bounds:
        events.append(("arrive", occurrences[start:bound]))
        start = bound
    events += [("close", rid) for rid in finally_closed]
    events = data.draw(st.permutations(events), label="events")
    if data.draw(st.booleans(), label="seal midway"):
        events.insert(data.draw(st.integers(0, len(events)), label="seal at"), ("seal",))

    status = {rid: "OPEN" for rid in corpus.runs}
    seen: list = []
    reference: dict[str, Keyed] = {}
    stored: dict[str, Keyed] = {}
    for event in events:
        changed: set[str] = set()
        if event[0] == "arrive":
            seen.extend(event[1])
            changed = {o.address.run_id for o in event[1]}
        elif event[0] == "close":
            status[event[1]] = "CLOSED"
            changed = {event[1]}
        if event[0] == "seal":
            reference = full(seen, status, rule, corpus.ingestion_seq, reference, sealed=True)
            stored = full(seen, status, rule, corpus.ingestion_seq, stored, sealed=True)
        else:
            reference = full(seen, status, rule, corpus.ingestion_seq, reference)
            stored = incremental(stored, seen, changed, status, rule, corpus.ingestion_seq)
        assert dumped(stored) == dumped(reference), event


def test_order_keys_sort_as_the_tuples_do():
    keys = [
        (False, "", "a", 0, 0, 0, "$", ""),
        (False, "", "a", 0, 0, 0, "$", "\x00"),
        (False, "", "a", 0, 0, 0, "$", "a"),
        (False, "", "a", 0, 0, 0, "$", "a\x00"),
        (False, "", "a", 0, 0, 0, "$", "a\x00b"),
        (False, "", "a", 0, 0, 0, "$", "ab"),
        (False, "", "a", 1, 0, 0, "$", ""),
        (False, "", "a", 256, 0, 0, "$", ""),
        (False, "", "a\U0001f9f1", 0, 0, 0, "$", ""),
        (False, "", "a\uffff", 0, 0, 0, "$", ""),
        (False, "2024", "a", 0, 0, 0, "$", ""),
        (True, "", "", 0, 0, 0, "", ""),
        (1 << 62, (True, "", "", 0, 0, 0, "", "")),
    ][:-1]
    shuffled = sorted(keys, key=lambda k: key_bytes(k))
    assert shuffled == sorted(keys)
    assert [key_bytes((n,)) for n in (0, 1, 255, 256, 1 << 62)] == sorted(key_bytes((n,)) for n in (0, 1, 255, 256, 1 << 62))
