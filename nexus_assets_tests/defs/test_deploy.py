"""A team deployment (docs/deployment.md, deploy/): Dagster on a real PostgreSQL, the run queue that holds
one run per topic, the Helm chart's values and the code location's image.

`deploy/dagster.yaml` is loaded as it ships into an instance against the test's PostgreSQL
(conftest `postgres_url`), and real `dagster-daemon`s work its queue. No helm or docker runs here
(FACTS.md): the chart values are checked by key against the chart's schema, the Dockerfile for
the files it copies, and its CMD is run as it is."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import dagster as dg
import psycopg
import pytest
import yaml
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from nexus_assets.services.sync import TOPIC_TAG
from nexus_assets_tests.project import REPO, sample_project
from nexus_assets_tests.servers import start, stop

DEPLOY = REPO / "deploy"
TOPIC = "storage-decisions"  # one of the sample project's ACTIVE topics


def dagster_pg_env(url: str) -> dict[str, str]:
    """The DAGSTER_PG_* variables deploy/dagster.yaml reads, for a postgresql:// address."""
    parts = urlsplit(url)
    return {
        "DAGSTER_PG_USERNAME": parts.username or "",
        # The test server trusts 127.0.0.1 (conftest): any password passes, and the config needs one.
        "DAGSTER_PG_PASSWORD": parts.password or "unused",
        "DAGSTER_PG_HOST": parts.hostname or "",
        "DAGSTER_PG_PORT": str(parts.port or 5432),
        "DAGSTER_PG_DB": parts.path.lstrip("/"),
    }


def run_to_end(argv: list[str], *, timeout_s: float = 120, **popen) -> subprocess.CompletedProcess:
    """A command in its own session, as subprocess.run would run it; whatever it started (the
    dagster CLI starts a code server for a workspace) is stopped with it, even on a timeout."""
    proc = start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        stop(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture
def deploy_home(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DAGSTER_HOME holding deploy/dagster.yaml as it ships, its DAGSTER_PG_* set to a fresh database."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    for name, value in dagster_pg_env(postgres_url).items():
        monkeypatch.setenv(name, value)
    return home


@pytest.fixture
def instance(deploy_home: Path):
    instance = dg.DagsterInstance.from_config(str(deploy_home))
    try:
        yield instance
    finally:
        instance.dispose()


def shipped_queue() -> dict:
    return yaml.safe_load((DEPLOY / "dagster.yaml").read_text(encoding="utf-8"))["run_coordinator"]["config"]


# ---------------------------------------------------------------- deploy/dagster.yaml on PostgreSQL


def test_dagster_yaml_gives_postgres_storage_and_a_queue_of_one_run_per_topic(instance: dg.DagsterInstance):
    assert isinstance(instance.run_storage, PostgresRunStorage)
    assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
    assert isinstance(instance.schedule_storage, PostgresScheduleStorage)

    coordinator = instance.run_coordinator
    assert isinstance(coordinator, dg.QueuedRunCoordinator)
    queue = coordinator.get_run_queue_config()
    assert queue.max_concurrent_runs >= 2  # different topics run at once
    per_value = {"applyLimitPerUniqueValue": True}
    assert queue.tag_concurrency_limits == [
        {"key": TOPIC_TAG, "value": per_value, "limit": 1},
        # Runs launched by hand or by a backfill carry only Dagster's own partition tag; a partition is a topic.
        {"key": "dagster/partition", "value": per_value, "limit": 1},
    ]


def test_every_partition_of_the_code_location_is_a_topic():
    """The queue's `dagster/partition` limit is a per-topic limit only while this holds."""
    from nexus_assets.definitions import defs

    graph = defs.get_repository_def().asset_graph
    partitioned = {graph.get(k).partitions_def for k in graph.get_all_asset_keys()} - {None}
    assert [getattr(p, "name", None) for p in partitioned] == ["topics"]
    for job in defs.resolve_all_job_defs():
        assert job.partitions_def is None or job.partitions_def.name == "topics", job.name


@pytest.mark.parametrize("backend", ["postgresql", "duckdb"])
def test_a_sync_run_and_its_events_are_stored_in_postgresql(tmp_path: Path, deploy_home: Path, postgres_url: str, postgres_server, backend: str):
    project = sample_project(tmp_path / "proj")
    # The vault's address, the one thing that differs: a database of its own beside Dagster's, as
    # deploy/README.md sets it up, or a DuckDB file.
    vault = postgres_server.database() if backend == "postgresql" else str(tmp_path / "vault.duckdb")

    from nexus_assets.definitions import build_defs

    defs = build_defs(db_path=vault, runs_dir=str(project.runs), topics_dir=str(project.topics))
    sync_job = defs.resolve_job_def("sync_topics")
    with dg.DagsterInstance.from_config(str(deploy_home)) as instance:
        instance.add_dynamic_partitions("topics", [TOPIC])
        result = sync_job.execute_in_process(partition_key=TOPIC, instance=instance, tags={TOPIC_TAG: TOPIC}, raise_on_error=False)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        run_id = result.run_id

    # A new instance on the same configuration (as the webserver or the daemon would be) reads it back.
    with dg.DagsterInstance.from_config(str(deploy_home)) as reader:
        run = reader.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert run.tags[TOPIC_TAG] == TOPIC and run.tags["dagster/partition"] == TOPIC
        assert TOPIC in reader.get_dynamic_partitions("topics")
        materialized = {
            entry.asset_materialization.asset_key.to_user_string()
            for entry in reader.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        }
        assert {"run_files", "raw_runs", "validated_bricks", "topic_manifest"} <= materialized
        latest = reader.get_latest_materialization_event(dg.AssetKey("topic_manifest"))
        assert latest is not None and latest.run_id == run_id

    # ... and the rows are in PostgreSQL's tables, not in a local file.
    with psycopg.connect(postgres_url) as conn:
        (runs,) = conn.execute("SELECT count(*) FROM runs WHERE run_id = %s", (run_id,)).fetchone()
        (events,) = conn.execute("SELECT count(*) FROM event_logs WHERE run_id = %s", (run_id,)).fetchone()
    assert runs == 1 and events > 10
    assert not list(deploy_home.glob("**/*.db")), "a SQLite file beside dagster.yaml: the storage is not PostgreSQL"
    if backend == "postgresql":  # the vault's tables are in its own database, and no vault file was made
        with psycopg.connect(vault) as conn:
            (tables,) = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).fetchone()
        assert tables > 5
        assert not list(tmp_path.glob("**/*.duckdb"))


# ---------------------------------------------------------------- the run queue, with a real daemon

DAEMON_GRACE_S = 20.0  # the daemon stops its code server and threads in turn; 2 busy cores
WAIT_S = 150.0


def _wait_for(what: str, condition, timeout_s: float = WAIT_S, *, daemon: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if daemon.poll() is not None:
            pytest.fail(f"dagster-daemon exited ({daemon.returncode}) while waiting for {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s\n{log.read_text()[-3000:]}")
        time.sleep(0.25)


def test_the_queue_runs_different_topics_at_once_and_one_topic_at_a_time(tmp_path: Path, deploy_home: Path, instance):
    """deploy/dagster.yaml's QueuedRunCoordinator, worked by a real `dagster-daemon run`: runs
    submitted for topic A, A again, then B. A and B leave the queue together; the second A waits
    in the queue (behind it, B did not) until the first A has finished."""
    gates = tmp_path / "gates"
    gates.mkdir()
    (tmp_path / "workspace.yaml").write_text(
        yaml.safe_dump(
            {"load_from": [{"python_module": {"module_name": "nexus_assets_tests.deploy_queue_location", "working_directory": str(REPO)}}]}
        ),
        encoding="utf-8",
    )
    env = {**os.environ, "DAGSTER_HOME": str(deploy_home), "NEXUS_TEST_GATES": str(gates)}
    bin_dir = Path(sys.executable).parent
    log = tmp_path / "daemon.log"

    def submit(topic: str) -> str:
        """`dagster job launch` submits through the instance's run coordinator: the run is queued."""
        run_id = str(uuid.uuid4())
        out = run_to_end(
            [str(bin_dir / "dagster"), "job", "launch", "-w", "workspace.yaml", "-j", "topic_gate",
             "--tags", json.dumps({TOPIC_TAG: topic}), "--run-id", run_id],
            cwd=tmp_path, env=env,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return run_id

    def status(run_id: str) -> dg.DagsterRunStatus:
        return instance.get_run_by_id(run_id).status

    def started(run_id: str) -> bool:
        return (gates / f"{run_id}.started").exists()

    first_a, second_a, b = submit("topic-a"), submit("topic-a"), submit("topic-b")
    assert {status(r) for r in (first_a, second_a, b)} == {dg.DagsterRunStatus.QUEUED}

    with log.open("w") as log_file:
        daemon = start([str(bin_dir / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        _wait_for("the first topic-a run and the topic-b run both running", lambda: started(first_a) and started(b), daemon=daemon, log=log)
        # Both hold their topic's slot; the second topic-a run must stay queued for as long as the first runs.
        # The dequeue loop goes round every few seconds: give it several rounds to get it wrong.
        quiet_until = time.monotonic() + 15
        while time.monotonic() < quiet_until:
            assert status(second_a) == dg.DagsterRunStatus.QUEUED and not started(second_a)
            time.sleep(0.5)

        (gates / f"{b}.go").touch()
        (gates / f"{first_a}.go").touch()
        _wait_for("the second topic-a run running", lambda: started(second_a), daemon=daemon, log=log)
        (gates / f"{second_a}.go").touch()
        done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
        _wait_for("every run finished", lambda: all(status(r) in done for r in (first_a, second_a, b)), daemon=daemon, log=log)
    finally:
        for gate in gates.glob("*.started"):  # nothing waits at a gate once the test is over
            (gates / f"{gate.stem}.go").touch()
        stop(daemon, DAEMON_GRACE_S)

    assert {r: status(r) for r in (first_a, second_a, b)} == {r: dg.DagsterRunStatus.SUCCESS for r in (first_a, second_a, b)}
    records = {r: instance.get_run_record_by_id(r) for r in (first_a, second_a, b)}
    # Stored times agree: A and B overlapped; the second A started only after the first A ended.
    assert records[b].start_time < records[first_a].end_time and records[first_a].start_time < records[b].end_time
    assert records[second_a].start_time >= records[first_a].end_time



def test_the_code_location_runs_through_the_queue_on_postgresql(tmp_path: Path, deploy_home: Path, instance, postgres_server):
    """The whole deployment on one machine: `dagster-daemon` on deploy/dagster.yaml serving
    nexus_assets.definitions, with a PostgreSQL vault. The sensor's first tick asks for every
    ACTIVE topic of the sample project; its runs carry their topic's tag, wait in the queue, are
    launched by the daemon and compile, and their records are in PostgreSQL."""
    project = sample_project(tmp_path / "proj")
    vault = postgres_server.database()
    (tmp_path / "workspace.yaml").write_text(
        yaml.safe_dump({"load_from": [{"python_module": {"module_name": "nexus_assets.definitions", "working_directory": str(REPO)}}]}),
        encoding="utf-8",
    )
    env = {**os.environ, "DAGSTER_HOME": str(deploy_home), "NEXUS_DB": vault,
           "NEXUS_RUNS_DIR": str(project.runs), "NEXUS_TOPICS_DIR": str(project.topics)}
    log = tmp_path / "daemon.log"
    done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    with log.open("w") as log_file:
        daemon = start([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                       cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        _wait_for(
            "the sensor's runs for both ACTIVE topics finished",
            lambda: len(runs := instance.get_runs()) == 2 and all(r.status in done for r in runs),
            daemon=daemon, log=log,
        )
    finally:
        stop(daemon, DAEMON_GRACE_S)

    runs = instance.get_runs()
    assert sorted(r.tags[TOPIC_TAG] for r in runs) == ["nexus-server-sync", "storage-decisions"]
    for run in runs:
        assert run.status == dg.DagsterRunStatus.SUCCESS, log.read_text()[-3000:]
        assert run.tags["dagster/partition"] == run.tags[TOPIC_TAG]
        assert instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    assert not list(tmp_path.glob("**/*.duckdb")), "the runs wrote a DuckDB vault: NEXUS_DB did not reach them"

# ---------------------------------------------------------------- deploy/helm/values.yaml

# The keys below are where the official chart (dagster/dagster) reads them. Checked against the
# chart's schema in dagster-io/dagster (helm/dagster/schema/schema/charts/: dagster/values.py and
# subschema/daemon.py at 835892b4, subschema/postgresql.py at 3f2daa0d, global_.py at e5755924,
# dagster_user_deployments/subschema/user_deployments.py at 58b05650; chart 1.x, the schema that
# values.schema.json is generated from) and the templates that read them
# (templates/helpers/instance/_run-coordinator.tpl at 7b875469: tagConcurrencyLimits is copied
# into dagster.yaml's tag_concurrency_limits as is; _postgresql.tpl at 3f2daa0d: postgresqlScheme
# becomes postgres_db.scheme).
CHART_TOP_LEVEL = {
    "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret", "global", "dagsterDaemon", "telemetry",
    "dagsterWebserver", "runLauncher", "scheduler", "computeLogManager", "ingress", "serviceAccount", "retention",
    "rabbitmq", "redis", "flower", "busybox", "migrate", "pythonLogs", "imagePullSecrets", "generateCeleryConfigSecret",
    "additionalInstanceConfig", "concurrency",
}
USER_DEPLOYMENT_KEYS = {
    "name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns", "port", "env", "envConfigMaps",
    "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations", "podSecurityContext", "securityContext",
    "resources", "livenessProbe", "readinessProbe", "startupProbe", "labels", "volumeMounts", "volumes", "schedulerName",
}
POSTGRESQL_KEYS = {"image", "enabled", "postgresqlHost", "postgresqlUsername", "postgresqlPassword", "postgresqlDatabase", "postgresqlParams", "postgresqlScheme", "service"}
QUEUED_KEYS = {"maxConcurrentRuns", "tagConcurrencyLimits", "dequeueIntervalSeconds", "dequeueNumWorkers", "dequeueUseThreads", "blockOpConcurrencyLimitedRuns"}


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text(encoding="utf-8"))


def test_helm_values_use_the_charts_keys(values: dict):
    assert set(values) <= CHART_TOP_LEVEL, set(values) - CHART_TOP_LEVEL
    users = values["dagster-user-deployments"]
    assert users["enabled"] is True
    (deployment,) = users["deployments"]
    assert set(deployment) <= USER_DEPLOYMENT_KEYS, set(deployment) - USER_DEPLOYMENT_KEYS
    assert set(deployment["image"]) == {"repository", "tag", "pullPolicy"}
    assert set(values["postgresql"]) <= POSTGRESQL_KEYS
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert set(coordinator["config"]) == {"queuedRunCoordinator"}
    assert set(coordinator["config"]["queuedRunCoordinator"]) <= QUEUED_KEYS
    for limit in coordinator["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]:
        assert set(limit) <= {"key", "value", "limit"}  # the chart forbids other keys (extra = forbid)


def test_helm_values_serve_the_image_with_the_vault_from_a_secret(values: dict):
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    # The chart runs `dagster code-server start -h 0.0.0.0 -p <port> <codeServerArgs>`: the image's module and port.
    assert deployment["codeServerArgs"] == ["-m", "nexus_assets.definitions"]
    assert deployment["port"] == 4000 and "EXPOSE 4000" in dockerfile
    assert deployment["image"]["repository"] and deployment["image"]["tag"]
    env = {e["name"]: e for e in deployment["env"]}
    secret = env["NEXUS_DB"]["valueFrom"]["secretKeyRef"]
    assert secret["name"] and secret["key"] and "value" not in env["NEXUS_DB"]  # never a password in values
    assert {"NEXUS_RUNS_DIR", "NEXUS_TOPICS_DIR"} <= set(env)
    mounts = {m["name"]: m["mountPath"] for m in deployment["volumeMounts"]}
    assert {v["name"] for v in deployment["volumes"]} == set(mounts)
    for name in ("NEXUS_RUNS_DIR", "NEXUS_TOPICS_DIR"):  # the inputs are on the mounted volume
        assert any(env[name]["value"].startswith(path.rstrip("/") + "/") for path in mounts.values())
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True  # run pods get the same env


def test_helm_values_use_an_external_postgresql_with_its_password_in_a_secret(values: dict):
    pg = values["postgresql"]
    assert pg["enabled"] is False
    assert pg["postgresqlHost"] and pg["postgresqlUsername"] and pg["postgresqlDatabase"] and pg["service"]["port"]
    assert "postgresqlPassword" not in pg
    # The driver Dagster's storage uses, as in deploy/dagster.yaml (_postgresql.tpl renders it as `scheme`).
    shipped = yaml.safe_load((DEPLOY / "dagster.yaml").read_text(encoding="utf-8"))["storage"]["postgres"]["postgres_db"]
    assert pg["postgresqlScheme"] == shipped["scheme"] == "postgresql+psycopg2"
    assert values["generatePostgresqlPasswordSecret"] is False and values["global"]["postgresqlSecretName"]


def test_helm_values_queue_equals_deploy_dagster_yaml(values: dict):
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["enabled"] is True and coordinator["type"] == "QueuedRunCoordinator"
    queued = coordinator["config"]["queuedRunCoordinator"]
    shipped = shipped_queue()
    # As _run-coordinator.tpl renders it into the chart's dagster.yaml:
    assert {"max_concurrent_runs": queued["maxConcurrentRuns"], "tag_concurrency_limits": queued["tagConcurrencyLimits"]} == shipped
    assert {"key": TOPIC_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in queued["tagConcurrencyLimits"]


# ---------------------------------------------------------------- deploy/Dockerfile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def test_dockerfile_copies_files_that_exist_and_leaves_out_none_it_needs():
    steps = dockerfile_instructions()
    assert steps[0] == ("FROM", "python:3.11-slim")
    copies = [args.split() for op, args in steps if op == "COPY"]
    assert copies
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]
    for *sources, _dest in copies:
        for source in sources:
            assert (REPO / source).exists(), f"deploy/Dockerfile copies {source}, which is not in the repository"
            first = Path(source).parts[0]
            assert first not in ignored and source not in ignored, f".dockerignore leaves out {source}, which deploy/Dockerfile copies"
    # Everything the package build needs is copied: pyproject, the readme it names, the package.
    copied = {s for *sources, _ in copies for s in sources}
    assert {"pyproject.toml", "README.md", "nexus_assets"} <= copied
    assert any(op == "RUN" and "pip install ." in args for op, args in steps)


def test_dockerfile_cmd_serves_the_code_location(tmp_path: Path):
    """The image's CMD, run here as it is (only the port is a free one and the host 127.0.0.1),
    outside the repository: the code server loads nexus_assets.definitions and serves its jobs,
    as `dagster job list` against it shows."""
    steps = dockerfile_instructions()
    (cmd,) = [json.loads(args) for op, args in steps if op == "CMD"]
    assert cmd[:3] == ["dagster", "code-server", "start"]
    assert cmd[cmd.index("-m") + 1] == "nexus_assets.definitions" and cmd[cmd.index("-p") + 1] == "4000"
    port = str(free_port())
    argv = [str(Path(sys.executable).parent / cmd[0]), *cmd[1:]]
    argv[argv.index("-p") + 1] = port
    argv[argv.index("-h") + 1] = "127.0.0.1"
    env = {**os.environ, "NEXUS_DB": str(tmp_path / "vault.duckdb"), "NEXUS_RUNS_DIR": str(tmp_path / "runs"),
           "NEXUS_TOPICS_DIR": str(tmp_path / "topics")}
    log = tmp_path / "code-server.log"
    with log.open("w") as log_file:
        server = start(argv, cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        listed, deadline = "", time.monotonic() + 180
        while "sync_topics" not in listed:
            assert server.poll() is None, f"the code server exited ({server.returncode}):\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the code server served no jobs within 180 s:\n{listed}\n{log.read_text()[-3000:]}"
            out = run_to_end(
                [str(Path(sys.executable).parent / "dagster"), "job", "list", "--grpc-host", "127.0.0.1", "--grpc-port", port],
                cwd=tmp_path, env=env,
            )
            listed = out.stdout + out.stderr
            if "sync_topics" not in listed:
                time.sleep(1)
    finally:
        stop(server, 15.0)
    assert {"ingest_run_files", "compile_topic"} <= set(re.findall(r"\w+", listed))
