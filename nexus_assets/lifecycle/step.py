"""The topic lifecycle over the vault and the topic files (docs/invariants.md §7).

DRAFT → ACTIVE is the human gate (`activate`); ACTIVE → SEALING → LOCKED is `seal`, which only
runs when its gates pass. Both the `nexus` command and the Dagster `seal_topic` job call these
functions. Every state change is a row in `topic_transitions` with who made it and when.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from nexus_assets.core.models import (
    Brick,
    Manifest,
    Topic,
    TopicState,
)
from nexus_assets.discovery.records import drop_draft_topic
from nexus_assets.drift.step import DriftCheck, DriftStores, file_drift, record_drift
from nexus_assets.ingest.runfiles import file_sha256, scan_run_files
from nexus_assets.lifecycle.rules import (
    SEALED_STATES,
    RecordedTopic,
    StateLineError,
    definition_problems,
    drafts_to_drop,
    set_state_line,
)
from nexus_assets.publish.immutability import final_problems
from nexus_assets.publish.manifest import chain_problems, hash_problems, link_problems
from nexus_assets.publish.step import PublishStores, publish_phase
from nexus_assets.resolve.step import ResolveStores, resolve_phase, stage_resolution
from nexus_assets.topics.files import TopicFile, find_topic, read_topic_files
from nexus_assets.topics.records import as_recorded
from nexus_assets.vault.connection import now

if TYPE_CHECKING:
    from nexus_assets.topics.records import TopicRecords


class LifecycleStores(ResolveStores, PublishStores, DriftStores, Protocol):
    """What activation and sealing use: the topics and their states, and everything resolving,
    publishing and checking drift use (a seal resolves and publishes once more)."""

    topics: TopicRecords
    conn: Any

    def topic_state(self, topic_id: str) -> str | None: ...


class LifecycleError(ValueError):
    """The request cannot be carried out as asked (unknown topic, wrong state, bad topic file)."""


class TopicFileError(LifecycleError):
    """A topic file may not be recorded as it stands (its identity changed, or it claims a seal)."""


def _file_key(path: str | Path) -> str:
    return str(Path(path).resolve())


# What the vault remembers


def recorded_topics(vault: LifecycleStores) -> dict[str, RecordedTopic]:
    states = vault.history.states_seen()
    files = vault.history.topic_source_files()
    return {
        t.topic_id: RecordedTopic(t, files.get(t.topic_id), tuple(states.get(t.topic_id) or ()))
        for t in vault.topics.all()
    }


def topic_history(vault: LifecycleStores, topic_id: str) -> list[dict]:
    """Every state change of a topic, oldest first: from_state, to_state, actor, changed_at."""
    return vault.history.topic_history(topic_id)


def sealed_manifest(vault: LifecycleStores, topic_id: str) -> Manifest | None:
    return vault.bricks.latest_manifest(topic_id, sealed=True)


def sealed_snapshot(vault: LifecycleStores, topic_id: str) -> dict[str, Brick]:
    """The FINAL bricks exactly as they were when the topic was sealed."""
    return vault.history.sealed_snapshot(topic_id)


def _store_snapshot(vault: LifecycleStores, topic_id: str, bricks: Sequence[Brick], manifest_hash: str) -> None:
    vault.history.store_sealed_snapshot(topic_id, bricks, manifest_hash, now())


def immutability_problems(vault: LifecycleStores, topic_id: str, *, with_chain: bool = True, full: bool = True) -> list[str]:
    """Everything that shows the topic's FINAL bricks or its manifest history were altered.

    `full=False` (the check after each sync) re-hashes only the newest manifest and follows the
    links of the rest: re-hashing every manifest ever written would make each sync cost more than
    the last. The nightly run, `nexus verify` and sealing re-hash them all."""
    latest: Manifest | None = None
    if not with_chain:
        problems = []
    elif full:
        problems = chain_problems(vault.bricks.manifests(topic_id))
    else:
        links = vault.history.manifest_links(topic_id)
        problems = link_problems(topic_id, links)
        if links:
            # Re-hashed in SQL where it can be: parsing a large list costs more than the rest of the sync.
            rehashed = vault.bricks.latest_hash_problems(topic_id, len(links) - 1)
            if rehashed is None:
                latest = vault.bricks.latest_manifest(topic_id)
                rehashed = hash_problems(len(links) - 1, latest) if latest else []
            problems += rehashed
    sealed = sealed_manifest(vault, topic_id)
    if sealed is not None and latest is None:
        latest = vault.bricks.latest_manifest(topic_id)
    # Never sealed: only a FINAL brick (which nothing but a seal may make) is a problem to look at.
    bricks = vault.bricks.select(topic_id) if sealed is not None else vault.bricks.select(topic_id, state="FINAL")
    return problems + final_problems(topic_id, bricks, sealed, sealed_snapshot(vault, topic_id), latest)


def runs_ignored_since_lock(vault: LifecycleStores, topic_id: str) -> list[str]:
    """Runs (or new versions of runs) ingested after the topic was LOCKED: seen, never compiled into it."""
    locked = vault.history.locked_at(topic_id)
    return vault.history.runs_ingested_after(locked) if locked is not None else []


# Topic files


def topic_file_problems(vault: LifecycleStores, files: Sequence[TopicFile]) -> list[str]:
    recorded = recorded_topics(vault)
    by_file: dict[str, RecordedTopic] = {}
    for r in recorded.values():
        if r.source_file and (r.was_active or _file_key(r.source_file) not in by_file):
            by_file[_file_key(r.source_file)] = r
    problems = []
    for tf in files:
        if tf.topic is None:
            continue
        problems += definition_problems(
            tf.topic, str(tf.path), recorded.get(tf.topic.topic_id), previous_id=by_file.get(_file_key(tf.path))
        )
    return problems


def record_topic_files(
    vault: LifecycleStores, files: Sequence[TopicFile], *, actor: str = "topic file", reselect: Sequence[str] = ()
) -> list[Topic]:
    """Record valid topic files in the vault, all or none: any identity problem raises TopicFileError.
    `reselect`: the topics `nexus sync --reselect` moves to this release's keyword rule.

    A DRAFT topic whose file was deleted is dropped from the vault here (see `drafts_to_drop`)."""
    problems = topic_file_problems(vault, files)
    if problems:
        raise TopicFileError("\n".join(problems))
    stored = [
        vault.topics.record_topic(tf.topic, _file_key(tf.path), actor=actor, reselect=tf.topic.topic_id in reselect)
        for tf in files
        if tf.topic is not None
    ]
    drop_deleted_drafts(vault, {tf.topic.topic_id for tf in files if tf.topic is not None}, actor=actor)
    return stored


def _maybe_present(path: Path) -> bool:
    """Whether a topic file may still be there: one in a folder we cannot read counts as present,
    as a draft is dropped only when its file is surely gone."""
    try:
        return path.is_file()
    except OSError:
        return True


def drop_deleted_drafts(vault: LifecycleStores, defined: set[str], *, actor: str = "topic file") -> list[str]:
    """Drop the DRAFT topics whose files are gone; returns their ids."""
    recorded = [r for r in recorded_topics(vault).values() if r.topic.state == "DRAFT" and r.source_file]
    present = {r.source_file for r in recorded if _maybe_present(Path(r.source_file))}
    gone = drafts_to_drop(recorded, defined, present)
    return [t for t in gone if drop_draft_topic(vault, t, actor=f"{actor}: its file was deleted")]


def rewrite_state(path: Path, state: TopicState) -> None:
    """Set the `state:` line of a topic file, keeping every other byte; checked before it is written."""
    raw = path.read_bytes()
    bom = raw.startswith(b"\xef\xbb\xbf")
    text = raw.decode("utf-8-sig")
    try:
        new = set_state_line(text, state)
    except StateLineError as exc:
        raise TopicFileError(f"topic file {path}: cannot set `state: {state}`: {exc}") from None
    before = yaml.safe_load(text) or {}
    try:
        after = yaml.safe_load(new)
    except yaml.YAMLError:
        # A file in flow style (`{"topic_id": …}`) has no `state:` line to set.
        after = None
    if not isinstance(after, dict) or after.get("state") != state or {k: v for k, v in after.items() if k != "state"} != {
        k: v for k, v in before.items() if k != "state"
    }:
        raise TopicFileError(f"topic file {path}: its `state:` line could not be rewritten safely; set `state: {state}` by hand")
    tmp = path.with_name(f".{path.name}.nexus-tmp")
    tmp.write_bytes((b"\xef\xbb\xbf" if bom else b"") + new.encode("utf-8"))
    shutil.copymode(path, tmp)
    os.replace(tmp, path)


def _topic_file(topics_dir: Path, topic_id: str) -> TopicFile:
    files = read_topic_files(topics_dir)
    for tf in files:
        if tf.topic is not None and tf.topic.topic_id == topic_id:
            return tf
    broken = [tf.problem for tf in files if tf.problem and tf.path.stem == topic_id]
    raise LifecycleError(
        f"no valid topic file defines {topic_id!r} in {topics_dir}"
        + (f" ({broken[0]})" if broken else "")
        + "; write one, or propose one with `nexus discover`"
    )


# The human gate


@dataclass
class Activation:
    topic_id: str
    path: str
    previous_state: str | None
    file_rewritten: bool
    state: str = "ACTIVE"


def activate(vault: LifecycleStores, topics_dir: Path, topic_id: str, *, actor: str) -> Activation:
    """DRAFT → ACTIVE: rewrite only the file's `state:` line and record who activated it."""
    tf = _topic_file(topics_dir, topic_id)
    before = vault.topic_state(topic_id)
    if before in SEALED_STATES:
        raise LifecycleError(
            f"topic {topic_id!r} is {before} (sealed); it cannot become ACTIVE again. Create a new topic for new material"
        )
    problems = topic_file_problems(vault, [tf])
    if problems:
        raise TopicFileError("\n".join(problems))
    if before is None:
        vault.topics.record_topic(tf.topic, _file_key(tf.path))  # the proposal itself, as a person left it
    rewritten = tf.topic.state != "ACTIVE"
    if rewritten:
        rewrite_state(tf.path, "ACTIVE")
    vault.topics.record_topic(tf.topic.model_copy(update={"state": "ACTIVE"}), _file_key(tf.path), actor=actor)
    return Activation(topic_id, str(tf.path), before, rewritten)


# Sealing


@dataclass(frozen=True)
class GateFailure:
    gate: str  # no_bricks | open_runs | stale_bricks | manifest_chain | sync_out_of_date
    problem: str
    offending: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"gate": self.gate, "problem": self.problem, "offending": list(self.offending)}


class SealRefused(LifecycleError):
    def __init__(self, topic_id: str, failures: Sequence[GateFailure]):
        self.topic_id = topic_id
        self.failures = list(failures)
        super().__init__(
            f"seal of {topic_id!r} refused:\n" + "\n".join(f"- gate {f.gate}: {f.problem}" for f in self.failures)
        )


def _listed(items: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _definition(topic: Topic) -> dict:
    return topic.model_dump(mode="json", exclude={"state"})


def sync_lag(vault: LifecycleStores, topic: Topic, *, topics_dir: Path | None = None, runs_dir: Path | None = None) -> tuple[list[str], list[str]]:
    """What the topic's latest successful sync has not seen: (reasons, offending runs and files)."""
    tid = topic.topic_id
    last = vault.history.latest_ok_sync(tid)
    if last is None:
        return [f"topic {tid!r} has never been synced"], []
    reasons, offending = [], []
    ingested = vault.history.runs_ingested_after(last)
    if ingested:
        reasons.append(f"runs ingested after it: {_listed(ingested)}")
        offending += ingested
    closed = vault.history.runs_closed_after(last)
    if closed:
        reasons.append(f"runs closed after it: {_listed(closed)}")
        offending += [r for r in closed if r not in offending]
    # A sync can succeed with runs its extractor did not answer for (failed LLM calls are retried
    # by the next sync); their bricks would be missing from the seal.
    unanswered = vault.history.runs_not_validated_for(tid)
    if unanswered:
        reasons.append(f"runs not extracted and validated for it yet: {_listed(unanswered)}")
        offending += [r for r in unanswered if r not in offending]
    if runs_dir is not None:
        seen = vault.runs.files_seen()
        unseen = [str(p) for p in scan_run_files(runs_dir) if file_sha256(p) not in seen]
        if unseen:
            reasons.append(f"run files not ingested yet: {_listed(unseen)}")
            offending += unseen
    if topics_dir is not None:
        tf = find_topic(topics_dir, tid)
        # The file as the vault would record it: a topic pinned to exact keywords stays so.
        if tf is not None and tf.topic is not None and (
            _definition(as_recorded(tf.topic, vault.topics.keywords_pinned(tid))) != _definition(topic)
        ):
            reasons.append(f"its topic file {tf.path} changed")
            offending.append(str(tf.path))
    return reasons, offending


def seal_gates(vault: LifecycleStores, topic: Topic, *, topics_dir: Path | None = None, runs_dir: Path | None = None) -> list[GateFailure]:
    """Every gate that stops the topic from being sealed now; empty when it may be sealed."""
    tid = topic.topic_id
    failures = []
    bricks = vault.bricks.select(tid)
    visible = [b for b in bricks if b.state != "SUPERSEDED"]
    if not visible:
        failures.append(
            GateFailure(
                "no_bricks",
                f"topic {tid!r} has no bricks, so there is nothing to seal; sync it (`nexus sync --topic {tid}`) "
                "or widen its required_keywords",
            )
        )
    run_ids = sorted({s.run_id for b in bricks for s in b.sources})
    status = vault.runs.run_status(run_ids)
    open_runs = [r for r in run_ids if status.get(r, "OPEN") == "OPEN"]
    if open_runs:
        failures.append(
            GateFailure(
                "open_runs",
                f"{len(open_runs)} source run(s) of its bricks are still OPEN: {_listed(open_runs)}; "
                f"close each with `nexus close RUN_ID` once its conversation is over, sync, then seal again",
                tuple(open_runs),
            )
        )
    drifts = file_drift(vault, visible)
    record_drift(vault, DriftCheck(frozenset(a for b in visible for a in b.sources), tuple(drifts)), observed_by="seal gate")
    why = {d.brick_id: d.problem for d in reversed(drifts)}
    stale = vault.drift.stale_brick_ids(tid)
    if stale:
        described = [f"{b[:12]}" + (f" ({why[b]})" if b in why else "") for b in stale]
        failures.append(
            GateFailure(
                "stale_bricks",
                f"{len(stale)} brick(s) are stale, their source text changed since it was compiled: {_listed(described, 5)}; "
                f"restore the source text of those runs and sync again (`nexus trace BRICK_ID` shows where)",
                tuple(stale),
            )
        )
    chain = chain_problems(vault.bricks.manifests(tid))
    if chain:
        failures.append(
            GateFailure(
                "manifest_chain",
                f"the manifest history of {tid!r} was altered ({'; '.join(chain[:3])}); a topic whose history does not "
                "verify cannot be sealed: restore the vault from a backup and run `nexus verify`",
            )
        )
    reasons, offending = sync_lag(vault, topic, topics_dir=topics_dir, runs_dir=runs_dir)
    if reasons:
        failures.append(
            GateFailure(
                "sync_out_of_date",
                f"the latest sync of {tid!r} does not reflect the current inputs ({'; '.join(reasons)}); "
                f"run `nexus sync --topic {tid}`, then seal again",
                tuple(offending),
            )
        )
    return failures


@dataclass
class SealResult:
    topic_id: str
    state: str
    manifest_hash: str | None
    bricks: int
    new_manifest: bool = False
    already_sealed: bool = False
    file_updated: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "topic_id": self.topic_id,
            "sealed": True,
            "state": self.state,
            "manifest_hash": self.manifest_hash,
            "bricks": self.bricks,
            "new_manifest": self.new_manifest,
            "already_sealed": self.already_sealed,
            "file_updated": self.file_updated,
            "notes": self.notes,
        }


def seal(
    vault: LifecycleStores,
    topic_id: str,
    *,
    actor: str,
    topics_dir: Path | None = None,
    runs_dir: Path | None = None,
    dagster_run_id: str | None = None,
) -> SealResult:
    """ACTIVE → SEALING → LOCKED: every visible brick becomes FINAL, the order freezes, the final
    manifest is recorded (sealed) with a snapshot of its bricks, and the topic file says LOCKED.

    Raises SealRefused when a gate fails. A seal interrupted in SEALING resumes when run again.
    """
    topic = vault.topics.topic(topic_id)
    if topic is None:
        known = ", ".join(t.topic_id for t in vault.topics.all()) or "none"
        raise LifecycleError(f"unknown topic {topic_id!r}; topics in the vault: {known}")
    if topic.state == "LOCKED":
        sealed = sealed_manifest(vault, topic_id)
        count = len(sealed.bricks) if sealed else 0
        return SealResult(topic_id, "LOCKED", sealed.manifest_hash if sealed else None, count, already_sealed=True)
    if topic.state == "DRAFT":
        raise LifecycleError(
            f"topic {topic_id!r} is DRAFT; activate it (`nexus activate {topic_id}`), sync it, and close its runs before sealing"
        )
    failures = seal_gates(vault, topic, topics_dir=topics_dir, runs_dir=runs_dir)
    if failures:
        raise SealRefused(topic_id, failures)

    prior = {b.brick_id: b for b in vault.bricks.select(topic_id)}
    bricks = resolve_phase(vault, topic, sealed=True)

    def unchanged(b: Brick) -> bool:
        before = prior.get(b.brick_id)
        return before is not None and (b.content, b.sources, b.order_index) == (before.content, before.sources, before.order_index)

    # Promotion flips state only; anything else means the vault is behind its inputs.
    moved = [b.brick_id[:12] for b in bricks if b.state == "FINAL" and not unchanged(b)]
    if moved:
        problem = (
            f"sealing would change bricks beyond their state: {_listed(moved)}; "
            f"run `nexus sync --topic {topic_id}`, then seal again"
        )
        raise SealRefused(topic_id, [GateFailure("sync_out_of_date", problem, tuple(moved))])
    vault.topics.transition_topic(topic_id, "SEALING", actor=actor)
    manifest, recorded = publish_phase(vault, topic, stage_resolution(vault, topic, bricks), dagster_run_id=dagster_run_id, sealed=True)
    with vault.transaction():
        _store_snapshot(vault, topic_id, bricks, manifest.manifest_hash)
    problems = immutability_problems(vault, topic_id)
    if problems:
        raise LifecycleError(
            f"topic {topic_id!r} stays SEALING: its sealed state does not verify: {'; '.join(problems[:5])}; "
            "run `nexus verify` and repair the vault before sealing again"
        )
    vault.topics.transition_topic(topic_id, "LOCKED", actor=actor)
    result = SealResult(topic_id, "LOCKED", manifest.manifest_hash, manifest.bricks, new_manifest=recorded)
    if topics_dir is not None:
        tf = find_topic(topics_dir, topic_id)
        if tf is None:
            result.notes.append(f"no topic file defines {topic_id!r} in {topics_dir}; the vault keeps it LOCKED regardless")
        else:
            try:
                rewrite_state(tf.path, "LOCKED")
                result.file_updated = True
            except (TopicFileError, OSError) as exc:
                result.notes.append(f"{exc}; the vault keeps it LOCKED regardless")
    return result
