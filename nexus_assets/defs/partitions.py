"""The topic partitions, and how a step goes over them.

One partition per compilable topic (not DRAFT); keys are topic_ids, kept by the topic sensor,
`nexus sync` and `nexus activate`. A sync compiles all its topics in one Dagster run, a range of
partitions (`nexus_assets/services/sync.py`): each asset of the topic graph runs once for the range
(`BackfillPolicy.single_run`) and goes over its topics with `each_topic`; each check reports one
evaluation per topic with `each_topic_check`, so one topic's pass never hides another's failure.
A run of one partition (the UI's "Materialize" of a topic, the nightly schedule) goes the same way.
"""


import warnings
from typing import Callable, Mapping

import dagster as dg

from nexus_assets.defs.outcome import NOTHING_NEW
from nexus_assets.defs.resources import VaultResource

# A single-run backfill policy is a beta parameter of `dg.asset` in Dagster 1.13; it is what a
# one-run sync stands on (docs/architecture.md), so its notice is not printed to every command.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

topics_partitions = dg.DynamicPartitionsDefinition(name="topics")

# A run's partitions are a range of topics: each asset of the topic graph runs once for all of them.
SINGLE_RUN = dg.BackfillPolicy.single_run()




def skipped_metadata(topic_id: str) -> dict:
    return {"topic_id": topic_id, "unchanged": True, NOTHING_NEW: True,
            "skipped": "nothing new since its last clean sync: no step work, no check"}


def skipped_topics(context) -> set[str]:
    """The run's topics its raw_runs step found with nothing new (read from the run's own events)."""
    found = set()
    for entry in context.instance.all_logs(context.run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = entry.asset_materialization
        if m is not None and m.asset_key == dg.AssetKey("raw_runs") and NOTHING_NEW in m.metadata:
            found.add(m.partition)
    return found


def each_topic(context: dg.AssetExecutionContext, one: Callable[[str], Mapping], skipped: set[str] | None = None) -> None:
    """`one(topic_id)` for every topic of the run, in partition order; what it returns is that
    topic's metadata (its partition's materialization shows it). A topic with nothing new
    (`skipped`, by default what raw_runs found) is left alone. A topic that fails fails the step:
    the sync then compiles the range's topics one run each, so each gets its own report."""
    skipped = skipped_topics(context) if skipped is None else skipped
    for topic_id in context.partition_keys:
        metadata = skipped_metadata(topic_id) if topic_id in skipped else dict(one(topic_id))
        context.add_asset_metadata(metadata, partition_key=topic_id)


def each_topic_check(context: dg.AssetCheckExecutionContext, one: Callable[[str], dg.AssetCheckResult]) -> dg.AssetCheckResult:
    """`one(topic_id)` for every topic of the run. A run of one partition returns its result (Dagster
    files it under the partition); a range records one evaluation per topic and returns their sum:
    passed only when every topic passed (a blocking check then stops the range's later steps)."""
    skipped = skipped_topics(context)
    if context.has_partition_key and context.partition_key in skipped:
        return dg.AssetCheckResult(passed=True, description=f"{context.partition_key}: nothing new since its last clean sync; not checked again")
    results = {topic_id: one(topic_id) for topic_id in context.partition_keys if topic_id not in skipped}
    if context.has_partition_key:
        return results[context.partition_key]
    (spec,) = context.check_specs
    for topic_id, r in results.items():
        context.op_execution_context.log_event(
            dg.AssetCheckEvaluation(
                asset_key=spec.asset_key, check_name=spec.name, passed=r.passed, metadata=r.metadata,
                severity=r.severity, description=r.description, blocking=spec.blocking, partition=topic_id,
            )
        )
    failed = [t for t, r in results.items() if not r.passed]
    severities = {r.severity for t, r in results.items() if not r.passed}
    return dg.AssetCheckResult(
        passed=not failed,
        severity=dg.AssetCheckSeverity.ERROR if dg.AssetCheckSeverity.ERROR in severities or not severities else dg.AssetCheckSeverity.WARN,
        metadata={"topics": len(results), "topics_failed": len(failed)},
        description=f"{len(results)} topics, one evaluation each; " + (f"not passed: {', '.join(failed)}" if failed else "every one passed"),
    )


def topic_check(**kwargs):
    """`@dg.asset_check` partitioned by topic, over a function of one topic `(context, vault,
    topic_id) -> AssetCheckResult` whose name is the check's: `each_topic_check` runs it for every
    topic of the run."""
    def wrap(one):
        @dg.asset_check(name=one.__name__, partitions_def=topics_partitions, **kwargs)
        def check(context: dg.AssetCheckExecutionContext, vault: VaultResource) -> dg.AssetCheckResult:
            return each_topic_check(context, lambda topic_id: one(context, vault, topic_id))

        return check

    return wrap
