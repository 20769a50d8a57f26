"""FINAL bricks are immutable (docs/invariants.md §7). Pure: no I/O.

Two halves: `final_brick_changes` is the guard every write of bricks goes through; and
`final_problems` proves, after the fact, that what the vault holds now is what was sealed — the
part a guard cannot give, because anyone can edit the DuckDB file directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nexus_assets.core.fingerprint import brick_id as make_brick_id
from nexus_assets.core.fingerprint import fingerprint
from nexus_assets.core.models import Brick, Manifest


class FinalBrickChanged(ValueError):
    """A write would change a FINAL brick; corrections arrive as new bricks, never as edits."""


_IMMUTABLE_FIELDS = ("topic_id", "content", "fingerprint", "sources", "order_index", "state", "superseded_by")


def final_brick_changes(prior: Mapping[str, Brick], incoming: Iterable[Brick]) -> list[str]:
    """Every way publishing `incoming` (a topic's whole brick list) would change a FINAL brick of `prior`.

    Only `stale` may change: drift must still be reported on a sealed brick.
    """
    problems = []
    seen = set()
    for b in incoming:
        seen.add(b.brick_id)
        before = prior.get(b.brick_id)
        if before is None or before.state != "FINAL":
            continue
        changed = [name for name in _IMMUTABLE_FIELDS if getattr(before, name) != getattr(b, name)]
        if changed:
            problems.append(f"FINAL brick {b.brick_id[:12]} of topic {before.topic_id!r}: {', '.join(changed)} would change")
    for bid, before in prior.items():
        if before.state == "FINAL" and bid not in seen:
            problems.append(f"FINAL brick {bid[:12]} of topic {before.topic_id!r} would be dropped")
    return problems


def final_problems(
    topic_id: str,
    bricks: Iterable[Brick],
    sealed: Manifest | None,
    snapshot: Mapping[str, Brick],
    latest: Manifest | None,
) -> list[str]:
    """Every way the topic's current bricks differ from its sealed manifest and seal-time snapshot.

    Checks brick ids, fingerprints recomputed from the stored content, the exact text, order,
    state and source addresses. Empty for a topic that was never sealed and has no FINAL brick.
    """
    bricks = list(bricks)
    by_id = {b.brick_id: b for b in bricks}
    final = {b.brick_id for b in bricks if b.state == "FINAL"}
    if sealed is None:
        if final:
            ids = ", ".join(sorted(b[:12] for b in final)[:10])
            return [f"topic {topic_id!r} has {len(final)} FINAL bricks but no sealed manifest: {ids}"]
        return []
    problems = []
    expected = {e.brick_id: e for e in sealed.bricks}
    for e in sealed.bricks:
        label = f"FINAL brick #{e.order_index} {e.brick_id[:12]} of {topic_id!r}"
        if e.state != "FINAL":
            problems.append(f"{label}: the sealed manifest lists it as {e.state}")
        if make_brick_id(topic_id, e.fingerprint) != e.brick_id:
            problems.append(f"{label}: its id is not sha256(topic_id:fingerprint) of the sealed fingerprint")
        b = by_id.get(e.brick_id)
        if b is None:
            problems.append(f"{label}: gone from the vault")
            continue
        if b.state != "FINAL":
            problems.append(f"{label}: state is now {b.state}")
        if b.order_index != e.order_index:
            problems.append(f"{label}: order_index is now {b.order_index}")
        recomputed = fingerprint(b.content)
        if recomputed != e.fingerprint:
            problems.append(
                f"{label}: content no longer matches its sealed fingerprint (recomputed {recomputed[:12]}… != {e.fingerprint[:12]}…)"
            )
        if b.fingerprint != e.fingerprint:
            problems.append(f"{label}: stored fingerprint {b.fingerprint[:12]}… differs from the sealed one")
        snap = snapshot.get(e.brick_id)
        if snap is None:
            problems.append(f"{label}: no seal-time snapshot of it")
            continue
        if snap.content != b.content:
            problems.append(f"{label}: content differs from the text sealed")
        if snap.sources != b.sources:
            problems.append(f"{label}: source addresses differ from those at seal time")
        if (snap.fingerprint, snap.order_index) != (e.fingerprint, e.order_index):
            problems.append(f"{label}: the seal-time snapshot disagrees with the sealed manifest")
    for bid in sorted(final - set(expected)):
        problems.append(f"brick {bid[:12]} of {topic_id!r} is FINAL but not in the sealed manifest")
    for b in bricks:
        if b.brick_id not in expected and b.state not in ("FINAL", "SUPERSEDED"):
            problems.append(f"brick {b.brick_id[:12]} of sealed topic {topic_id!r} is visible as {b.state} after the seal")
    for bid in sorted(set(snapshot) - set(expected)):
        problems.append(f"seal-time snapshot of {topic_id!r} holds brick {bid[:12]}, which the sealed manifest does not")
    if latest is not None and latest.manifest_hash != sealed.manifest_hash:
        problems.append(
            f"topic {topic_id!r}: latest manifest {latest.manifest_hash[:12]}… is not the sealed one "
            f"{sealed.manifest_hash[:12]}…: something was published after the seal"
        )
    return problems
