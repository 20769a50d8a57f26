"""`dagster dev` loads the code location and its webserver answers on 127.0.0.1."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

from nexus_assets_tests.project import REPO
from nexus_assets_tests.servers import (
    DEFAULT_SIGINT,
    STOP_GRACE_S,
    as_script_job,
    start,
    stop,
)

# dagster dev started from a script ignores SIGINT/SIGTERM (FACTS.md): it runs with SIGINT restored,
# in its own session (`servers.start`), and is stopped as a group.
LAUNCHER = DEFAULT_SIGINT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dagster_dev(args: list[str], **popen) -> subprocess.Popen:
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    return start([sys.executable, "-c", LAUNCHER, dagster, "dev", *args], **popen)


DAGSTER_DEV_GRACE_S = 3 * STOP_GRACE_S


def stop_group(proc: subprocess.Popen) -> float | None:
    """Stop `dagster dev` and everything it started (webserver, daemon, code server): SIGTERM to the
    group, SIGKILL after the grace period. Returns how long SIGTERM took, None if it was killed.
    It stops its webserver, daemon and code server in turn (~4 s on a quiet machine, FACTS.md); on 2
    busy cores that passed 5 s, hence a grace of its own."""
    return stop(proc, DAGSTER_DEV_GRACE_S)


def graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def test_dagster_dev_serves_the_code_location(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "NEXUS_DB": str(tmp_path / "vault.duckdb")}
    # As a script's background job starts it: SIGINT ignored until the launcher restores it.
    proc = start_dagster_dev(
        ["-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=as_script_job(),
    )
    took = None
    try:
        deadline = time.monotonic() + 120
        info = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as resp:
                    info = json.load(resp)
                    break
            except OSError:
                time.sleep(1)
        assert info is not None, f"webserver did not answer: {proc.stderr.read().decode()[-2000:] if proc.poll() is not None else 'timeout'}"
        query = "{ workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError { __typename ... on PythonError { message } } } } } }"
        while time.monotonic() < deadline:
            entries = graphql(port, query)["data"]["workspaceOrError"]["locationEntries"]
            if entries and entries[0]["locationOrLoadError"]:
                break
            time.sleep(1)
        (entry,) = entries
        assert entry["locationOrLoadError"]["__typename"] == "RepositoryLocation", entry
        assert entry["name"] == "nexus_sync", "the code location has the name pyproject.toml gives it"
        jobs = graphql(port, '{ repositoriesOrError { ... on RepositoryConnection { nodes { jobs { name } schedules { name } sensors { name } } } } }')
        (repo,) = jobs["data"]["repositoriesOrError"]["nodes"]
        assert "sync_topics" in {j["name"] for j in repo["jobs"]}
        assert {s["name"] for s in repo["schedules"]} >= {"nightly_sync"}
        assert {s["name"] for s in repo["sensors"]} >= {"nexus_files_sensor"}
    finally:
        took = stop_group(proc)
    assert took is not None and took < DAGSTER_DEV_GRACE_S, f"dagster dev needed SIGKILL (SIGTERM took {took} s)"
