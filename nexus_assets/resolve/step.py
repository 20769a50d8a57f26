"""The resolve phase's step: every occurrence of a topic resolved into bricks and states (the pure
rule is `resolve/rules.py`), staged in the vault unless nothing it reads changed. The
`resolved_brick_states` asset calls it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol

from nexus_assets.core.collector import collector_paused
from nexus_assets.core.models import Brick, Occurrence, Topic
from nexus_assets.drift.records import DriftRecords
from nexus_assets.drift.step import withdrawn_addresses
from nexus_assets.extract.selection import deselected_fingerprints
from nexus_assets.gate.records import OccurrenceRecords
from nexus_assets.ingest.records import RunRecords
from nexus_assets.resolve.incremental import Changes, Wider, resolve_changes
from nexus_assets.resolve.records import StageRecords
from nexus_assets.resolve.rules import Keyed, resolve_keyed
from nexus_assets.history.records import HistoryQueries

if TYPE_CHECKING:  # type-only: a phase names a store above it only as an annotation
    from nexus_assets.publish.records import BrickRecords


class ResolveStores(Protocol):
    """The stores resolution uses: occurrences, run states and drift in, the stage out."""

    runs: RunRecords
    occurrences: OccurrenceRecords
    drift: DriftRecords
    stage: StageRecords
    bricks: BrickRecords
    history: HistoryQueries


@collector_paused
def resolve_phase(vault: ResolveStores, topic: Topic, *, sealed: bool = False) -> list[Brick]:
    """Resolve every occurrence ever validated for the topic into bricks and states."""
    return list(resolved_bricks(vault, topic, sealed=sealed))


def resolved_bricks(vault: ResolveStores, topic: Topic, *, sealed: bool = False) -> Iterator[Brick]:
    """`resolve_phase`'s bricks, made as they are asked for (see `resolve_lazily`). Every query
    is done before this returns, so the vault is free for whatever consumes them."""
    return (k.brick for k in resolve_keyed(topic.topic_id, _occurrences(vault, topic), sealed=sealed, **_options(vault, topic)))


def _occurrences(vault: ResolveStores, topic: Topic) -> Iterator[Occurrence]:
    # Streamed, never listed whole: once the groups are formed, only each text's first occurrence stays.
    return (o for o, _ in vault.occurrences.stream(topic.topic_id))


def _options(vault: ResolveStores, topic: Topic, *, withdrawn: set | None = None) -> dict:
    """What a full resolution reads besides the occurrences, every query done before it starts."""
    return {
        "run_status": vault.runs.run_status(),
        "ordering_rule": topic.ordering_rule,
        "prior": vault.stage.resolution_prior(topic.topic_id),
        "stale_addresses": set(vault.drift.drifted_addresses(topic.topic_id)),
        "withdrawn": withdrawn if withdrawn is not None else withdrawn_addresses(vault, topic.topic_id),
        "ingestion_seq": vault.runs.ingestion_seq(),
        "deselected": deselected_fingerprints(vault, topic),
    }


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
            self._count(b)
            yield b

    def _count(self, b: Brick) -> None:
        self.bricks += 1
        self.states[b.state] += 1
        self.linked_sources += len(b.sources) - 1
        if b.state != "SUPERSEDED":
            self.visible += 1
            self.stale += b.stale
            if len(self.preview) < self.preview_limit:
                self.preview.append(b)

    def counted_keyed(self, keyed: Iterable[Keyed]) -> Iterator[Keyed]:
        for k in keyed:
            self._count(k.brick)
            yield k


@dataclass(frozen=True)
class Resolution:
    """What resolution hands to publishing. Not the bricks: they wait in the vault's stage, so a
    large topic is neither pickled between steps nor held in memory twice. `staged` is False when
    nothing resolution reads changed since the last sync (publishing would only reproduce what is
    stored)."""

    staged: bool
    inputs_digest: str | None
    incremental: bool = False  # only the changed bricks are staged (`resolved_changes`)


class StageMissing(RuntimeError):
    """The resolution to publish is no longer staged: published already, or replaced by a newer one."""


@collector_paused
def stage_resolution(vault: ResolveStores, topic: Topic, bricks: Iterable[Brick], *, inputs_digest: str | None = None) -> Resolution:
    vault.stage.write(topic.topic_id, bricks, inputs_digest=inputs_digest)
    return Resolution(True, inputs_digest)


@collector_paused
def resolve_if_changed(
    vault: ResolveStores, topic: Topic, *, preview: int, incremental: bool = True
) -> tuple[Resolution, BrickTally | None]:
    """The topic resolved and staged (with a tally of its bricks, for reporting), or unchanged (None).

    Only the fingerprints of runs whose inputs changed since the last published resolution are
    regrouped (`resolve/incremental.py`), when the vault holds what that needs; otherwise, or with
    `incremental` False, every occurrence is. The bricks go to the stage as they are made, so a
    large topic is never all in memory at once.
    """
    inputs = vault.stage.run_inputs(topic.topic_id)
    digest = vault.stage.topic_inputs_digest(topic.topic_id, inputs)
    if topic.state == "LOCKED" or digest == vault.stage.last_inputs_digest(topic.topic_id):
        return Resolution(False, digest), None
    tally = BrickTally(preview_limit=preview)
    changes = resolved_changes(vault, topic, inputs) if incremental else None
    if changes is not None:
        # The tally counts what changed; the asset reports the topic's totals from the vault.
        vault.stage.write(topic.topic_id, tally.counted_keyed(changes), inputs_digest=digest, partial=True, inputs=inputs)
        return Resolution(True, digest, incremental=True), tally
    keyed = resolve_keyed(topic.topic_id, _occurrences(vault, topic), **_options(vault, topic))
    vault.stage.write(topic.topic_id, tally.counted_keyed(keyed), inputs_digest=digest, inputs=inputs)
    return Resolution(True, digest), tally


# Above this share of a topic's bricks touched, regrouping them all is as cheap as the bookkeeping.
INCREMENTAL_SHARE = 0.25


def resolved_changes(vault: ResolveStores, topic: Topic, inputs: tuple[str, dict[str, str]]) -> list[Keyed] | None:
    """The changed bricks of an incremental resolution, whole and keyed (untouched bricks it
    re-states are read back and re-stated), or None where only a full resolution will do: no
    resolution recorded with its inputs (a vault from before migration 19, a forget), another
    definition or rule, bricks without keys, or most of the topic touched."""
    topic_id = topic.topic_id
    changed_runs = vault.stage.changed_runs(topic_id, inputs)
    if changed_runs is None or not vault.stage.keyed(topic_id):
        return None
    withdrawn = withdrawn_addresses(vault, topic_id)
    touched = vault.stage.touched_fingerprints(topic_id, changed_runs, withdrawn)
    total = vault.history.brick_count(topic_id)
    run_status, ingestion_seq = vault.runs.run_status(), vault.runs.ingestion_seq()
    stale_addresses = set(vault.drift.drifted_addresses(topic_id))
    deselected = deselected_fingerprints(vault, topic)
    final_ids: set[str] = set()
    while True:
        if len(touched) > max(1_000, INCREMENTAL_SHARE * total):
            return None
        stored = {s.brick_id: s for s in vault.stage.stored(topic_id, fingerprints=touched)}
        final_ids = {bid for bid, s in stored.items() if s.state == "FINAL"}
        candidates = vault.stage.stored(topic_id, candidates=True)
        named = {s.superseded_by for s in (*stored.values(), *candidates) if s.superseded_by is not None}
        result = resolve_changes(
            topic_id,
            [o for o, _ in vault.occurrences.stream(topic_id, fingerprints=touched)],
            run_status=run_status,
            ordering_rule=topic.ordering_rule,
            stored=stored,
            final={b.brick_id: b for b in vault.bricks.select(topic_id, brick_ids=final_ids)} if final_ids else {},
            candidates=candidates,
            superseders={s.brick_id: s for s in vault.stage.stored(topic_id, brick_ids=named)} if named else {},
            everything=lambda: vault.stage.stored(topic_id, live=True),
            stale_addresses=stale_addresses,
            withdrawn=withdrawn,
            ingestion_seq=ingestion_seq,
            deselected=deselected,
        )
        if isinstance(result, Wider):
            touched |= result.fingerprints
            continue
        break
    assert isinstance(result, Changes)
    keyed = list(result.keyed)
    if result.restated:
        stored_rows = {s.brick_id: s for s in vault.stage.stored(topic_id, brick_ids=result.restated)}
        for b in vault.bricks.select(topic_id, brick_ids=result.restated):
            state, by = result.restated[b.brick_id]
            row = stored_rows[b.brick_id]
            keyed.append(Keyed(b.model_copy(update={"state": state, "superseded_by": by, "order_index": None}), row.first_key, row.rank_key))
    return keyed
