"""The vault knows its sources (invariant 13), and a vault written before sources had branches opens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from nexus_assets.vault.migrations import MIGRATIONS
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.lifecycle_helpers import TOPIC, write_walk_project
from nexus_assets_tests.project import Project


def synced_walk(root: Path, capsys: pytest.CaptureFixture) -> Project:
    """A walk project whose runs are all CLOSED, activated and synced with explicit directories."""
    p = Project(root / "project")
    write_walk_project(p)
    p.write_run("open.json", json.loads((p.runs / "open.json").read_text()) | {"status": "CLOSED"})
    run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    run_json(capsys, *p.sync_args())
    return p


def test_commands_default_to_the_directories_the_vault_was_synced_from(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = synced_walk(tmp_path, capsys)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no ./data here: every default must come from the vault
    monkeypatch.delenv("NEXUS_RUNS_DIR", raising=False)
    monkeypatch.delenv("NEXUS_TOPICS_DIR", raising=False)
    monkeypatch.setenv("NEXUS_LLM_MODEL", "local-model")

    plan = run_json(capsys, *p.cli_args(), "plan")
    assert [t["topic_id"] for t in plan["topics"]] == [TOPIC]
    assert plan["topics"][0]["runs_total"] == 2

    again = run_json(capsys, *p.cli_args(), "sync")  # a bare sync: the recorded directories
    assert [r["topic_id"] for r in again] == [TOPIC] and again[0]["success"]

    assert run_json(capsys, *p.cli_args(), "verify")["ok"] is True
    sealed = run_json(capsys, *p.cli_args(), "seal", TOPIC)
    assert sealed["state"] == "LOCKED"
    assert not (elsewhere / "data").exists()


def test_an_explicit_flag_wins_and_is_recorded(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    p = synced_walk(tmp_path, capsys)
    moved = tmp_path / "more-runs"
    shutil.copytree(p.runs, moved)
    monkeypatch.chdir(tmp_path)
    run_json(capsys, *p.cli_args(), "sync", "--runs-dir", str(moved))
    from nexus_assets.store import Vault

    with Vault.open(p.db, read_only=True) as vault:
        assert vault.recorded_sources() == {"runs_dir": str(moved.resolve()), "topics_dir": str(p.topics.resolve())}


@pytest.mark.parametrize(
    "command",
    [["verify"], ["bricks", TOPIC], ["trace", "abc"], ["errors"], ["topics"], ["close", "r-1"], ["seal", TOPIC], ["serve", "--port", "0"]],
    ids=lambda c: c[0],
)
def test_a_command_that_only_reads_never_creates_a_vault(tmp_path: Path, capsys: pytest.CaptureFixture, command: list[str]) -> None:
    missing = tmp_path / "missing.duckdb"
    code, out, err = run_cli(capsys, "--db", str(missing), *command)
    assert code == 2
    assert err.strip().splitlines() == [f"nexus: no vault at {missing}; run `nexus sync` first, or pass --db PATH"]
    assert not missing.exists()


# --- a vault written by the previous version ----------------------------------------------------


def downgrade(db: Path) -> None:
    """Make the vault exactly what the version before branches wrote: no node_type/branch columns,
    no recorded sources, no schema_version."""
    conn = duckdb.connect(str(db))
    try:
        for table in ("occurrences", "brick_sources"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN node_type")
            conn.execute(f"ALTER TABLE {table} DROP COLUMN branch")
        conn.execute("DROP TABLE vault_sources")
        conn.execute("DROP TABLE schema_version")
    finally:
        conn.close()


def test_a_vault_from_the_previous_version_opens_keeps_everything_and_resyncs_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    p = synced_walk(tmp_path, capsys)
    before = run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")
    manifest = run_json(capsys, *p.cli_args(), "manifest", TOPIC)
    downgrade(p.db)

    # Read-only commands read the old vault as it is: every source is on the current branch.
    old = run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")
    assert [(b["brick_id"], b["fingerprint"], b["state"]) for b in old] == [
        (b["brick_id"], b["fingerprint"], b["state"]) for b in before
    ]
    assert all(s["branch"] == "current" for b in old for s in b["sources"])
    assert run_json(capsys, *p.cli_args(), "manifest", TOPIC)["manifest_hash"] == manifest["manifest_hash"]

    # A sync migrates it (once) and changes nothing.
    result = run_json(capsys, *p.sync_args())
    assert result[0]["manifest_hash"] == manifest["manifest_hash"]
    after = run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")
    assert [(b["brick_id"], b["fingerprint"], b["state"], b["order_index"]) for b in after] == [
        (b["brick_id"], b["fingerprint"], b["state"], b["order_index"]) for b in before
    ]
    assert len(run_json(capsys, *p.cli_args(), "manifest", TOPIC)["bricks"]) == len(manifest["bricks"])
    conn = duckdb.connect(str(p.db), read_only=True)
    try:
        assert conn.execute("SELECT count(*) FROM manifests WHERE topic_id = ?", [TOPIC]).fetchone()[0] == 1
        assert [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()] == [m.version for m in MIGRATIONS]
        assert conn.execute("SELECT count(*) FROM vault_sources").fetchone()[0] == 2
    finally:
        conn.close()
    assert run_json(capsys, *p.cli_args(), "verify")["ok"] is True
