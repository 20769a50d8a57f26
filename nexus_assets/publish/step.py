"""The publish phase's step: the staged bricks and the next hash-chained manifest, in one
transaction. The `topic_manifest` asset calls it."""

from __future__ import annotations

from typing import Protocol

from nexus_assets.core.collector import collector_paused
from nexus_assets.core.models import Manifest, ManifestEntry, ManifestHead, Topic
from nexus_assets.publish.manifest import next_manifest
from nexus_assets.publish.records import BrickRecords
from nexus_assets.resolve.records import StageRecords
from nexus_assets.resolve.step import Resolution, StageMissing
from nexus_assets.history.records import HistoryQueries


class PublishStores(Protocol):
    """The stores publishing uses: the stage and the manifest chain in, bricks and the manifest out."""

    stage: StageRecords
    bricks: BrickRecords
    history: HistoryQueries


@collector_paused
def publish_phase(
    vault: PublishStores, topic: Topic, resolution: Resolution, *, dagster_run_id: str | None, sealed: bool = False
) -> tuple[ManifestHead | None, bool]:
    """Publish the staged bricks and, if the visible list changed, the next manifest; for an
    unchanged topic, record only that the sync happened.

    Returns (the topic's current manifest, whether a new one was recorded).
    A LOCKED topic publishes nothing: its sealed manifest is final, whatever the vault now holds.
    """
    topic_id, digest = topic.topic_id, resolution.inputs_digest
    if topic.state == "LOCKED":
        return vault.bricks.latest_head(topic_id), False
    if not resolution.staged:
        vault.bricks.record_unchanged_sync(topic_id, dagster_run_id=dagster_run_id, inputs_digest=digest)
        return vault.bricks.latest_head(topic_id), False
    if not vault.stage.waiting(topic_id, digest):
        if digest is not None and digest == vault.stage.last_inputs_digest(topic_id):
            return vault.bricks.latest_head(topic_id), False  # this very resolution was published already (a re-executed publish step)
        raise StageMissing(
            f"{topic_id}: the resolution to publish is no longer staged (a newer resolution replaced it); "
            "materialize resolved_brick_states and topic_manifest together"
        )

    def decide(entries: tuple[ManifestEntry, ...]) -> Manifest | None:
        previous = vault.bricks.latest_manifest(topic_id)
        changed = previous is None or previous.bricks != entries
        earlier = vault.history.earlier_manifest_listing(topic_id, entries) if changed and previous is not None else None
        return next_manifest(topic_id, entries, previous, earlier)

    if vault.stage.partial(topic_id) and not sealed:
        # Only the changed bricks are staged: the order, and so the list, is known once they are in.
        return vault.bricks.publish_changes(topic_id, decide, dagster_run_id=dagster_run_id, inputs_digest=digest)
    manifest = decide(vault.stage.manifest_entries(topic_id))
    vault.bricks.publish_staged(topic_id, manifest, dagster_run_id=dagster_run_id, sealed=sealed, inputs_digest=digest)
    if manifest is not None:
        return ManifestHead.of(manifest), True
    return vault.bricks.latest_head(topic_id), False
