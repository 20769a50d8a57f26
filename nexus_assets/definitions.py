"""The code location: one asset graph for the UI (`dagster dev`) and the `nexus` command alike."""

from __future__ import annotations

import dagster as dg

from nexus_assets.defs.assets import (
    pointer_extractions,
    raw_runs,
    resolved_brick_states,
    run_files,
    topic_manifest,
    validated_bricks,
)
from nexus_assets.defs.checks import (
    checksum_drift,
    extraction_quality,
    final_immutability,
    hallucination_rejection,
    open_conflicts,
)
from nexus_assets.defs.jobs import compile_job, ingest_job, sync_job
from nexus_assets.defs.lifecycle import seal_topic
from nexus_assets.defs.record import passage_index, passage_index_in_step, passages, passages_verbatim
from nexus_assets.defs.recall import (
    brick_embeddings,
    vector_index,
    vector_index_in_step,
)
from nexus_assets.defs.resources import ExtractorResource, NexusSettings, TopicValues, vault_resource
from nexus_assets.defs.schedules import nightly_sync
from nexus_assets.defs.sensors import nexus_files_sensor
from nexus_assets.settings import (  # noqa: F401 (DEFAULT_DB: imported from here)
    DEFAULT_DB,
    DEFAULT_RUNS_DIR,
    DEFAULT_TOPICS_DIR,
    Basics,
)

ASSETS = [run_files, passages, passage_index, raw_runs, pointer_extractions, validated_bricks, resolved_brick_states, topic_manifest, brick_embeddings, vector_index]
CHECKS = [passages_verbatim, passage_index_in_step, hallucination_rejection, checksum_drift, final_immutability, extraction_quality, vector_index_in_step, open_conflicts]


def build_resources(
    *,
    db_path: str | None = None,
    runs_dir: str | None = None,
    topics_dir: str | None = None,
    extractor: str | None = None,
    replay_only: bool = False,
    open_after: str | None = None,
    progress: bool = False,
    llm: dict | None = None,
    basics: Basics | None = None,
    sync_inputs_file: str | None = None,
) -> dict:
    """Resources from arguments, else the settings (`basics`: the caller's; None: the NEXUS_*
    environment variables, read here, the code location's entry point), else the shipped defaults.
    Every value a step needs is in a resource: nothing is handed over through a module global."""
    basics = Basics.from_env() if basics is None else basics
    settings = NexusSettings(
        runs_dir=runs_dir or basics.runs_dir or DEFAULT_RUNS_DIR,
        topics_dir=topics_dir or basics.topics_dir or DEFAULT_TOPICS_DIR,
        open_after=open_after or basics.open_after or None,
        progress=progress,
        recall=not basics.no_recall,
        viewer_url=basics.viewer_url,
        limits_given=dict(basics.limits_given),
        sync_inputs_file=sync_inputs_file,
    )
    return {
        "settings": settings,
        # One resource per backend, as the address names it, with this process's options.
        "vault": vault_resource(basics.address(db_path or basics.db)),
        # `llm`: the CLI's LLM options (batch, max_cost_usd, concurrency, cost_since), as resource fields.
        "extractor": ExtractorResource(
            backend=extractor or basics.extractor, replay_only=replay_only, **(llm or {})
        ),
        "topic_values": TopicValues(),
    }


def build_defs(**kwargs) -> dg.Definitions:
    return dg.Definitions(
        assets=ASSETS,
        asset_checks=CHECKS,
        jobs=[sync_job, ingest_job, compile_job, seal_topic],
        schedules=[nightly_sync],
        sensors=[nexus_files_sensor],
        resources=build_resources(**kwargs),
        # One process per run: a partition costs ~2.7 s instead of ~10 s with subprocesses.
        executor=dg.in_process_executor,
    )


defs = build_defs()
