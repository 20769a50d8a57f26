"""Nightly sync of every ACTIVE topic, one partitioned run per topic.

`build_schedule_from_partitioned_job` refuses dynamic partitions, and a plain ScheduleDefinition
launches without a partition key, so the schedule yields one RunRequest per topic itself.
"""


import dagster as dg

from nexus_assets.defs.assets import FULL_VERIFY_TAG
from nexus_assets.defs.jobs import sync_job
from nexus_assets.defs.partitions import topics_partitions
from nexus_assets.defs.resources import NexusSettings
from nexus_assets.topics.selection import SyncInputError, select_topics
from nexus_assets.defs.tags import TOPIC_TAG


@dg.schedule(
    cron_schedule="0 3 * * *",
    job=sync_job,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Sync every ACTIVE topic nightly at 03:00 UTC, re-reading every source file (full drift check).",
)
def nightly_sync(context: dg.ScheduleEvaluationContext, settings: NexusSettings):
    try:
        active = select_topics(settings.path("topics_dir")).selected  # the sync service's rule
    except SyncInputError as exc:
        return dg.SkipReason(str(exc))
    if not active:
        return dg.SkipReason(f"no ACTIVE topics in {settings.topics_dir}")
    known = set(context.instance.get_dynamic_partitions(topics_partitions.name))
    missing = [t for t in active if t not in known]
    if missing:
        context.instance.add_dynamic_partitions(topics_partitions.name, missing)
    stamp = context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else "manual"
    selection = settings.run_selection()
    return [
        dg.RunRequest(partition_key=t, run_key=f"nightly:{t}:{stamp}", tags={TOPIC_TAG: t, FULL_VERIFY_TAG: "true"}, asset_selection=selection)
        for t in active
    ]
