"""The topic manifest: the ordered visible bricks and a hash that chains to the previous one."""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Brick, Manifest, ManifestEntry, Tombstone


def manifest_entries(bricks: Iterable[Brick]) -> tuple[ManifestEntry, ...]:
    visible = sorted((b for b in bricks if b.state != "SUPERSEDED"), key=lambda b: b.order_index)
    return tuple(
        ManifestEntry(order_index=b.order_index, brick_id=b.brick_id, fingerprint=b.fingerprint, state=b.state)
        for b in visible
    )


def manifest_hash(
    topic_id: str, previous_hash: str | None, entries: Iterable[ManifestEntry], tombstone: Tombstone | None = None
) -> str:
    body = {
        "topic_id": topic_id,
        "previous_hash": previous_hash,
        "bricks": [e.model_dump() for e in entries],
    }
    # A tombstone is sealed into the chain; manifests without one hash exactly as they always did.
    if tombstone is not None:
        body["tombstone"] = tombstone.model_dump(mode="json")
    return sha256_hex(canonical_json(body))


def hash_of_listing(topic_id: str, previous_hash: str | None, canonical_entries: str) -> str:
    """`manifest_hash` of a manifest without a tombstone whose entries are given already in canonical
    JSON, joined by commas (as the vault writes them in SQL): the same bytes `canonical_json` makes
    of the whole body, so a large topic's manifest is hashed without a Python object per entry."""
    h = hashlib.sha256(b'{"bricks":[')
    h.update(canonical_entries.encode("utf-8"))
    h.update(('],"previous_hash":' + canonical_json(previous_hash) + ',"topic_id":' + canonical_json(topic_id) + "}").encode("utf-8"))
    return h.hexdigest()


def tombstone_manifest(topic_id: str, bricks: Iterable[Brick], previous: Manifest | None, tombstone: Tombstone) -> Manifest:
    """The next manifest after a forget: always recorded, even when the brick list is unchanged."""
    entries = manifest_entries(bricks)
    previous_hash = previous.manifest_hash if previous is not None else None
    return Manifest(
        topic_id=topic_id,
        previous_hash=previous_hash,
        bricks=entries,
        manifest_hash=manifest_hash(topic_id, previous_hash, entries, tombstone),
        tombstone=tombstone,
    )


def build_manifest(topic_id: str, bricks: Iterable[Brick], previous: Manifest | None) -> Manifest | None:
    """The next manifest, or None when the brick list equals the previous manifest's."""
    return next_manifest(topic_id, manifest_entries(bricks), previous)


def next_manifest(
    topic_id: str, entries: tuple[ManifestEntry, ...], previous: Manifest | None, earlier: Manifest | None = None
) -> Manifest | None:
    """The manifest after `previous` listing `entries` (in manifest order), or None when they are its list.

    `earlier`: a manifest of the chain before `previous` (and after any tombstone or seal). When it
    lists `entries`, the topic returns to it, hash and all: an undone edit leaves the topic as if
    it never happened (invariant 14), and the chain keeps the episode (see `link_problems`)."""
    if previous is not None and previous.bricks == entries:
        return None
    if earlier is not None and earlier.tombstone is None and earlier.bricks == entries:
        return earlier
    previous_hash = previous.manifest_hash if previous is not None else None
    return Manifest(
        topic_id=topic_id,
        previous_hash=previous_hash,
        bricks=entries,
        manifest_hash=manifest_hash(topic_id, previous_hash, entries),
    )


def link_problems(topic_id: str, links: Sequence[tuple[str | None, str]]) -> list[str]:
    """Every break in a topic's chain of (previous_hash, manifest_hash) pairs, oldest first.

    Each manifest points back to the one before it, or repeats an earlier one whole (a return to it,
    `next_manifest`): its hash, re-checked by `hash_problems`, then proves the same list and link."""
    problems = []
    expected = None
    seen: set[tuple[str | None, str]] = set()
    for seq, (previous_hash, current) in enumerate(links):
        if previous_hash != expected and (previous_hash, current) not in seen:
            problems.append(f"manifest #{seq} of {topic_id} points back to {previous_hash!r}, expected {expected!r}")
        seen.add((previous_hash, current))
        expected = current
    return problems


def hash_problems(seq: int, m: Manifest) -> list[str]:
    """Whether manifest #seq still hashes to its stored hash."""
    return altered(seq, m.topic_id, m.manifest_hash, manifest_hash(m.topic_id, m.previous_hash, m.bricks, m.tombstone))


def altered(seq: int, topic_id: str, stored: str, expected: str) -> list[str]:
    if expected == stored:
        return []
    return [f"manifest #{seq} of {topic_id} was altered: stored hash {stored[:12]}… != recomputed {expected[:12]}…"]


def chain_problems(manifests: list[Manifest]) -> list[str]:
    """Every way a topic's stored manifests (oldest first) fail to form an intact hash chain."""
    if not manifests:
        return []
    problems = link_problems(manifests[0].topic_id, [(m.previous_hash, m.manifest_hash) for m in manifests])
    for seq, m in enumerate(manifests):
        problems += hash_problems(seq, m)
    return problems
