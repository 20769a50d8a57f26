"""Projects that walk a topic through its lifecycle, for the lifecycle, seal-gate and immutability tests."""

from __future__ import annotations

import dagster as dg
import duckdb

from nexus_assets.cli import main
from nexus_assets.definitions import ASSETS, CHECKS, build_resources
from nexus_assets.defs.assets import resolved_brick_states, topic_manifest
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "walk"

# A topic file as a person writes it: comments and layout that activation and sealing must keep.
TOPIC_FILE = """\
# Written by hand: everything we decided about the sync engine.
topic_id: walk            # also the Dagster partition key
display_name: Lifecycle walk
extraction_policy:
  scope_description: Decisions about the sync engine and the vault.
  required_keywords: [sync, vault]   # whole words, any case

ordering_rule: chronological
state: DRAFT   # a person flips this with `nexus activate walk`
"""

OPEN_RUN = "r-open"
CLOSED_RUN = "r-closed"


def write_walk_project(p: Project, *, topic_file: str = TOPIC_FILE) -> None:
    p.topics.mkdir(parents=True, exist_ok=True)
    (p.topics / f"{TOPIC}.yaml").write_text(topic_file, encoding="utf-8")
    p.write_run(
        "open.json",
        nexus_run(
            OPEN_RUN,
            [("user", "The sync engine compiles bricks. It never paraphrases."), ("assistant", "The vault is append-only.")],
            status="OPEN",
            start="2026-01-02T00:00:00Z",
        ),
    )
    p.write_run(
        "closed.json",
        nexus_run(CLOSED_RUN, [("user", "A sync must be deterministic. Nothing else here.")], start="2026-01-01T00:00:00Z"),
    )


def cli(*argv: str) -> int:
    return main(list(argv))


def sealed_walk(p: Project) -> None:
    """The walk topic synced while a run was open, synced again once closed, then sealed: three manifests."""
    write_walk_project(p)
    assert cli(*p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics)) == 0
    assert cli(*p.sync_args(TOPIC)) == 0
    assert cli(*p.cli_args(), "close", OPEN_RUN) == 0
    assert cli(*p.sync_args(TOPIC)) == 0
    assert cli(*seal_args(p)) == 0


def seal_args(p: Project, topic: str = TOPIC) -> list[str]:
    return [*p.cli_args(), "seal", topic, "--runs-dir", str(p.runs), "--topics-dir", str(p.topics)]


def tamper(p: Project, sql: str, params: list | None = None) -> None:
    """Edit the vault behind Nexus Sync's back, as anyone with the DuckDB file could."""
    conn = duckdb.connect(str(p.db))
    try:
        conn.execute(sql, params or [])
    finally:
        conn.close()


def identity(brick: dict) -> dict:
    """What promotion must never change: everything but the state."""
    return {k: v for k, v in brick.items() if k != "state"}


def materialize_states_and_manifest(p: Project, topic_id: str, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """Re-materialize only the last two assets (with their checks), as a person can from the UI."""
    if topic_id not in instance.get_dynamic_partitions("topics"):
        instance.add_dynamic_partitions("topics", [topic_id])
    return dg.materialize(
        [*ASSETS, *CHECKS],
        selection=dg.AssetSelection.assets(resolved_brick_states, topic_manifest),
        partition_key=topic_id,
        instance=instance,
        resources=build_resources(db_path=str(p.db), runs_dir=str(p.runs), topics_dir=str(p.topics)),
        raise_on_error=False,
    )
