"""The per-topic asset graph: raw runs → pointer extractions → validated bricks → resolved states → manifest.

Assets are thin: load from the vault, call one phase's step (`extract/step.py`, `gate/step.py`, `resolve/step.py`, `publish/step.py`), store, report.
"""


import sys
from pathlib import Path

import dagster as dg

from nexus_assets.core.models import Topic
from nexus_assets.defs.metadata import (
    PREVIEW_BRICKS,
    bricks_preview,
    counts_table,
    non_empty,
    table,
)
from nexus_assets.defs.partitions import SINGLE_RUN, each_topic, skipped_metadata, skipped_topics, topics_partitions
from nexus_assets.defs.progress import LLMProgress
from nexus_assets.defs.resources import ExtractorResource, NexusSettings, VaultResource
from nexus_assets.drift.step import current_drift, full_drift, record_drift
from nexus_assets.extract.about import HiddenOnly
from nexus_assets.extract.about_step import judge_record
from nexus_assets.extract.backends import OpenAIExtractor
from nexus_assets.extract.step import extract_phase
from nexus_assets.gate.step import validate_phase
from nexus_assets.ingest.step import ingest_runs
from nexus_assets.lifecycle.step import (
    TopicFileError,
    record_topic_files,
    runs_ignored_since_lock,
)
from nexus_assets.llm.client import CacheMiss, LLMFatalError
from nexus_assets.publish.step import publish_phase
from nexus_assets.embedding.embedder import (
    MODEL as EMBEDDING_MODEL,  # the name only: no model loads
)
from nexus_assets.resolve.step import Resolution, StageMissing, resolve_if_changed
from nexus_assets.search.step import refresh as refresh_search
from nexus_assets.topics.files import find_topic, read_topic_files, topic_id_conflicts
from nexus_assets.store import Vault
from nexus_assets.core.links import topic_url
from nexus_assets.defs.outcome import StepOutcome

WRITER_POOL = "duckdb_writer"
# Shown in the catalog: who to ask about these assets.
OWNERS = ["team:nexus-sync"]


def topic_asset(stage: str, **kwargs):
    """An asset of the per-topic graph: partitioned by topic, in its stage's group, owned and tagged like the rest."""
    return dg.asset(partitions_def=topics_partitions, backfill_policy=SINGLE_RUN, group_name=stage, owners=OWNERS,
                    tags={"nexus/stage": stage}, **kwargs)
# A run with this tag re-reads every source file in `checksum_drift` (the nightly schedule sets it).
FULL_VERIFY_TAG = "nexus/full_verify"


def current_topic(vault: Vault, topic_id: str) -> Topic:
    topic = vault.topics.topic(topic_id)
    if topic is None:
        raise dg.Failure(f"topic {topic_id!r} is not in the vault; materialize raw_runs for it first")
    return topic


@dg.asset(
    group_name="raw_runs",
    owners=OWNERS,
    tags={"nexus/stage": "raw_runs"},
    kinds={"json", "duckdb"},
    pool=WRITER_POOL,
    description="Every run file ingested once per sync, for all topics: a new or changed file is read, "
    "hashed and parsed once and its text nodes stored; an unchanged file is not even read.",
)
def run_files(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> dg.MaterializeResult:
    # Two syncs ingesting the same files at once would write the same rows: they take turns.
    with vault.open() as v, v.exclusive("nexus-ingest"):
        report = ingest_runs(
            v,
            settings.path("runs_dir"),
            limits=settings.limits,
            open_after=settings.open_after,
            progress=lambda m: settings.say(context, m),
        )
        v.topics.record_sources(runs_dir=settings.path("runs_dir"), topics_dir=settings.path("topics_dir"))
    if report.side_files_note:
        context.log.info(report.side_files_note)
    for line in report.forgotten:
        # Always said, even under --json: a person must see that a file in the runs folder is ignored.
        context.log.info(line)
        print(f"nexus: {line}", file=sys.stderr, flush=True)
    for err in report.errors:
        context.log.warning(f"ingestion error: {err.file}{' / ' + err.conversation if err.conversation else ''}: {err.problem}")
    settings.say(
        context,
        f"{report.files_scanned} run files, {report.files_unchanged} unchanged, {report.files_new} new; "
        f"{report.runs_new} new runs, {report.versions_new} new versions, {len(report.errors)} errors",
    )
    return dg.MaterializeResult(
        metadata={
            "files_scanned": report.files_scanned,
            "files_unchanged": report.files_unchanged,
            "files_new": report.files_new,
            "runs_new": report.runs_new,
            "run_versions_new": report.versions_new,
            "ingestion_errors": len(report.errors),
            "forgotten_skipped": len(report.forgotten),
            **non_empty(
                errors=table(
                    [{"file": e.file, "conversation": e.conversation or "", "problem": e.problem} for e in report.errors[:100]],
                    [("file", "string"), ("conversation", "string"), ("problem", "string")],
                )
            ),
        }
    )


def _raw_runs(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, topic_id: str) -> dg.MaterializeResult:
    files = read_topic_files(settings.path("topics_dir"))
    # Which of two files defining one topic_id is meant cannot be guessed: as `nexus sync`, refuse.
    conflicts = [line for line in topic_id_conflicts(files) if line.startswith(f"topic_id {topic_id!r} ")]
    if conflicts:
        raise dg.Failure(f"{conflicts[0]}. Nothing was compiled.")
    topic_file = find_topic(settings.path("topics_dir"), topic_id)
    if topic_file is None or topic_file.topic is None:
        raise dg.Failure(
            f"no valid topic file defines {topic_id!r} in {settings.topics_dir}; "
            "fix or restore it (see `nexus topics`), or remove the partition"
        )
    with vault.open() as v:
        try:
            (topic,) = record_topic_files(v, [topic_file])
        except TopicFileError as exc:
            raise dg.Failure(f"{exc}. Nothing was compiled.") from None
        if topic.state == "DRAFT":
            raise dg.Failure(
                f"topic {topic_id!r} is DRAFT: a person must activate it (`nexus activate {topic_id}`) before it is compiled"
            )
        runs_latest = v.runs.run_count()
        # A LOCKED topic still sees new runs arrive; they are listed here, never compiled into it.
        ignored = runs_ignored_since_lock(v, topic_id) if topic.state == "LOCKED" else None
        record = judge_record(v, topic) if topic.state != "LOCKED" else None
    if record is not None and record.hidden_only:
        # In the run's log: the topic's words are in messages it does not read (docs/inputs.md include_hidden).
        # The sync's result says it to every shell (services/sync.py), so it is not echoed here a second time.
        context.log.info(HiddenOnly(record.hidden_only, record.hidden_messages).note(topic_id))
    return dg.MaterializeResult(
        metadata={
            "topic_state": topic.state,
            "runs_latest": runs_latest,
            **({"runs_admitted": record.runs_admitted, "runs_about": record.runs_about,
                "runs_reading_tool_output": record.runs_reading_tools, "runs_judged_now": record.judged_now,
                "runs_keywords_only_hidden": record.hidden_only,
                "hidden_messages_with_keywords": record.hidden_messages} if record is not None else {}),
            **(
                {"runs_ignored_locked": len(ignored), **non_empty(ignored_runs=table([{"run_id": r} for r in ignored], [("run_id", "string")]))}
                if ignored is not None
                else {}
            ),
        }
    )


@topic_asset(
    "raw_runs",
    kinds={"json", "duckdb"},
    # The record's passages are built before any topic reads them (defs/record.py).
    deps=[run_files, dg.AssetKey("passages")],
    pool=WRITER_POOL,
    description="The topic's definition recorded, and the ingested runs it compiles; which of them it is about "
    "(its record: every passage of those runs, DESIGN §3.1).",
)
def raw_runs(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> None:
    each_topic(context, lambda topic_id: _raw_runs(context, vault, settings, topic_id).metadata, skipped=_nothing_new(context, vault, settings))


def _nothing_new(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> set[str]:
    """A sync's run (`settings.sync_inputs_file`): the topics whose marks, with the run files now
    ingested, equal their last clean run's (lifecycle/idle.py); the run leaves them alone."""
    if settings.sync_inputs_file is None:
        return set()
    import json

    from nexus_assets.lifecycle.idle import idle_topics

    inputs = json.loads(Path(settings.sync_inputs_file).read_text(encoding="utf-8"))
    with vault.open() as v:
        return idle_topics(v, list(context.partition_keys), inputs)


def _extractor_metadata(context: dg.AssetExecutionContext, settings: NexusSettings, topic_id: str, backend) -> dict:
    """What the extractor did, as metadata: the LLM's requests, tokens and cost (zero for the embedded one)."""
    if isinstance(backend, OpenAIExtractor):
        if backend.stopped_by_cost:
            settings.say(
                context,
                f"{topic_id}: stopped sending at the cost ceiling (${backend.config.max_cost_usd:g}); "
                "what was answered is kept, and the next sync resumes from there",
            )
        if backend.batch_ids:
            settings.say(context, f"{topic_id}: batches {', '.join(backend.batch_ids)}")
        return {
            "llm_calls": backend.calls,
            "llm_requests": backend.requests,
            "llm_requests_sent": backend.requests_sent,
            "llm_requests_not_sent": backend.unsent,
            "llm_peak_in_flight": backend.peak_in_flight,
            "llm_stopped_by_cost": backend.stopped_by_cost,
            "llm_calls_failed": len(backend.failed),
            "llm_prompt_tokens": backend.prompt_tokens,
            "llm_completion_tokens": backend.completion_tokens,
            **non_empty(
                llm_cost_usd_estimated=backend.cost_usd,
                llm_batches=", ".join(backend.batch_ids) or None,
                failed_calls=table(
                    [{"run_id": r.run_id, "chunk": f"{r.chunk_index + 1}/{r.chunk_count}", "error": r.error or ""} for r in backend.failed],
                    [("run_id", "string"), ("chunk", "string"), ("error", "string")],
                ),
            ),
        }
    else:
        # The embedded extractor calls no model: zero is a fact here, not a missing value.
        return {"llm_calls": 0, "llm_prompt_tokens": 0, "llm_completion_tokens": 0, "llm_cost_usd_estimated": 0.0}


def _pointer_extractions(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, extractor: ExtractorResource, topic_id: str) -> dg.MaterializeResult:
    with vault.open() as v, settings.node_scope():
        topic = current_topic(v, topic_id)
        if topic.state == "LOCKED":
            settings.say(context, f"{topic.topic_id}: LOCKED; new runs are reported, not compiled")
            return dg.MaterializeResult(metadata={"topic_id": topic.topic_id, "skipped": "topic is LOCKED"})
        backend = extractor.build(v, progress=LLMProgress(context, topic_id=topic.topic_id, echo=settings.progress), topic_id=topic.topic_id)
        try:
            report = extract_phase(v, topic, backend, progress=lambda m: settings.say(context, m))
        except (LLMFatalError, CacheMiss) as exc:
            raise dg.Failure(f"{topic.topic_id}: {exc}") from None
        finally:
            if isinstance(backend, OpenAIExtractor):
                backend.close()
    settings.say(
        context,
        f"{topic.topic_id}: {report.extracted} runs extracted ({report.pointers} pointers), {report.reused} unchanged"
        + (f"; {report.runs_grown} grown runs: {report.nodes_read} new nodes read, {report.nodes_replayed} replayed"
           if report.runs_grown else ""),
    )
    if report.incomplete:
        settings.say(
            context,
            f"{topic.topic_id}: {len(report.incomplete)} runs not extracted: their LLM calls failed; "
            "they are asked again at the next sync (see `nexus calls`)",
        )
    metadata = {
        "topic_id": topic.topic_id,
        "extractor": backend.identity,
        "runs_considered": report.candidates,
        "runs_extracted": report.extracted,
        "runs_unchanged": report.reused,
        "pointers": report.pointers,
        "runs_incomplete": len(report.incomplete),
        # A grown run's unchanged nodes keep their answers; only its new nodes are read (extract/replay.py).
        "runs_grown": report.runs_grown,
        "nodes_read_new": report.nodes_read,
        "nodes_replayed": report.nodes_replayed,
        # The UI lists figures without saying which are this sync's work and which are totals.
        "counted": "this sync: runs_extracted, pointers, runs_incomplete, runs_grown, nodes_read_new, nodes_replayed "
        "(and every llm_ figure); "
        "of all the topic's runs: runs_considered, runs_unchanged",
    }
    metadata |= _extractor_metadata(context, settings, topic.topic_id, backend)
    # What the sync service reads (defs/outcome.py): typed, beside the figures shown to a person.
    metadata |= StepOutcome(
        runs_incomplete=len(report.incomplete), llm_stopped_by_cost=isinstance(backend, OpenAIExtractor) and bool(backend.stopped_by_cost)
    ).metadata()
    if report.incomplete:
        context.log.warning(
            f"{len(report.incomplete)} runs not fully extracted (failed LLM calls); they are retried next sync: "
            + "; ".join(report.notes[:20])
        )
    return dg.MaterializeResult(metadata=metadata)


@topic_asset(
    "pointers",
    kinds={"python", "duckdb"},
    deps=[raw_runs],
    pool=WRITER_POOL,
    description="Untrusted pointers {topic_id, json_path, verbatim_quote} from the extractor, per run version.",
)
def pointer_extractions(
    context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, extractor: ExtractorResource
) -> None:
    each_topic(context, lambda topic_id: _pointer_extractions(context, vault, settings, extractor, topic_id).metadata)


def _validated_bricks(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, extractor: ExtractorResource, topic_id: str) -> dg.MaterializeResult:
    with vault.open() as v, settings.node_scope():
        topic = current_topic(v, topic_id)
        veto, note = extractor.semantic_veto(topic, v)
        if note:
            # Always said, even under --json: the topic asked for a veto that is not running.
            context.log.warning(note)
            print(f"nexus: {note}", file=sys.stderr, flush=True)
        report = validate_phase(v, topic, veto)
        totals = v.occurrences.rejection_counts(topic.topic_id)
    veto_metadata = {}
    if veto is not None:
        t = veto.tally
        veto_metadata = {"veto_questions": t.questions, "veto_replayed": t.replayed, "veto_sent": t.sent,
                         "veto_discarded": t.discarded, "veto_kept_unsure_or_failed": t.kept_unsure}
        settings.say(
            context,
            f"{topic.topic_id}: semantic veto: {t.questions} questions ({t.replayed} replayed, {t.sent} sent), "
            f"{t.discarded} discarded, {t.kept_unsure} kept as unsure or failed",
        )
        for line in t.notes:
            context.log.warning(line)
    settings.say(
        context,
        f"{topic.topic_id}: {report.accepted} pointers passed the gate, {sum(report.rejected.values())} rejected",
    )
    return dg.MaterializeResult(
        metadata={
            "topic_id": topic.topic_id,
            "extractions_validated": report.extractions,
            "accepted": report.accepted,
            "rejected": sum(report.rejected.values()),
            "rejections_total": sum(totals.values()),
            **veto_metadata,
            "counted": "this sync: extractions_validated, accepted, rejected, rejected_now_by_reason; "
            "every sync so far: rejections_total, rejections_by_reason",
            **non_empty(
                rejected_now_by_reason=counts_table(report.rejected, "reason"),
                rejections_by_reason=counts_table(totals, "reason"),
            ),
        }
    )


@topic_asset(
    "bricks",
    kinds={"python", "duckdb"},
    deps=[pointer_extractions],
    pool=WRITER_POOL,
    description="The hallucination gate: pointers whose quote is verbatim in the node they name, with offsets; the rest as rejections.",
)
def validated_bricks(
    context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, extractor: ExtractorResource
) -> None:
    each_topic(context, lambda topic_id: _validated_bricks(context, vault, settings, extractor, topic_id).metadata)


def _resolved_brick_states(context: dg.AssetExecutionContext, vault: VaultResource, topic_id: str) -> dg.Output[Resolution]:
    # The nightly schedule asks for the full re-read of every source file; a sync checks what moved.
    full = context.run.tags.get(FULL_VERIFY_TAG) == "true"
    with vault.open() as v:
        topic = current_topic(v, topic_id)
        check = full_drift(v, topic_id) if full else current_drift(v, topic_id)
        flips = record_drift(v, check, observed_by=f"sync {context.run.run_id}")
        resolution, tally = resolve_if_changed(v, topic, preview=PREVIEW_BRICKS)
        names = v.runs.run_names(b.sources[0].run_id for b in tally.preview if b.sources) if tally else {}
    drift_metadata = {
        "sources_checked_for_drift": len(check.checked),
        "full_reread": full,
        "source_status_flips": len(flips),
        "counted": "this sync: sources_checked_for_drift, source_status_flips; the topic now: bricks, visible, "
        "linked_sources, stale, state_*",
    }
    if tally is None:
        return dg.Output(
            resolution,
            metadata={"topic_id": topic_id, "unchanged": True, "inputs_digest": resolution.inputs_digest, **drift_metadata},
        )
    # An incremental resolution counts the bricks it changed (the topic's totals are the manifest's).
    counted = "changed_" if resolution.incremental else ""
    return dg.Output(
        resolution,
        metadata={
            "topic_id": topic_id,
            "unchanged": False,
            "resolution": "incremental" if resolution.incremental else "full",
            "inputs_digest": resolution.inputs_digest,
            f"{counted}bricks": tally.bricks,
            f"{counted}visible": tally.visible,
            f"{counted}linked_sources": tally.linked_sources,
            f"{counted}stale": tally.stale,
            **{f"{counted}state_{state.lower()}": n for state, n in sorted(tally.states.items())},
            **non_empty(**{f"{counted}preview": bricks_preview(tally.preview, names=names)}),
            **drift_metadata,
        },
    )


@topic_asset(
    "states",
    kinds={"python"},
    deps=[validated_bricks],
    pool=WRITER_POOL,
    io_manager_key="topic_values",
    description="Each source's drift status as the files stand now (re-reading what moved; every file in the "
    "nightly run), then the bricks after the uniqueness gate (LINK / SUPERSEDE / APPEND) with states and "
    "canonical order; resolution is skipped when nothing it reads changed since the last sync.",
)
def resolved_brick_states(context: dg.AssetExecutionContext, vault: VaultResource) -> dg.Output[dict[str, Resolution | None]]:
    # The resolutions by topic, for topic_manifest (small: the bricks wait in the vault's stage).
    out = {}
    skipped = skipped_topics(context)
    for topic_id in context.partition_keys:
        if topic_id in skipped:
            out[topic_id] = None
            context.add_asset_metadata(skipped_metadata(topic_id), partition_key=topic_id)
            continue
        resolved = _resolved_brick_states(context, vault, topic_id)
        out[topic_id] = resolved.value
        context.add_asset_metadata(dict(resolved.metadata), partition_key=topic_id)
    return dg.Output(out)


def _topic_manifest(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, resolved_brick_states: Resolution, topic_id: str) -> dg.MaterializeResult:
    with vault.open() as v:
        topic = current_topic(v, topic_id)
        try:
            manifest, recorded = publish_phase(v, topic, resolved_brick_states, dagster_run_id=context.run.run_id)
        except StageMissing as exc:
            raise dg.Failure(str(exc)) from None
        visible = manifest.bricks if manifest else 0
        # The first bricks in manifest order, read back: the preview shows even on a sync that changed nothing.
        preview = v.bricks.select(topic.topic_id, visible_only=True, limit=PREVIEW_BRICKS)
        # Conflicts among the published bricks as related so far: bricks new in this sync are related
        # once embedded (brick_embeddings), and the open_conflicts check, which runs after that, counts them.
        related_pairs, open_conflicts = v.relations.pair_counts(topic.topic_id, EMBEDDING_MODEL)
        names = v.runs.run_names(b.sources[0].run_id for b in preview if b.sources)
        # The search index follows the manifest (derived data: a failure here loses nothing).
        try:
            reindexed = bool(refresh_search(v, vault.address, [topic.topic_id]))
        except Exception as exc:  # noqa: BLE001
            reindexed = False
            context.log.warning(f"{topic.topic_id}: search index not updated ({exc}); `nexus search` rebuilds it")
    settings.say(
        context,
        f"{topic.topic_id}: manifest {manifest.manifest_hash[:12] if manifest else '-'} "
        f"({visible} bricks{', new' if recorded else ', unchanged'})",
    )
    return dg.MaterializeResult(
        metadata={
            "topic_id": topic.topic_id,
            **non_empty(
                manifest_hash=manifest.manifest_hash if manifest else None,
                previous_hash=manifest.previous_hash if manifest else None,
            ),
            "new_manifest": recorded,
            "search_reindexed": reindexed,
            "bricks": visible,
            "open_conflicts": open_conflicts,
            "related_pairs": related_pairs,
            **non_empty(preview=bricks_preview(preview, names=names)),
            "viewer": dg.MetadataValue.url(topic_url(topic.topic_id, settings.viewer_url)),
        }
    )


@topic_asset(
    "manifest",
    kinds={"duckdb"},
    pool=WRITER_POOL,
    description="The topic's ordered, hashed manifest; bricks and manifest are published in one transaction.",
)
def topic_manifest(
    context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, resolved_brick_states: dict[str, Resolution | None]
) -> None:
    each_topic(context, lambda topic_id: _topic_manifest(context, vault, settings, resolved_brick_states[topic_id], topic_id).metadata)
