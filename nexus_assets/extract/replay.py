"""Pay for what is new (docs/architecture.md): a run version that grew from one the extractor
already answered for is not read, selected or asked again whole. Its unchanged nodes' answers are
replayed from the earlier version's stored answer; only its new or changed nodes go to the extractor.

A node is unchanged when the earlier version has a node at the same normalized path with the same
content and the same reading of it (checksum, node type, branch, hidden flag, speaker, timestamp):
an extractor that answers node by node (`node_local`) gives it the same pointers, so replaying them
gives the answer a full re-extraction gives. The answer is keyed by the earlier answer's key (the
extractor's identity, the topic's definition and that run version) and the node's content, so a
changed definition or a new extractor replays nothing. The combined answer is stored as the new
version's own answer, in document order, exactly as a full extraction would have stored it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from nexus_assets.core.models import Topic
from nexus_assets.extract.backends import Extractor, extraction_key
from nexus_assets.extract.records import ExtractionRecords
from nexus_assets.vault.records import RunVersion


@dataclass(frozen=True)
class Base:
    """The earlier answer a run version builds on: its run version and extraction key."""

    version: RunVersion
    key: str


@dataclass
class Growth:
    """One run version's unchanged nodes (their replayed pointers) and its new ones (to extract)."""

    base: Base
    replayed: list  # the earlier answer's pointers at unchanged nodes
    new_paths: frozenset[str]
    order: dict[str, int]  # every node path of the version -> its place in document order
    unchanged_nodes: int = 0


def replays_nodes(extractor: Extractor) -> bool:
    """Whether the extractor answers node by node, so an unchanged node's answer may be replayed."""
    return bool(getattr(extractor, "node_local", False))


def bases(
    extractions: ExtractionRecords, extractor: Extractor, topic: Topic, versions: Sequence[RunVersion]
) -> dict[RunVersion, Base]:
    """For each run version, the newest earlier version of its run that the extractor (under its
    identity or an earlier one) answered for with this topic definition; versions with none are left out."""
    if not versions:
        return {}
    earlier = extractions.earlier_versions([rv.run_id for rv in versions])
    identities = (extractor.identity, *getattr(extractor, "legacy_identities", ()))
    wanted = {rv.run_id: rv.version_id for rv in versions}
    keys: dict[str, list[tuple[int, str, str]]] = {}
    for n, (run_id, version_id) in enumerate(earlier):
        if wanted.get(run_id) in (None, version_id):
            continue
        for identity in identities:
            keys.setdefault(run_id, []).append((n, version_id, extraction_key(identity, topic, version_id)))
    present = extractions.extraction_keys_present(k for found in keys.values() for _, _, k in found)
    out = {}
    for rv in versions:
        # `earlier` is newest first: the first answered version is the newest.
        for _, version_id, key in keys.get(rv.run_id, ()):
            if key in present:
                out[rv] = Base(RunVersion(rv.run_id, version_id), key)
                break
    return out


def growths(extractions: ExtractionRecords, found: dict[RunVersion, Base]) -> dict[RunVersion, Growth]:
    """What of each version is new against its base: one query for the node signatures (no text),
    one for the base answers."""
    if not found:
        return {}
    signatures = extractions.node_signatures([*found, *(b.version for b in found.values())])
    answers = extractions.pointers_by_key([b.key for b in found.values()])
    out = {}
    for rv, base in found.items():
        now, before = signatures.get(rv, {}), signatures.get(base.version, {})
        unchanged = {path for path, (sig, _) in now.items() if path in before and before[path][0] == sig}
        replayed = [p for p in answers.get(base.key, []) if _path_of(p) in unchanged]
        out[rv] = Growth(
            base=base,
            replayed=replayed,
            new_paths=frozenset(now.keys() - unchanged),
            order={path: position for path, (_, position) in now.items()},
            unchanged_nodes=len(unchanged),
        )
    return out


def merged(growth: Growth, fresh: Iterable) -> list:
    """The replayed and the freshly extracted pointers in document order (a node's own pointers in
    the order they were given; a pointer naming no node of the version last): a full extraction's order."""
    last = len(growth.order) + 1
    both = [*growth.replayed, *fresh]
    return sorted(both, key=lambda p: growth.order.get(_path_of(p), last))


def _path_of(pointer) -> str | None:
    path = pointer.get("json_path") if isinstance(pointer, dict) else None
    return path if isinstance(path, str) else None
