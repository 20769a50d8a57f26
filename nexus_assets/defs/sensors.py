"""Notice topic files (keep one partition per compilable topic) and new or changed run files (sync ACTIVE topics)."""


import json

import dagster as dg

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.defs.jobs import sync_job
from nexus_assets.defs.partitions import topics_partitions
from nexus_assets.defs.resources import NexusSettings
from nexus_assets.ingest.runfiles import scan_run_files
from nexus_assets.topics.selection import PARTITION_STATES, SyncInputError, select_topics
from nexus_assets.defs.tags import TOPIC_TAG


def runs_dir_digest(settings: NexusSettings) -> str:
    """Cheap change detector: path, size and mtime of every run file (ingestion itself hashes content)."""
    runs_dir = settings.path("runs_dir")
    listing = []
    for p in scan_run_files(runs_dir):
        stat = p.stat()
        listing.append([p.relative_to(runs_dir).as_posix(), stat.st_size, stat.st_mtime_ns])
    return sha256_hex(canonical_json(listing))


@dg.sensor(
    job=sync_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keeps one partition per compilable topic (a DRAFT topic gets one when it is activated); "
    "requests a sync of every ACTIVE topic when run files or its topic file change.",
)
def nexus_files_sensor(context: dg.SensorEvaluationContext, settings: NexusSettings) -> dg.SensorResult | dg.SkipReason:
    cursor = json.loads(context.cursor) if context.cursor else {}
    try:
        selection = select_topics(settings.path("topics_dir"))  # the sync service's rule
    except SyncInputError as exc:
        return dg.SkipReason(str(exc))  # two files claim one topic id: nothing is touched
    for problem in selection.problems:
        context.log.warning(problem)
    topics = selection.defined
    compiled = set(selection.selected)
    compilable = {tid for tid, t in topics.items() if t.state in PARTITION_STATES}
    known = set(context.instance.get_dynamic_partitions(topics_partitions.name))
    new_keys = sorted(compilable - known)
    # A partition that cannot compile (a DRAFT topic, registered by an older release) only ever fails.
    drafts = sorted(k for k in known if k in topics and topics[k].state == "DRAFT")

    runs_digest = runs_dir_digest(settings)
    topic_digests = {tid: sha256_hex(canonical_json(t.model_dump(mode="json"))) for tid, t in topics.items()}
    requests = []
    for tid, topic in sorted(topics.items()):
        if tid not in compiled:
            continue
        if cursor.get("runs") != runs_digest or cursor.get("topics", {}).get(tid) != topic_digests[tid]:
            requests.append(
                dg.RunRequest(
                    partition_key=tid,
                    run_key=f"{tid}:{runs_digest[:16]}:{topic_digests[tid][:16]}",
                    asset_selection=settings.run_selection(),
                    tags={TOPIC_TAG: tid},
                )
            )
    partition_requests = []
    if new_keys:
        partition_requests.append(topics_partitions.build_add_request(new_keys))
    if drafts:
        partition_requests.append(topics_partitions.build_delete_request(drafts))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=partition_requests,
        cursor=json.dumps({"runs": runs_digest, "topics": topic_digests}, sort_keys=True),
    )
