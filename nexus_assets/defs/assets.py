"""The per-topic asset graph: raw runs → pointer extractions → validated bricks → resolved states → manifest.

Assets are thin: load from the vault, call one phase of `nexus_assets.compiler`, store, report.
"""


import dagster as dg

from nexus_assets.compiler import Resolution, extract_phase, publish_phase, resolve_if_changed, validate_phase
from nexus_assets.core.models import Brick, Topic
from nexus_assets.defs.partitions import topics_partitions
from nexus_assets.defs.resources import ExtractorResource, NexusSettings, VaultResource
from nexus_assets.extractors import OpenAIExtractor
from nexus_assets.llm.client import CacheMiss, LLMFatalError
from nexus_assets.ingest import ingest_runs
from nexus_assets.lifecycle import TopicFileError, record_topic_files, runs_ignored_since_lock
from nexus_assets.topicfiles import find_topic
from nexus_assets.vault import Vault
from nexus_assets.web.links import topic_url

WRITER_POOL = "duckdb_writer"
# A run with this tag re-reads every source file in `checksum_drift` (the nightly schedule sets it).
FULL_VERIFY_TAG = "nexus/full_verify"
PREVIEW_BRICKS = 20


def current_topic(vault: Vault, topic_id: str) -> Topic:
    topic = vault.topic(topic_id)
    if topic is None:
        raise dg.Failure(f"topic {topic_id!r} is not in the vault; materialize raw_runs for it first")
    return topic


def bricks_preview(bricks: list[Brick]) -> str:
    visible = [b for b in bricks if b.state != "SUPERSEDED"]
    if not visible:
        return "_no bricks_"
    lines = ["| # | state | brick | text |", "|---|---|---|---|"]
    for b in visible[:PREVIEW_BRICKS]:
        text = b.content.replace("\n", " ").replace("|", "\\|")
        text = text if len(text) <= 140 else text[:139] + "…"
        flag = " ⚠ stale" if b.stale else ""
        lines.append(f"| {b.order_index} | {b.state}{flag} | `{b.brick_id[:12]}` | {text} |")
    if len(visible) > PREVIEW_BRICKS:
        lines.append(f"\n…and {len(visible) - PREVIEW_BRICKS} more (`nexus bricks <topic>`).")
    return "\n".join(lines)


@dg.asset(
    group_name="raw_runs",
    kinds={"json", "duckdb"},
    pool=WRITER_POOL,
    description="Every run file ingested once per sync, for all topics: a new or changed file is read, "
    "hashed and parsed once and its text nodes stored; an unchanged file is not even read.",
)
def run_files(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> dg.MaterializeResult:
    with vault.open() as v:
        report = ingest_runs(
            v,
            settings.path("runs_dir"),
            limits=settings.limits,
            open_after=settings.open_after,
            progress=lambda m: settings.say(context, m),
        )
        v.record_sources(runs_dir=settings.path("runs_dir"), topics_dir=settings.path("topics_dir"))
    if report.side_files_note:
        context.log.info(report.side_files_note)
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
            "errors": dg.MetadataValue.md(
                "\n".join(f"- `{e.file}`{' / ' + e.conversation if e.conversation else ''}: {e.problem}" for e in report.errors)
                or "_none_"
            ),
        }
    )


@dg.asset(
    partitions_def=topics_partitions,
    group_name="raw_runs",
    kinds={"json", "duckdb"},
    deps=[run_files],
    pool=WRITER_POOL,
    description="The topic's definition recorded, and the ingested runs it compiles.",
)
def raw_runs(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> dg.MaterializeResult:
    topic_id = context.partition_key
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
        runs_latest = v.run_count()
        # A LOCKED topic still sees new runs arrive; they are listed here, never compiled into it.
        ignored = runs_ignored_since_lock(v, topic_id) if topic.state == "LOCKED" else None
    return dg.MaterializeResult(
        metadata={
            "topic_state": topic.state,
            "runs_latest": runs_latest,
            **({"runs_ignored_locked": dg.MetadataValue.json(ignored)} if ignored is not None else {}),
        }
    )


@dg.asset(
    partitions_def=topics_partitions,
    group_name="pointers",
    kinds={"python", "duckdb"},
    deps=[raw_runs],
    pool=WRITER_POOL,
    description="Untrusted pointers {topic_id, json_path, verbatim_quote} from the extractor, per run version.",
)
def pointer_extractions(
    context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, extractor: ExtractorResource
) -> dg.MaterializeResult:
    with vault.open() as v:
        topic = current_topic(v, context.partition_key)
        if topic.state == "LOCKED":
            settings.say(context, f"{topic.topic_id}: LOCKED; new runs are reported, not compiled")
            return dg.MaterializeResult(metadata={"skipped": "topic is LOCKED"})
        backend = extractor.build(v)
        try:
            report = extract_phase(v, topic, backend, progress=lambda m: settings.say(context, m))
        except (LLMFatalError, CacheMiss) as exc:
            raise dg.Failure(f"{topic.topic_id}: {exc}") from None
        finally:
            if isinstance(backend, OpenAIExtractor):
                backend.close()
    settings.say(
        context,
        f"{topic.topic_id}: {report.extracted} runs extracted ({report.pointers} pointers), {report.reused} unchanged",
    )
    metadata = {
        "extractor": backend.identity,
        "runs_considered": report.candidates,
        "runs_extracted": report.extracted,
        "runs_unchanged": report.reused,
        "pointers": report.pointers,
        "runs_incomplete": len(report.incomplete),
    }
    if isinstance(backend, OpenAIExtractor):
        metadata |= {
            "llm_calls": backend.calls,
            "llm_requests_sent": backend.requests_sent,
            "llm_calls_failed": len(backend.failed),
            "failed_calls": dg.MetadataValue.md(
                "\n".join(f"- run `{r.run_id}` chunk {r.chunk_index + 1}/{r.chunk_count}: {r.error}" for r in backend.failed)
                or "_none_"
            ),
        }
    if report.incomplete:
        context.log.warning(
            f"{len(report.incomplete)} runs not fully extracted (failed LLM calls); they are retried next sync: "
            + "; ".join(report.notes[:20])
        )
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    partitions_def=topics_partitions,
    group_name="bricks",
    kinds={"python", "duckdb"},
    deps=[pointer_extractions],
    pool=WRITER_POOL,
    description="The hallucination gate: pointers whose quote is verbatim in the node they name, with offsets; the rest as rejections.",
)
def validated_bricks(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> dg.MaterializeResult:
    with vault.open() as v:
        topic = current_topic(v, context.partition_key)
        report = validate_phase(v, topic)
        totals = v.rejection_counts(topic.topic_id)
    settings.say(
        context,
        f"{topic.topic_id}: {report.accepted} pointers passed the gate, {sum(report.rejected.values())} rejected",
    )
    return dg.MaterializeResult(
        metadata={
            "extractions_validated": report.extractions,
            "accepted": report.accepted,
            "rejected": sum(report.rejected.values()),
            "rejected_by_reason": dg.MetadataValue.json(dict(sorted(report.rejected.items()))),
            "all_rejections_by_reason": dg.MetadataValue.json(totals),
        }
    )


@dg.asset(
    partitions_def=topics_partitions,
    group_name="states",
    kinds={"python"},
    deps=[validated_bricks],
    description="Bricks after the uniqueness gate (LINK / SUPERSEDE / APPEND) with states and canonical order; "
    "skipped when nothing it reads changed since the last sync.",
)
def resolved_brick_states(context: dg.AssetExecutionContext, vault: VaultResource) -> dg.Output[Resolution]:
    with vault.open() as v:
        topic = current_topic(v, context.partition_key)
        resolution = resolve_if_changed(v, topic)
    bricks = resolution.bricks
    if bricks is None:
        return dg.Output(resolution, metadata={"unchanged": True, "inputs_digest": resolution.inputs_digest})
    states: dict[str, int] = {}
    for b in bricks:
        states[b.state] = states.get(b.state, 0) + 1
    return dg.Output(
        resolution,
        metadata={
            "unchanged": False,
            "inputs_digest": resolution.inputs_digest,
            "bricks": len(bricks),
            "visible": sum(1 for b in bricks if b.state != "SUPERSEDED"),
            "linked_sources": sum(len(b.sources) - 1 for b in bricks),
            "stale": sum(1 for b in bricks if b.stale),
            "by_state": dg.MetadataValue.json(states),
            "preview": dg.MetadataValue.md(bricks_preview(bricks)),
        },
    )


@dg.asset(
    partitions_def=topics_partitions,
    group_name="manifest",
    kinds={"duckdb"},
    pool=WRITER_POOL,
    description="The topic's ordered, hashed manifest; bricks and manifest are published in one transaction.",
)
def topic_manifest(
    context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings, resolved_brick_states: Resolution
) -> dg.MaterializeResult:
    bricks = resolved_brick_states.bricks
    with vault.open() as v:
        topic = current_topic(v, context.partition_key)
        manifest, recorded = publish_phase(
            v, topic, bricks, dagster_run_id=context.run_id, inputs_digest=resolved_brick_states.inputs_digest
        )
        visible = len(manifest.bricks) if manifest else 0
    settings.say(
        context,
        f"{topic.topic_id}: manifest {manifest.manifest_hash[:12] if manifest else '-'} "
        f"({visible} bricks{', new' if recorded else ', unchanged'})",
    )
    return dg.MaterializeResult(
        metadata={
            "manifest_hash": manifest.manifest_hash if manifest else "",
            "previous_hash": (manifest.previous_hash or "") if manifest else "",
            "new_manifest": recorded,
            "bricks": visible,
            **({"preview": dg.MetadataValue.md(bricks_preview(bricks))} if bricks is not None else {}),
            "viewer": dg.MetadataValue.url(topic_url(topic.topic_id)),
        }
    )
