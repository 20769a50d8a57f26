"""The vault on PostgreSQL (DESIGN §11): the same inputs give byte-identical results on DuckDB and
on a real PostgreSQL whose default collation is ICU en-US, not bytewise; `verify` is clean on both.

The server is Debian's, started by the `postgres_server` fixture as a non-root user on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project, nexus_run, sample_project

SAMPLE_TOPICS = ("nexus-server-sync", "storage-decisions")


def outcome(capsys, project: Project, topics=SAMPLE_TOPICS) -> dict:
    """Everything a person or a tool reads of a vault, as JSON: bricks (superseded too), manifests,
    rejections, and each brick's lineage-free trace."""
    seen: dict = {"topics": run_json(capsys, *project.cli_args(), "topics")}
    for t in topics:
        seen[t] = {
            "bricks": run_json(capsys, *project.cli_args(), "bricks", t, "--all"),
            "manifest": run_json(capsys, *project.cli_args(), "manifest", t),
            "rejections": run_json(capsys, *project.cli_args(), "rejections", t),
        }
    return seen


def synced(capsys, project: Project, *topics: str, partial: bool = False) -> None:
    """A sync that succeeds; `partial`: only some runs are there, so the gold check may fail (exit 1)."""
    code, _, err = run_cli(capsys, *project.sync_args(*topics))
    assert code in ((0, 1) if partial else (0,)), err


def test_server_collation_is_not_bytewise(postgres_url):
    """The server these tests use sorts as a typical one does, so a lucky order cannot pass."""
    with psycopg.connect(postgres_url) as conn:
        order = conn.execute("SELECT x FROM (VALUES ('a'), ('B'), ('_'), ('b')) v(x) ORDER BY x").fetchall()
    assert [r[0] for r in order] != sorted(["a", "B", "_", "b"])


def test_sample_corpus_is_byte_identical_on_both_backends(tmp_path, capsys, postgres_url):
    embedded = sample_project(tmp_path / "duck")
    served = sample_project(tmp_path / "pg", vault_url=postgres_url)
    for p in (embedded, served):
        synced(capsys, p)
    a, b = outcome(capsys, embedded), outcome(capsys, served)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    for p in (embedded, served):
        code, out, err = run_cli(capsys, *p.cli_args(), "verify")
        assert code == 0, out + err


def test_mixed_case_and_unicode_order_identically(tmp_path, capsys, postgres_url):
    """Texts, run ids and paths whose ICU order differs from their bytewise one."""
    projects = [Project(tmp_path / "duck"), Project(tmp_path / "pg", postgres_url)]
    words = ["Zebra", "apple", "_under", "Éclair", "éclair", "b-side", "B side", "a.b", "A_b", "ß", "ss", "Ω", "z9", "Z10"]
    for p in projects:
        for i, w in enumerate(words):
            run_id = f"{w.replace(' ', '-').replace('.', '-')}-{i:02d}"
            p.write_run(
                f"{run_id}.json",
                nexus_run(run_id, [("user", f"The widget {w} setting is {i} units."), ("assistant", f"Noted: widget {w} keeps {i} units.")],
                          start=f"2026-01-{1 + i % 3:02d}T00:00:00Z"),
            )
        p.write_topic("widgets-a", keywords=["widget"], ordering_rule="source-run-order")
        p.write_topic("widgets-b", keywords=["widget"], ordering_rule="chronological")
        synced(capsys, p)
    a, b = (outcome(capsys, p, ("widgets-a", "widgets-b")) for p in projects)
    assert a["widgets-a"]["bricks"], "the corpus made no bricks"
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("backend", ["duckdb", "postgresql"])
def test_incremental_equals_full(tmp_path, capsys, postgres_server, backend):
    """Runs arriving one sync at a time give the vault one sync of them all gives, on each backend."""
    url = postgres_server.database if backend == "postgresql" else (lambda: None)
    full = sample_project(tmp_path / "full", vault_url=url())
    step = sample_project(tmp_path / "step", vault_url=url())
    files = sorted(p for p in step.runs.rglob("*.json"))
    hold = tmp_path / "held"
    hold.mkdir()
    for f in files[1:]:
        f.rename(hold / f.name)
    synced(capsys, step, partial=True)
    for f in files[1:]:
        (hold / f.name).rename(f)
        synced(capsys, step, partial=True)
    synced(capsys, full)
    a, b = outcome(capsys, full), outcome(capsys, step)
    for t in SAMPLE_TOPICS:
        assert a[t]["manifest"]["bricks"] == b[t]["manifest"]["bricks"]


def test_a_new_database_gets_its_schema_once(postgres_url):
    """Two opens of an empty database: the schema is made once, and reads find it."""
    from nexus_assets.vault.postgres.migrations import LATEST, schema_version

    with Vault.open(postgres_url, read_only=True) as v:
        assert schema_version(v.conn) == LATEST
        assert v.topic_summaries() == []
    with Vault.open(postgres_url) as v:
        assert v.conn.execute("SELECT count(*) FROM schema_version").fetchone()[0] == LATEST


def test_an_unreachable_server_is_one_clear_line(capsys, tmp_path):
    code, out, err = run_cli(capsys, "--db", "postgresql://nexus@127.0.0.1:1/none", "topics")
    assert code == 2
    assert "cannot reach the vault postgresql://nexus@127.0.0.1:1/none" in err
    assert "Traceback" not in err
