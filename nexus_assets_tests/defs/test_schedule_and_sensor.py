"""The nightly schedule syncs every ACTIVE topic; the sensor registers topic partitions and reacts to run files."""

import datetime as dt

import dagster as dg

from nexus_assets.defs.resources import NexusSettings
from nexus_assets.defs.schedules import nightly_sync
from nexus_assets.defs.sensors import nexus_files_sensor
from nexus_assets.services.sync import TOPIC_TAG
from nexus_assets_tests.project import Project, REPO, nexus_run


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
        # The deployment's run queue holds one run per topic by this tag (deploy/dagster.yaml).
        assert all(r.tags[TOPIC_TAG] == r.partition_key for r in requests)
        assert set(instance.get_dynamic_partitions("topics")) >= {"nexus-server-sync", "storage-decisions"}


def test_sensor_registers_topics_and_requests_syncs_only_when_runs_change(project: Project):
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(instance=instance, resources={"settings": settings_for(project)})
        first = nexus_files_sensor(ctx)
        (add,) = first.dynamic_partitions_requests
        # The DRAFT topic is no partition: it could only fail.
        assert sorted(add.partition_keys) == ["nexus-server-sync", "storage-decisions"]
        assert sorted(r.partition_key for r in first.run_requests) == ["nexus-server-sync", "storage-decisions"]
        assert all(r.tags[TOPIC_TAG] == r.partition_key for r in first.run_requests)
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


def test_draft_topics_are_no_partitions_and_activation_adds_one(project: Project, tmp_path, monkeypatch, capsys):
    """docs/architecture.md: only compilable topics are partitions; `nexus activate` adds one to the shared instance."""
    from nexus_assets_tests.cli_helpers import run_json

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        # A partition an older release registered for the DRAFT topic is removed by the sensor.
        instance.add_dynamic_partitions("topics", ["team-rituals"])
        ctx = dg.build_sensor_context(instance=instance, resources={"settings": settings_for(project)})
        result = nexus_files_sensor(ctx)
        kinds = {type(r).__name__: sorted(r.partition_keys) for r in result.dynamic_partitions_requests}
        assert kinds == {"AddDynamicPartitionsRequest": ["nexus-server-sync", "storage-decisions"],
                         "DeleteDynamicPartitionsRequest": ["team-rituals"]}
        instance.delete_dynamic_partition("topics", "team-rituals")

        run_json(capsys, *project.sync_args("storage-decisions"))
        assert instance.get_dynamic_partitions("topics") == ["storage-decisions"], "nexus sync shares the instance"
        run_json(capsys, *project.cli_args(), "activate", "team-rituals", "--topics-dir", str(project.topics))
        assert "team-rituals" in instance.get_dynamic_partitions("topics")


def test_a_sync_in_the_project_uses_the_projects_dagster_home_by_default(project: Project, tmp_path, capsys):
    """README command 1's sync shows in `dagster dev`: with no DAGSTER_HOME, a vault in the project's
    data folder uses the project's dagster_home/ (the one the README's UI tour points at)."""
    import shutil

    from nexus_assets_tests.cli_helpers import run_json

    root = tmp_path / "checkout"
    (root / "data").mkdir(parents=True)
    shutil.copytree(REPO / "dagster_home", root / "dagster_home", ignore=shutil.ignore_patterns("*.db", "storage", "history", "logs", "schedules", ".*"))
    db = root / "data" / "nexus.duckdb"
    run_json(capsys, "--db", str(db), "sync", "--runs-dir", str(project.runs), "--topics-dir", str(project.topics))
    with dg.instance_for_test(temp_dir=str(root / "dagster_home")) as instance:
        assert sorted(instance.get_dynamic_partitions("topics")) == ["nexus-server-sync", "storage-decisions"]
        runs = instance.get_runs()
        assert [r.job_name for r in runs] == ["sync_topics"]  # one run for both topics
