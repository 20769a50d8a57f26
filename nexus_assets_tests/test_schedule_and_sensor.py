"""The nightly schedule syncs every ACTIVE topic; the sensor registers topic partitions and reacts to run files."""

import datetime as dt

import dagster as dg

from nexus_assets.defs.resources import NexusSettings
from nexus_assets.defs.schedules import nightly_sync
from nexus_assets.defs.sensors import nexus_files_sensor
from nexus_assets_tests.project import Project, nexus_run


def settings_for(p: Project) -> NexusSettings:
    return NexusSettings(runs_dir=str(p.runs), topics_dir=str(p.topics))


def test_nightly_schedule_requests_one_partitioned_run_per_active_topic(project: Project):
    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(
            instance=instance,
            resources={"settings": settings_for(project)},
            scheduled_execution_time=dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc),
        ) as context:
            requests = list(nightly_sync(context))
        assert sorted(r.partition_key for r in requests) == ["nexus-server-sync", "storage-decisions"]
        assert set(instance.get_dynamic_partitions("topics")) >= {"nexus-server-sync", "storage-decisions"}


def test_sensor_registers_topics_and_requests_syncs_only_when_runs_change(project: Project):
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(instance=instance, resources={"settings": settings_for(project)})
        first = nexus_files_sensor(ctx)
        (add,) = first.dynamic_partitions_requests
        assert sorted(add.partition_keys) == ["nexus-server-sync", "storage-decisions", "team-rituals"]
        assert sorted(r.partition_key for r in first.run_requests) == ["nexus-server-sync", "storage-decisions"]
        instance.add_dynamic_partitions("topics", list(add.partition_keys))

        quiet = nexus_files_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"settings": settings_for(project)}))
        assert quiet.run_requests == [] and quiet.dynamic_partitions_requests == []

        project.write_run("nexus/new.json", nexus_run("run-new", [("user", "The vault has a new run.")]))
        changed = nexus_files_sensor(dg.build_sensor_context(instance=instance, cursor=quiet.cursor, resources={"settings": settings_for(project)}))
        assert sorted(r.partition_key for r in changed.run_requests) == ["nexus-server-sync", "storage-decisions"]

        project.write_topic("fresh-topic", keywords=["vault"])
        added = nexus_files_sensor(dg.build_sensor_context(instance=instance, cursor=changed.cursor, resources={"settings": settings_for(project)}))
        assert added.dynamic_partitions_requests[0].partition_keys == ["fresh-topic"]
        assert [r.partition_key for r in added.run_requests] == ["fresh-topic"]
