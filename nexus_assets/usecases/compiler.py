"""The sync's phases over the vault. Each asset calls exactly one of these.

Each phase is typed against the narrow store it uses (`ExtractStore`, `GateStore`, `ResolveStore`,
`PublishStore`): what a storage backend must give that phase. `Vault` provides them all.
"""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from nexus_assets.core.gate import NeedsDocument, named_paths, validate_pointers
from nexus_assets.core.manifest import next_manifest
from nexus_assets.core.models import COMPILED_STATES, Brick, Manifest, ManifestEntry, Run, Topic
from nexus_assets.core.resolution import resolve_lazily
from nexus_assets.core.scope import Scope
from nexus_assets.extractors import Extractor, extraction_key
from nexus_assets.usecases.collector import collector_paused
from nexus_assets.usecases.drift import withdrawn_addresses
from nexus_assets.vault.records import RunVersion

Progress = Callable[[str], None]


class ExtractStore(Protocol):
    """What the extract phase reads and writes: runs' text, and the extractions it records."""

    def topics(self) -> list[Topic]: ...
    def latest_versions(self, run_ids: Iterable[str] | None = None) -> dict[str, str]: ...
    def load_run_nodes(self, keys: Iterable[RunVersion], *, only: Mapping[RunVersion, Iterable[str]] | None = None) -> dict[RunVersion, Run]: ...
    def extraction_keys_present(self, keys: Iterable[str]) -> set[str]: ...
    def store_extractions(self, topic_id: str, extractor: str, answers: Sequence[tuple[str, RunVersion, list]]) -> None: ...


class GateStore(Protocol):
    """What the gate reads (extractions, the nodes they name) and writes (occurrences, rejections)."""

    def unvalidated_extractions(self, topic_id: str) -> list[tuple[str, RunVersion, list]]: ...
    def load_run_nodes(self, keys: Iterable[RunVersion], *, only: Mapping[RunVersion, Iterable[str]] | None = None) -> dict[RunVersion, Run]: ...
    def load_runs(self, keys: Iterable[RunVersion]) -> dict[RunVersion, Run]: ...
    def transaction(self) -> AbstractContextManager[None]: ...
    def store_validations(self, results: Sequence[tuple[str, RunVersion, Sequence[Any], Sequence[Any]]]) -> None: ...


class ResolveStore(Protocol):
    """What resolution reads (occurrences, run states, drift, the last digest) and writes (the stage)."""

    def run_status(self, run_ids: Iterable[str] | None = None) -> dict[str, Any]: ...
    def resolution_prior(self, topic_id: str) -> dict[str, Any]: ...
    def drifted_addresses(self, topic_id: str) -> Iterable[Any]: ...
    # What `withdrawn_addresses` reads (an undone edit's sources are history, not stale):
    def addresses_after_latest(self, topic_id: str) -> set[Any]: ...
    def addresses_changed_in_latest(self, topic_id: str) -> tuple[set[Any], list[Any]]: ...
    def latest_runs(self, run_ids: Iterable[str] | None = None) -> dict[str, Run]: ...
    def ingestion_seq(self) -> dict[str, int]: ...
    def occurrences(self, topic_id: str) -> Iterator[tuple[Any, str]]: ...
    def topic_inputs_digest(self, topic_id: str) -> str: ...
    def last_inputs_digest(self, topic_id: str) -> str | None: ...
    def stage(self, topic_id: str, bricks: Iterable[Brick], *, inputs_digest: str | None, slice_size: int | None = None) -> None: ...


class PublishStore(Protocol):
    """What publishing reads (the stage, the manifest chain) and writes (bricks, the next manifest)."""

    def latest_manifest(self, topic_id: str, *, sealed: bool = False) -> Manifest | None: ...
    def record_unchanged_sync(self, topic_id: str, *, dagster_run_id: str | None, inputs_digest: str) -> None: ...
    def staged(self, topic_id: str, inputs_digest: str | None) -> bool: ...
    def last_inputs_digest(self, topic_id: str) -> str | None: ...
    def staged_manifest_entries(self, topic_id: str) -> tuple[ManifestEntry, ...]: ...
    def earlier_manifest_listing(self, topic_id: str, entries: tuple[ManifestEntry, ...]) -> Any: ...
    def publish_staged(self, topic_id: str, manifest: Manifest | None, **options: Any) -> None: ...


@dataclass
class ExtractReport:
    candidates: int = 0
    extracted: int = 0
    reused: int = 0
    pointers: int = 0
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@collector_paused
def extract_phase(vault: ExtractStore, topic: Topic, extractor: Extractor, *, progress: Progress | None = None) -> ExtractReport:
    """Ask the extractor about every latest run version it has not answered for yet.

    Not one transaction: each answer (and each paid LLM call) is kept as soon as it exists, so a
    failure later in the topic never costs what was already extracted. An extractor that
    `shares_requests` is also given, per run, the other compiled topics that lack an answer for it
    (DESIGN §5): their answers are stored now and replayed by their own steps.
    """
    report = ExtractReport()
    versions = [RunVersion(r, v) for r, v in sorted(vault.latest_versions().items())]
    report.candidates = len(versions)
    done = _answered(vault, extractor, topic, versions)
    todo = [rv for rv in versions if rv not in done]
    report.reused = len(versions) - len(todo)
    companions = _companion_topics(vault, topic) if getattr(extractor, "shares_requests", False) else []
    keys = {rv: extraction_key(extractor, topic, rv.version_id) for rv in todo}
    step = max(25, len(todo) // 10)
    for start in range(0, len(todo), 200):
        chunk = todo[start : start + 200]
        runs = vault.load_run_nodes(chunk)
        lacking = {t.topic_id: _answered(vault, extractor, t, chunk) for t in companions}
        asked_with = {rv.run_id: tuple(t for t in companions if rv not in lacking[t.topic_id]) for rv in chunk}
        results = extractor.extract_runs(topic, [runs[rv] for rv in chunk], asked_with)
        answers = []
        for i, rv in enumerate(chunk, start):
            result = results[rv.run_id]
            if not result.complete:
                report.incomplete.append(rv.run_id)
                report.notes += [f"{rv.run_id}: {n}" for n in result.notes]
                continue
            answers.append((keys[rv], rv, result.pointers))
            report.extracted += 1
            report.pointers += len(result.pointers)
            if progress and (i + 1) % step == 0:
                progress(f"{topic.topic_id}: extracted {i + 1}/{len(todo)} runs")
        vault.store_extractions(topic.topic_id, extractor.identity, answers)
    return report


def _answered(vault: ExtractStore, extractor: Extractor, topic: Topic, versions: list[RunVersion]) -> set[RunVersion]:
    """The run versions the extractor (under its identity or an earlier one) has answered for the topic."""
    identities = (extractor.identity, *getattr(extractor, "legacy_identities", ()))
    keys = {(identity, rv): extraction_key(identity, topic, rv.version_id) for identity in identities for rv in versions}
    present = vault.extraction_keys_present(keys.values())
    return {rv for (_, rv), key in keys.items() if key in present}


def _companion_topics(vault: ExtractStore, topic: Topic) -> list[Topic]:
    """The other topics a sync compiles (their answers can ride along with this topic's requests)."""
    return [t for t in vault.topics() if t.topic_id != topic.topic_id and t.state in COMPILED_STATES]


@dataclass
class ValidateReport:
    extractions: int = 0
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)


@collector_paused
def validate_phase(vault: GateStore, topic: Topic) -> ValidateReport:
    """Run the hallucination gate over every extraction not yet validated."""
    report = ValidateReport()
    scope = Scope.of(topic.extraction_policy, topic)
    pending = vault.unvalidated_extractions(topic.topic_id)
    for start in range(0, len(pending), 200):
        chunk = pending[start : start + 200]
        # Only the nodes the pointers name: the gate looks at nothing else of a run.
        named: dict[RunVersion, set[str]] = {}
        for _, rv, pointers in chunk:
            named.setdefault(rv, set()).update(named_paths(pointers))
        runs = vault.load_run_nodes(named, only=named)
        results = []
        for key, rv, pointers in chunk:
            try:
                occurrences, rejections = validate_pointers(pointers, topic_id=topic.topic_id, run=runs[rv], scope=scope)
            except NeedsDocument:
                # A pointer at something other than a stored text node: only the document can judge it.
                document_run = vault.load_runs([rv])[rv]
                occurrences, rejections = validate_pointers(pointers, topic_id=topic.topic_id, run=document_run, scope=scope)
            results.append((key, rv, occurrences, rejections))
            report.extractions += 1
            report.accepted += len(occurrences)
            report.rejected.update(r.reason for r in rejections)
        with vault.transaction():
            vault.store_validations(results)
    return report


@collector_paused
def resolve_phase(vault: ResolveStore, topic: Topic, *, sealed: bool = False) -> list[Brick]:
    """Resolve every occurrence ever validated for the topic into bricks and states."""
    return list(resolved_bricks(vault, topic, sealed=sealed))


def resolved_bricks(vault: ResolveStore, topic: Topic, *, sealed: bool = False) -> Iterator[Brick]:
    """`resolve_phase`'s bricks, made as they are asked for (see `resolve_lazily`). Every query
    is done before this returns, so the vault is free for whatever consumes them."""
    run_status = vault.run_status()
    prior = vault.resolution_prior(topic.topic_id)
    stale_addresses = set(vault.drifted_addresses(topic.topic_id))
    withdrawn = withdrawn_addresses(vault, topic.topic_id)
    ingestion_seq = vault.ingestion_seq()
    return resolve_lazily(
        topic.topic_id,
        # Streamed, never listed whole: once the groups are formed, only each text's first occurrence stays.
        (o for o, _ in vault.occurrences(topic.topic_id)),
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
def stage_resolution(vault: ResolveStore, topic: Topic, bricks: Iterable[Brick], *, inputs_digest: str | None = None) -> Resolution:
    vault.stage(topic.topic_id, bricks, inputs_digest=inputs_digest)
    return Resolution(True, inputs_digest)


@collector_paused
def resolve_if_changed(vault: ResolveStore, topic: Topic, *, preview: int) -> tuple[Resolution, BrickTally | None]:
    """The topic resolved and staged (with a tally of its bricks, for reporting), or unchanged (None).

    The bricks go to the stage as they are made, so a large topic is never all in memory at once.
    """
    digest = vault.topic_inputs_digest(topic.topic_id)
    if topic.state == "LOCKED" or digest == vault.last_inputs_digest(topic.topic_id):
        return Resolution(False, digest), None
    tally = BrickTally(preview_limit=preview)
    resolution = stage_resolution(vault, topic, tally.counted(resolved_bricks(vault, topic)), inputs_digest=digest)
    return resolution, tally


@collector_paused
def publish_phase(
    vault: PublishStore, topic: Topic, resolution: Resolution, *, dagster_run_id: str | None, sealed: bool = False
) -> tuple[Manifest | None, bool]:
    """Publish the staged bricks and, if the visible list changed, the next manifest; for an
    unchanged topic, record only that the sync happened.

    Returns (the topic's current manifest, whether a new one was recorded).
    A LOCKED topic publishes nothing: its sealed manifest is final, whatever the vault now holds.
    """
    topic_id, digest = topic.topic_id, resolution.inputs_digest
    previous = vault.latest_manifest(topic_id)
    if topic.state == "LOCKED":
        return previous, False
    if not resolution.staged:
        vault.record_unchanged_sync(topic_id, dagster_run_id=dagster_run_id, inputs_digest=digest)
        return previous, False
    if not vault.staged(topic_id, digest):
        if digest is not None and digest == vault.last_inputs_digest(topic_id):
            return previous, False  # this very resolution was published already (a re-executed publish step)
        raise StageMissing(
            f"{topic_id}: the resolution to publish is no longer staged (a newer resolution replaced it); "
            "materialize resolved_brick_states and topic_manifest together"
        )
    entries = vault.staged_manifest_entries(topic_id)
    changed = previous is None or previous.bricks != entries
    earlier = vault.earlier_manifest_listing(topic_id, entries) if changed and previous is not None else None
    manifest = next_manifest(topic_id, entries, previous, earlier)
    vault.publish_staged(topic_id, manifest, dagster_run_id=dagster_run_id, sealed=sealed, inputs_digest=digest)
    return (manifest or previous), manifest is not None
