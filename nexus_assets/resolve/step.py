"""The resolve phase's step: every occurrence of a topic resolved into bricks and states (the pure
rule is `resolve/rules.py`), staged in the vault unless nothing it reads changed. The
`resolved_brick_states` asset calls it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Protocol

from nexus_assets.core.collector import collector_paused
from nexus_assets.core.models import Brick, Topic
from nexus_assets.drift.records import DriftRecords
from nexus_assets.drift.step import withdrawn_addresses
from nexus_assets.gate.records import OccurrenceRecords
from nexus_assets.ingest.records import RunRecords
from nexus_assets.resolve.records import StageRecords
from nexus_assets.resolve.rules import resolve_lazily


class ResolveStores(Protocol):
    """The stores resolution uses: occurrences, run states and drift in, the stage out."""

    runs: RunRecords
    occurrences: OccurrenceRecords
    drift: DriftRecords
    stage: StageRecords


@collector_paused
def resolve_phase(vault: ResolveStores, topic: Topic, *, sealed: bool = False) -> list[Brick]:
    """Resolve every occurrence ever validated for the topic into bricks and states."""
    return list(resolved_bricks(vault, topic, sealed=sealed))


def resolved_bricks(vault: ResolveStores, topic: Topic, *, sealed: bool = False) -> Iterator[Brick]:
    """`resolve_phase`'s bricks, made as they are asked for (see `resolve_lazily`). Every query
    is done before this returns, so the vault is free for whatever consumes them."""
    run_status = vault.runs.run_status()
    prior = vault.stage.resolution_prior(topic.topic_id)
    stale_addresses = set(vault.drift.drifted_addresses(topic.topic_id))
    withdrawn = withdrawn_addresses(vault, topic.topic_id)
    ingestion_seq = vault.runs.ingestion_seq()
    return resolve_lazily(
        topic.topic_id,
        # Streamed, never listed whole: once the groups are formed, only each text's first occurrence stays.
        (o for o, _ in vault.occurrences.stream(topic.topic_id)),
        run_status=run_status,
        ordering_rule=topic.ordering_rule,
        sealed=sealed,
        prior=prior,
        stale_addresses=stale_addresses,
        withdrawn=withdrawn,
        ingestion_seq=ingestion_seq,
    )


@dataclass
class BrickTally:
    """What the resolution asset reports of the bricks it staged, counted as they pass to the stage."""

    preview_limit: int
    bricks: int = 0
    visible: int = 0
    linked_sources: int = 0
    stale: int = 0
    states: Counter = field(default_factory=Counter)
    preview: list[Brick] = field(default_factory=list)  # the first visible bricks, in manifest order

    def counted(self, bricks: Iterable[Brick]) -> Iterator[Brick]:
        for b in bricks:
            self.bricks += 1
            self.states[b.state] += 1
            self.linked_sources += len(b.sources) - 1
            if b.state != "SUPERSEDED":
                self.visible += 1
                self.stale += b.stale
                if len(self.preview) < self.preview_limit:
                    self.preview.append(b)
            yield b


@dataclass(frozen=True)
class Resolution:
    """What resolution hands to publishing. Not the bricks: they wait in the vault's stage, so a
    large topic is neither pickled between steps nor held in memory twice. `staged` is False when
    nothing resolution reads changed since the last sync (publishing would only reproduce what is
    stored)."""

    staged: bool
    inputs_digest: str | None


class StageMissing(RuntimeError):
    """The resolution to publish is no longer staged: published already, or replaced by a newer one."""


@collector_paused
def stage_resolution(vault: ResolveStores, topic: Topic, bricks: Iterable[Brick], *, inputs_digest: str | None = None) -> Resolution:
    vault.stage.write(topic.topic_id, bricks, inputs_digest=inputs_digest)
    return Resolution(True, inputs_digest)


@collector_paused
def resolve_if_changed(vault: ResolveStores, topic: Topic, *, preview: int) -> tuple[Resolution, BrickTally | None]:
    """The topic resolved and staged (with a tally of its bricks, for reporting), or unchanged (None).

    The bricks go to the stage as they are made, so a large topic is never all in memory at once.
    """
    digest = vault.stage.topic_inputs_digest(topic.topic_id)
    if topic.state == "LOCKED" or digest == vault.stage.last_inputs_digest(topic.topic_id):
        return Resolution(False, digest), None
    tally = BrickTally(preview_limit=preview)
    resolution = stage_resolution(vault, topic, tally.counted(resolved_bricks(vault, topic)), inputs_digest=digest)
    return resolution, tally
