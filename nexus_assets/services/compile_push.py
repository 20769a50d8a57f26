"""A pushed run compiled in the server that wrote it (docs/agents.md: "a pushed run's new nodes are
compiled on that warm state"; docs/agents.md).

A push (`PUT /v1/runs/{id}`, `POST …/messages`, `POST …/close`) writes one run file under
`runs/pushed/`. Compiling it does what a sync does for that file, in this process and without a
Dagster run per topic (each costs seconds): the one file is ingested (no folder scan), then for
each topic that reads it the phase steps run as the topic's assets run them (extract, gate,
resolve, publish, embed, relate, vector index), and each step is recorded on the Dagster instance
as a runless materialization of that asset and topic partition, so the UI shows what the push did.

Every step does only what is new, as in a sync: an unchanged file is not read, an answered run
version is not asked again, a validated extraction is not validated again, an unchanged topic is
not resolved again. So compiling a push twice, or after a sync that already read the file, adds
nothing. What the fast path does not do (an LLM extractor's paid calls, a topic whose file changed
since it was recorded, the asset checks) is left to a full sync, which `needs_sync` says.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from nexus_assets.services.sync import SyncOutcome, topic_lock

log = logging.getLogger("nexus.push")


@dataclass(frozen=True)
class PushCompile:
    """What to compile: the pushed files and the topics that read them."""

    db: str
    runs_dir: Path
    topics_dir: Path
    files: tuple[Path, ...]
    topics: tuple[str, ...]
    extractor: str = "embedded"
    no_recall: bool = False


@dataclass
class _Recorder:
    """Runless materializations, reported once the vault is let go (a report never holds the writer)."""

    instance: object
    tags: dict = field(default_factory=dict)
    events: list = field(default_factory=list)

    def add(self, asset: str, topic_id: str | None, metadata: dict) -> None:
        self.events.append((asset, topic_id, {k: v for k, v in metadata.items() if v is not None}))

    def report(self) -> None:
        import dagster as dg

        if self.instance is None:
            return
        for asset, topic_id, metadata in self.events:
            self.instance.report_runless_asset_event(
                dg.AssetMaterialization(asset_key=asset, partition=topic_id, metadata=metadata, tags=self.tags or None)
            )


class NeedsSync(Exception):
    """This push is compiled by a full sync instead; the message says why."""


def _check_fast_path(vault, job: PushCompile) -> None:
    """NeedsSync when the fast path does not apply: an extractor whose calls a sync makes, or a
    topic whose file changed since a sync recorded it (a sync records it, with its lifecycle)."""
    from nexus_assets.extract.registry import extractor_kind
    from nexus_assets.topics.files import read_topic_files

    # The registry says what an extractor needs: one that calls an endpoint is paced, budgeted and
    # batched by a sync's plan, so its calls are never made by a push.
    if extractor_kind(job.extractor).calls_endpoint:
        raise NeedsSync(f"the {job.extractor} extractor's calls are made by a sync")
    defined = {tf.topic.topic_id: tf.topic for tf in read_topic_files(job.topics_dir) if tf.topic is not None}
    for topic_id in job.topics:
        stored = vault.topics.topic(topic_id)
        if stored is None or topic_id not in defined or stored != defined[topic_id]:
            raise NeedsSync(f"topic {topic_id!r} changed since the last sync; a sync records it")


# What a compile imports as it goes. A server loads them once before its first push (`prepare`),
# so that push costs what every later one does (about 2.5 s more otherwise, measured on 10k bricks).
_COMPILE_MODULES = (
    "nexus_assets.store", "nexus_assets.ingest.runfiles", "nexus_assets.ingest.step", "nexus_assets.defs.metadata",
    "nexus_assets.defs.resources", "nexus_assets.drift.step", "nexus_assets.extract.step", "nexus_assets.extract.explain",
    "nexus_assets.gate.step", "nexus_assets.resolve.step", "nexus_assets.publish.step", "nexus_assets.search.step",
    "nexus_assets.embedding.embedder", "nexus_assets.recall.index", "nexus_assets.relate.step", "dagster",
    "nexus_assets.ingest.passages_step", "nexus_assets.extract.about_step", "nexus_assets.recall.passages.index",
)


def prepare() -> None:
    """Load what every compile needs (the phases' modules and what they import), so a server's
    first push is as quick as the next; memory it would take at that push anyway."""
    import importlib

    for name in _COMPILE_MODULES:
        importlib.import_module(name)


def compile_push(job: PushCompile, *, instance=None, tags: dict | None = None) -> SyncOutcome:
    """Ingest the pushed files and compile them into each topic that reads them; one result per
    topic as `nexus sync --json` gives them (with `pushed: true`). NeedsSync when a full sync must
    do it (nothing was written then); vault errors propagate."""
    from nexus_assets.store import Vault

    recorder = _Recorder(instance, dict(tags or {}))
    outcome = SyncOutcome()
    started = time.perf_counter()
    with Vault.open(job.db) as vault:
        opened = time.perf_counter()
        _check_fast_path(vault, job)
        report = _ingest(vault, job, recorder)
        _record(vault, job, recorder)
        ingested = time.perf_counter()
        outcome.ingest_errors = [f"{e.file}: {e.problem}" for e in report.errors]
        outcome.ingest_ok = not report.errors
        for topic_id in job.topics:
            with topic_lock(job.db, topic_id):
                outcome.results.append(_compile_topic(vault, job, topic_id, recorder, outcome.ingest_errors))
        outcome.ingestion_errors_total = vault.runs.ingestion_error_count()
        compiled = time.perf_counter()
    closed = time.perf_counter()
    for r in outcome.results:
        r.setdefault("step_ms", {}).update(open=round((opened - started) * 1000), ingest=round((ingested - opened) * 1000),
                                           close=round((closed - compiled) * 1000))
    outcome.failed = any(not r["success"] for r in outcome.results) or not outcome.ingest_ok
    if instance is not None:
        from nexus_assets.services.sync import dagster_instance

        dagster_instance(job.db, list(job.topics), instance)  # the topics' partitions exist before they are reported
    recorder.report()
    log.info("push of %s compiled into %s in %.0f ms", [f.name for f in job.files], list(job.topics), (time.perf_counter() - started) * 1000)
    return outcome


def _ingest(vault, job: PushCompile, recorder: _Recorder):
    from nexus_assets.ingest.runfiles import Limits
    from nexus_assets.ingest.step import ingest_runs

    limits = Limits()  # the reader's limits from the settings, as a sync reads them
    # The same turn-taking as the run_files asset: two ingestions at once would write the same rows.
    with vault.exclusive("nexus-ingest"):
        report = ingest_runs(vault, job.runs_dir, limits=limits, only=list(job.files))
    recorder.add("run_files", None, {
        "files_scanned": report.files_scanned, "files_unchanged": report.files_unchanged, "files_new": report.files_new,
        "runs_new": report.runs_new, "run_versions_new": report.versions_new, "ingestion_errors": len(report.errors),
        "pushed_files": ", ".join(f.name for f in job.files),
    })
    for e in report.errors:
        log.warning("ingestion error: %s: %s", e.file, e.problem)
    return report


def _record(vault, job: PushCompile, recorder: _Recorder) -> None:
    """The pushed runs' new nodes split into passages, and the record's indexes brought in step (as
    the `passages` and `passage_index` assets do): only the new nodes are split and indexed."""
    from nexus_assets.ingest.passages_step import build_passages

    with vault.exclusive("nexus-ingest"):
        built = build_passages(vault, only=[_run_id(f) for f in job.files])
    recorder.add("passages", None, {"run_versions_split": built.versions, "nodes_split": built.nodes_split,
                                    "nodes_kept": built.nodes_kept, "passages_new": built.passages, "pushed": True})
    if job.no_recall:
        return
    from nexus_assets.recall.passages.index import refresh

    try:
        indexed = refresh(vault, job.db)
    except Exception:  # noqa: BLE001 (derived data: the next sync or recall rebuilds it)
        log.warning("the record's indexes were not updated after a push", exc_info=True)
        return
    recorder.add("passage_index", None, {"runs_indexed_now": indexed.runs_added, "passages_indexed_now": indexed.passages_added,
                                         "pushed": True})


def _compile_topic(vault, job: PushCompile, topic_id: str, recorder: _Recorder, ingest_errors: list[str]) -> dict:
    """One topic's steps on the open vault, each recorded as its asset's materialization."""
    from nexus_assets.defs.metadata import PREVIEW_BRICKS
    from nexus_assets.drift.step import current_drift, record_drift
    from nexus_assets.publish.step import publish_phase
    from nexus_assets.resolve.step import resolve_if_changed

    result = {"topic_id": topic_id, "success": True, "dagster_run_id": None, "pushed": True, "checks": {},
              "errors": list(ingest_errors)}
    topic = vault.topics.topic(topic_id)
    if topic is None or topic.state == "LOCKED":
        result["skipped"] = "not in the vault" if topic is None else "topic is LOCKED"
        return result
    took = result["step_ms"] = {}
    try:
        with _timed(took, "record"):
            from nexus_assets.extract.about_step import judge_record, keywords_only_hidden

            judged = judge_record(vault, topic)
            if (hidden := keywords_only_hidden(vault, topic)) is not None:
                result["keywords_only_hidden"] = hidden.as_dict(topic_id)
        recorder.add("raw_runs", topic_id, {"topic_id": topic_id, "runs_about": judged.runs_about,
                                            "runs_judged_now": judged.judged_now, "pushed": True})
        with _timed(took, "extract"):
            extracted, kept = _extract(vault, topic, job.extractor, recorder)
        result["kept"] = kept
        if extracted and not kept:
            result["note"] = _nothing_kept(vault, job, topic)
        with _timed(took, "resolve"):
            check = current_drift(vault, topic_id)
            record_drift(vault, check, observed_by="push")
            resolution, tally = resolve_if_changed(vault, topic, preview=PREVIEW_BRICKS)
        recorder.add("resolved_brick_states", topic_id, {
            "topic_id": topic_id, "unchanged": tally is None, "inputs_digest": resolution.inputs_digest,
            "sources_checked_for_drift": len(check.checked), "pushed": True,
            **({"changed_bricks" if resolution.incremental else "bricks": tally.bricks} if tally else {}),
        })
        with _timed(took, "publish"):
            manifest, recorded = publish_phase(vault, topic, resolution, dagster_run_id=None)
            _search(vault, job, topic_id)
        recorder.add("topic_manifest", topic_id, {
            "topic_id": topic_id, "manifest_hash": manifest.manifest_hash if manifest else None,
            "new_manifest": recorded, "bricks": manifest.bricks if manifest else 0, "pushed": True,
        })
        if not job.no_recall:
            with _timed(took, "recall"):
                _recall(vault, job, topic, manifest.manifest_hash if manifest else None, recorder)
        result["manifest_hash"] = manifest.manifest_hash if manifest else None
        result["bricks"] = vault.brick_counts().get(topic_id, {})
    except Exception as exc:  # noqa: BLE001 (one line in the push's status; the next sync does it again)
        log.exception("compiling a push into %s failed", topic_id)
        result["success"] = False
        result["errors"].append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return result


@contextmanager
def _timed(took: dict, step: str) -> Iterator[None]:
    """Milliseconds a step took, in the push's result (what `bench_api.py --pushes` reads to say where a push's time goes)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        took[step] = round((time.perf_counter() - started) * 1000)


def _extract(vault, topic, extractor_name: str, recorder: _Recorder) -> tuple[int, int]:
    """(run versions extracted now, pointers that passed the gate now)."""
    from nexus_assets.defs.resources import ExtractorResource
    from nexus_assets.extract.step import extract_phase
    from nexus_assets.gate.step import validate_phase

    extractor = ExtractorResource(backend=extractor_name)
    backend = extractor.build(vault, topic_id=topic.topic_id)
    report = extract_phase(vault, topic, backend)
    recorder.add("pointer_extractions", topic.topic_id, {
        "topic_id": topic.topic_id, "extractor": backend.identity, "runs_extracted": report.extracted,
        "pointers": report.pointers, "runs_incomplete": len(report.incomplete), "pushed": True,
    })
    veto, _ = extractor.semantic_veto(topic, vault)
    validated = validate_phase(vault, topic, veto)
    recorder.add("validated_bricks", topic.topic_id, {
        "topic_id": topic.topic_id, "extractions_validated": validated.extractions, "accepted": validated.accepted,
        "rejected": sum(validated.rejected.values()), "pushed": True,
    })
    return report.extracted, validated.accepted


def _nothing_kept(vault, job: PushCompile, topic) -> str | None:
    """Why a push gave the topic no brick, in one line an agent can act on (`nexus explain --run`
    says the same per sentence). A catch-all topic (no `required_keywords`, a scope such as
    "everything said") keeps nothing below its `min_relevance` (default 0.35): its scope is too
    general to be near any one statement, which is why a one-message push made no brick there."""
    from collections import Counter

    from nexus_assets.extract.explain import ExplainError, explain_run

    lines = []
    for run_id in dict.fromkeys(_run_id(f) for f in job.files):
        try:
            explained = explain_run(vault, run_id, topics=[topic.topic_id])
        except ExplainError:
            continue
        for entry in explained["topics"]:
            dropped = Counter((s.get("reason") or "not kept").split(" under ")[0].split(":")[0]
                              for s in entry["sentences"] if not s.get("keep"))
            if entry.get("scope"):
                lines.append(f"run {run_id}: {entry['scope']}")
            elif dropped:
                lines.append(f"run {run_id}: {sum(dropped.values())} sentences not kept ("
                             + ", ".join(f"{n} by {r}" for r, n in dropped.most_common()) + ")")
    if not lines:
        return None
    hint = ""
    if topic.extraction_policy.required_keywords is None and topic.min_relevance > 0:
        hint = (f"; topic {topic.topic_id!r} has no required_keywords, so a sentence must be near its scope description "
                f"(min_relevance {topic.min_relevance}): a topic meant to keep everything sets min_relevance: 0")
    return "; ".join(lines) + hint + f" (see `nexus explain --run RUN_ID --topic {topic.topic_id}`)"


def _search(vault, job: PushCompile, topic_id: str) -> None:
    from nexus_assets.search.step import refresh

    try:
        refresh(vault, job.db, [topic_id])
    except Exception:  # noqa: BLE001 (derived data: `nexus search` rebuilds it)
        log.warning("%s: search index not updated after a push", topic_id, exc_info=True)


def _recall(vault, job: PushCompile, topic, manifest_hash: str | None, recorder: _Recorder) -> None:
    """New bricks embedded and related, and the topic's vector index brought in step (in this
    process's memory too, so the next recall finds them)."""
    from datetime import datetime, timezone

    from nexus_assets.embedding.embedder import MODEL, embed
    from nexus_assets.recall.index import follow
    from nexus_assets.relate.step import relate_topic

    todo = vault.recall.fingerprints_without_embedding(topic.topic_id, MODEL)
    if todo:
        vault.recall.store_embeddings(MODEL, [fp for fp, _ in todo], embed([text for _, text in todo]), datetime.now(timezone.utc))
    idx, rebuilt = follow(vault, job.db, topic.topic_id, manifest_hash)
    # The index holds every visible brick's vector in manifest order: relating reads them from it.
    related = relate_topic(vault, topic, MODEL, visible=(idx.brick_ids, idx.index.reconstruct_n(0, idx.index.ntotal)))
    recorder.add("brick_embeddings", topic.topic_id, {
        "topic_id": topic.topic_id, "model": MODEL, "embedded_now": len(todo), "related_pairs": related.pairs,
        "open_conflicts": related.conflicts, "pushed": True,
    })
    recorder.add("vector_index", topic.topic_id, {"topic_id": topic.topic_id, "rows": idx.index.ntotal, "rebuilt": rebuilt, "pushed": True})


def catch_up(db: str, runs_dir: Path, topics_dir: Path) -> tuple[list[Path], list[str]]:
    """After a start: the pushed files the vault has not read as they are now, and the compiled
    topics that read any pushed run (a server killed after acknowledging a push, whether before it
    read the file or half-way through compiling it). Compiling them does only what is missing;
    ([], []) when nothing was ever pushed."""
    from nexus_assets.ingest.push import PUSHED_FOLDER
    from nexus_assets.ingest.runfiles import file_stat
    from nexus_assets.services.queries import NotFound, open_read
    from nexus_assets.topics.selection import topics_reading

    folder = runs_dir / PUSHED_FOLDER
    pushed = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not pushed:
        return [], []
    try:
        with open_read(db) as vault:
            known = vault.runs.file_stats()
    except NotFound:
        known = {}
    unread = [p for p in pushed if known.get(str(p.resolve())) != file_stat(p)]
    topics: list[str] = []
    for path in pushed:
        for t in topics_reading(topics_dir, _run_id(path), str(path)):
            if t not in topics:
                topics.append(t)
    return unread, topics


def _run_id(path: Path) -> str:
    """The run id a pushed file declares (its name when it is not readable: ingesting it names the problem)."""
    import json

    try:
        document = json.loads(path.read_bytes())
        return document["run_id"] if isinstance(document, dict) and isinstance(document.get("run_id"), str) else path.stem
    except (OSError, ValueError, RecursionError):
        return path.stem
