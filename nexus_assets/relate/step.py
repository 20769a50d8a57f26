"""The relate step: a topic's related bricks and conflicts (docs/conflicts.md), brought up to date after
its bricks are embedded (the `brick_embeddings` asset calls `relate_topic`), and the Conflict View's
rows (`nexus conflicts`, the viewer, the `open_conflicts` check).

Only what changed is looked at again: bricks not yet looked at (new, or embedded since), bricks one
of them is related to, and bricks that had a partner which is no longer visible. The records then
equal what a build from nothing would give (nexus_assets_tests/relate/test_relations.py checks this), whatever the
order the bricks came in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

from nexus_assets.core.fingerprint import normalize
from nexus_assets.core.models import Topic
from nexus_assets.ingest.scope import TOOL_TYPES
from nexus_assets.relate.rules import conflict_between, round_similarity

if TYPE_CHECKING:
    from nexus_assets.ingest.records import RunRecords
    from nexus_assets.publish.records import BrickRecords
    from nexus_assets.recall.records import RecallRecords
    from nexus_assets.relate.records import RelationRecords


class RelateStores(Protocol):
    """The stores relating uses: bricks, their embeddings and runs in, relations and conflicts out."""

    bricks: BrickRecords
    runs: RunRecords
    recall: RecallRecords
    relations: RelationRecords


@dataclass(frozen=True)
class RelationReport:
    bricks: int  # visible embedded bricks
    looked_at: int  # bricks whose nearest related bricks were found again
    dropped: int  # bricks no longer visible whose relations were forgotten
    pairs: int  # related pairs among visible bricks
    conflicts: int  # of them, conflict candidates


def relate_topic(vault: RelateStores, topic: Topic, model: str, *, visible=None) -> RelationReport:
    """`visible`: (brick ids, vectors) of the topic's visible embedded bricks in manifest order when
    the caller holds them already (a server's index after a push), so they are not read again."""
    import numpy as np

    from nexus_assets.relate.neighbours import candidate_pairs, nearest_lists

    topic_id = topic.topic_id
    threshold = round_similarity(topic.related_threshold)
    built = vault.relations.built(topic_id, model)
    if all(t == threshold for t in built.values()) and set(built) == set(vault.recall.visible_embedded_ids(topic_id, model)):
        # Nothing new, nothing gone: the vectors are not even read.
        pairs, conflicts = vault.relations.pair_counts(topic_id, model)
        return RelationReport(len(built), 0, 0, pairs, conflicts)
    manifest_ids, manifest_vectors = visible if visible is not None else vault.recall.visible_vectors(topic_id, model)
    # Brick id order: ties go to the smaller id, and nothing depends on the manifest's order.
    order = sorted(range(len(manifest_ids)), key=manifest_ids.__getitem__)
    ids = [manifest_ids[k] for k in order]
    vectors = np.ascontiguousarray(manifest_vectors[order]) if order else manifest_vectors
    del manifest_vectors
    if any(t != threshold for t in built.values()):
        vault.relations.clear(topic_id, model)  # another threshold: every pair is looked for again
        built = {}
    position = {b: k for k, b in enumerate(ids)}
    new = [k for k, b in enumerate(ids) if b not in built]
    dropped = sorted(b for b in built if b not in position)
    if not new and not dropped:
        pairs, conflicts = vault.relations.pair_counts(topic_id, model)
        return RelationReport(len(ids), 0, 0, pairs, conflicts)

    if len(new) == len(ids):
        rows = new
        found, _ = candidate_pairs(vectors, None, threshold)
    else:
        first, near = candidate_pairs(vectors, new, threshold)
        fresh = set(new)
        # Existing bricks a new one is near, and those that lost a partner, look again.
        affected = {int(j) for j in near if int(j) not in fresh}
        affected |= {position[b] for b in vault.relations.holding(topic_id, model, dropped) if b in position}
        rows = sorted(fresh | affected)
        again = candidate_pairs(vectors, affected, threshold)[0] if affected else None
        found = first if again is None else tuple(np.concatenate([x, y]) for x, y in zip(first, again))

    involved = sorted({ids[k] for k in rows} | {ids[j] for j in found[1].tolist()})
    texts = vault.bricks.contents(involved)
    text_at = {position[b]: t for b, t in texts.items()}
    tools = vault.bricks.tool_output_bricks(involved)
    folded = {k: normalize(t) for k, t in text_at.items()}  # each text once, not once per pair
    lists = nearest_lists(rows, found, excluded=lambda i, j: folded[i] in folded[j] or folded[j] in folded[i])
    verdicts: dict[tuple[int, int], str | None] = {}

    def conflict(i: int, j: int) -> str | None:
        a, b = (i, j) if ids[i] < ids[j] else (j, i)  # the reason reads the same from either side
        if (a, b) not in verdicts:
            # Tool output states nothing a person disagrees with, whatever topic asked for it.
            tool = ids[a] in tools or ids[b] in tools
            verdicts[(a, b)] = None if tool else conflict_between(text_at[a], text_at[b])
        return verdicts[(a, b)]

    records = {ids[i]: [(ids[j], s, conflict(i, j)) for j, s in partners] for i, partners in lists.items()}
    vault.relations.replace(topic_id, model, threshold, records, dropped, datetime.now(timezone.utc))
    pairs, conflicts = vault.relations.pair_counts(topic_id, model)
    return RelationReport(len(ids), len(rows), len(dropped), pairs, conflicts)


def conflict_rows(vault: RelateStores, topic_id: str, model: str) -> list[dict]:
    """The Conflict View: each conflict candidate among the topic's visible bricks, both sides with
    their text, state, canonical source and when it was said. Nexus never picks a side."""
    pairs = vault.relations.pairs(topic_id, model, conflicts_only=True)
    return _sides(vault, topic_id, pairs)


def open_conflict_pairs(vault: RelateStores, topic_id: str, model: str) -> frozenset[tuple[str, str]]:
    """The pairs of the Conflict View, by brick ids: what a sync compares before and after, so it
    speaks of conflicts only when that set changed."""
    return frozenset((r["bricks"][0]["brick_id"], r["bricks"][1]["brick_id"]) for r in conflict_rows(vault, topic_id, model))


def related_rows(vault: RelateStores, brick_id: str, model: str) -> list[dict]:
    """The visible bricks related to one brick, nearest first, with their text and state."""
    related = vault.relations.related_to(brick_id, model)
    bricks = {b.brick_id: b for b in vault.bricks.select(brick_ids=[r["brick_id"] for r in related])}
    return [
        {**r, "content": bricks[r["brick_id"]].content, "state": bricks[r["brick_id"]].state,
         "order_index": bricks[r["brick_id"]].order_index}
        for r in related
        if r["brick_id"] in bricks
    ]


def _sides(vault: RelateStores, topic_id: str, pairs: list[dict]) -> list[dict]:
    ids = sorted({p[k] for p in pairs for k in ("brick_a", "brick_b")})
    bricks = {b.brick_id: b for b in vault.bricks.select(brick_ids=ids)} if ids else {}
    said = vault.relations.when_said(topic_id, ids) if ids else {}
    titles = {r: n.title for r, n in vault.runs.run_names(s["run_id"] for s in said.values()).items()}
    out = []
    for p in pairs:
        sides = []
        for key in ("brick_a", "brick_b"):
            b = bricks[p[key]]
            source = said.get(b.brick_id, {})
            sides.append({
                "brick_id": b.brick_id, "content": b.content, "state": b.state, "order_index": b.order_index,
                "stale": b.stale, "said_at": source.get("said_at"), "run_title": titles.get(source.get("run_id")),
                "source": {k: source.get(k) for k in ("run_id", "json_path", "start", "end")},
                "sources": len(b.sources),
            })
        # The earlier statement first: when each was said is what a person weighs.
        sides.sort(key=lambda s: (s["said_at"] or "", s["order_index"] if s["order_index"] is not None else -1, s["brick_id"]))
        # The reason in the order shown (stored in brick id order); a pair recorded under earlier
        # rules that these rules do not flag is no conflict (a vault from an earlier release).
        tool = any(_all_tool(bricks[p[k]].sources) for k in ("brick_a", "brick_b"))
        reason = None if tool else conflict_between(sides[0]["content"], sides[1]["content"])
        if reason is None:
            continue
        out.append({"topic_id": topic_id, "similarity": p["similarity"], "conflict": reason, "bricks": sides})
    return out


def _all_tool(sources) -> bool:
    return bool(sources) and all(s.node_type in TOOL_TYPES for s in sources)
