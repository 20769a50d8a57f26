"""DuckDB allows one writer per file: several topic partitions synced at once must not fail on the lock."""

import json
import os
import shutil
import subprocess
import sys

from nexus_assets.store import Vault
from nexus_assets_tests.project import REPO, Project, nexus_run

TOPICS = ["alpha", "beta", "gamma"]


def test_three_partitions_materialized_concurrently_against_one_duckdb_file(empty_project: Project, tmp_path):
    p = empty_project
    for t in TOPICS:
        p.write_topic(t, keywords=["vault", t])
    for i in range(30):
        p.write_run(
            f"r{i:02d}.json",
            nexus_run(f"run-{i:02d}", [("user", f"The vault keeps run {i}. Alpha {i} is fine."), ("assistant", f"Beta and gamma {i} agree on the vault.")]),
        )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    # Dagster creates its sqlite schema on first use; three first uses at once race each other
    # (alembic "table already exists"), which has nothing to do with the vault. Create it once.
    subprocess.run([sys.executable, "-c", "from dagster import DagsterInstance; DagsterInstance.get()"], env=env, check=True)
    nexus = os.path.join(os.path.dirname(sys.executable), "nexus")
    procs = [
        subprocess.Popen([nexus, *p.sync_args(t), "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for t in TOPICS
    ]
    outcomes = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, outcomes):
        assert proc.returncode == 0, err
        (result,) = json.loads(out)
        assert result["success"] and all(result["checks"].values())

    with Vault.open(p.db, read_only=True) as v:
        assert v.conn.execute("SELECT count(DISTINCT run_id) FROM runs").fetchone()[0] == 30
        assert v.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 30, "each run stored once"
        for t in TOPICS:
            assert v.bricks.latest_manifest(t) is not None
            assert v.bricks.select(t)
