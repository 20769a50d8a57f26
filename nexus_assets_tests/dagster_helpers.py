"""Real Dagster materializations of the topic graph against a test project."""

from __future__ import annotations

import dagster as dg

from nexus_assets.definitions import ASSETS, CHECKS, build_resources
from nexus_assets_tests.project import Project


def materialize_topic(
    project: Project,
    topic_id: str,
    instance: dg.DagsterInstance,
    *,
    tags: dict[str, str] | None = None,
    selection: list[str] | None = None,
    **resource_args,
) -> dg.ExecuteInProcessResult:
    if topic_id not in instance.get_dynamic_partitions("topics"):
        instance.add_dynamic_partitions("topics", [topic_id])
    return dg.materialize(
        [*ASSETS, *CHECKS],
        partition_key=topic_id,
        instance=instance,
        resources=build_resources(
            db_path=str(project.db), runs_dir=str(project.runs), topics_dir=str(project.topics), **resource_args
        ),
        raise_on_error=False,
        tags=tags,
        selection=selection,
    )


def check_results(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def latest_check_evaluation(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, partition: str
) -> tuple[float, dg.AssetCheckEvaluation] | None:
    """(when, what) of the newest evaluation of a check for one partition, read through Dagster's
    public API: the partition's runs (newest first, by their `dagster/partition` tag) and their
    event logs. Tests use no `dagster._core` internals (issue 44), as the package uses none."""
    for run in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": partition})):
        for entry in reversed(instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)):
            evaluation = entry.asset_check_evaluation
            if evaluation is not None and evaluation.asset_check_key == check_key:
                return entry.timestamp, evaluation
    return None
