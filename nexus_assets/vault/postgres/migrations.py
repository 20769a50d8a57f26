"""The PostgreSQL vault's schema versions, kept apart from DuckDB's: a new PostgreSQL vault starts
at the schema DuckDB reached in its migration 22 (`schema.sql`), as version 1. A later change to
stored data adds a migration to both lists."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import Callable

# One key for "the schema is being changed": two processes opening a new database at once take
# turns instead of both creating its tables.
_SCHEMA_LOCK = 0x6E657875730001


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str
    # Rows a new table needs from what is stored, in the same transaction (the backend's connection).
    backfill: Callable | None = None


def _manifest_entries(conn) -> None:
    from nexus_assets.vault.migrations import store_manifest_entries
    from nexus_assets.vault.postgres.bulk import insert_rows

    store_manifest_entries(conn, lambda rows: insert_rows(conn, "manifest_entries", rows, conflict=None))


def _schema() -> str:
    return resources.files("nexus_assets.vault.postgres").joinpath("schema.sql").read_text()


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the vault's tables as DuckDB's migration 22 left them, text collated bytewise", ""),
    # DuckDB's migration 24 (teaching and selector versions). Version 2 is left to DuckDB's 23.
    Migration(
        3,
        "a person's teaching (`nexus keep` / `nexus drop`) and which selector version selects each topic",
        """
        CREATE TABLE IF NOT EXISTS teachings (
            topic_id text COLLATE "C" NOT NULL,
            brick_id text COLLATE "C" NOT NULL,
            verdict text COLLATE "C" NOT NULL,
            content text COLLATE "C" NOT NULL,
            reason text COLLATE "C",
            actor text COLLATE "C" NOT NULL,
            topic_file text COLLATE "C" NOT NULL,
            recorded_at timestamptz NOT NULL
        );
        CREATE TABLE IF NOT EXISTS topic_selectors (
            topic_id text COLLATE "C" NOT NULL,
            selector text COLLATE "C" NOT NULL,
            why text COLLATE "C" NOT NULL,
            recorded_at timestamptz NOT NULL
        );
        CREATE INDEX IF NOT EXISTS teachings_topic ON teachings (topic_id);
        CREATE INDEX IF NOT EXISTS topic_selectors_topic ON topic_selectors (topic_id);
        """,
    ),
    # Numbered as DuckDB's migration 25 less 21 (2 and 3 are the same release's 23 and 24). A
    # PostgreSQL vault is only ever filled by this release or a copy, so nothing is read again here:
    # `nexus vault copy` carries the speakers a DuckDB vault holds.
    Migration(
        4,
        "every text node and brick source says who said it (DuckDB's migration 25)",
        """
        ALTER TABLE nodes ADD COLUMN IF NOT EXISTS speaker text COLLATE "C";
        ALTER TABLE brick_sources ADD COLUMN IF NOT EXISTS speaker text COLLATE "C";
        """,
    ),
    Migration(
        5,
        "the record: every run's passages, the run versions they were built for, and which runs each topic is about "
        "(DuckDB's migration 26)",
        """
        CREATE TABLE IF NOT EXISTS passages (
            run_id text COLLATE "C" NOT NULL,
            json_path text COLLATE "C" NOT NULL,
            node_checksum text COLLATE "C" NOT NULL,
            start_offset integer NOT NULL,
            end_offset integer NOT NULL,
            kind text COLLATE "C" NOT NULL,
            passage_id text COLLATE "C" NOT NULL
        );
        CREATE INDEX IF NOT EXISTS passages_node ON passages (run_id, json_path, node_checksum);
        CREATE INDEX IF NOT EXISTS passages_id ON passages (passage_id);
        CREATE TABLE IF NOT EXISTS passage_builds (
            run_id text COLLATE "C" NOT NULL,
            version_id text COLLATE "C" NOT NULL,
            splitter text COLLATE "C" NOT NULL,
            passages integer NOT NULL,
            built_at timestamptz NOT NULL
        );
        CREATE INDEX IF NOT EXISTS passage_builds_run ON passage_builds (run_id, version_id);
        CREATE TABLE IF NOT EXISTS topic_record_runs (
            topic_id text COLLATE "C" NOT NULL,
            run_id text COLLATE "C" NOT NULL,
            version_id text COLLATE "C" NOT NULL,
            definition_sha256 text COLLATE "C" NOT NULL,
            about boolean NOT NULL,
            reads_tools boolean NOT NULL,
            why text COLLATE "C" NOT NULL,
            recorded_at timestamptz NOT NULL
        );
        CREATE INDEX IF NOT EXISTS topic_record_runs_topic ON topic_record_runs (topic_id, run_id);
        """,
    ),
    Migration(
        6,
        "a manifest's list is stored once per entry, with the manifest seqs it is listed from and to (DuckDB's migration 27)",
        """
        CREATE TABLE IF NOT EXISTS manifest_entries (
            topic_id text COLLATE "C" NOT NULL,
            brick_id text COLLATE "C" NOT NULL,
            fingerprint text COLLATE "C" NOT NULL,
            order_index bigint NOT NULL,
            state text COLLATE "C" NOT NULL,
            valid_from integer NOT NULL,
            valid_to integer
        );
        CREATE INDEX IF NOT EXISTS manifest_entries_open ON manifest_entries (topic_id, valid_to);
        CREATE INDEX IF NOT EXISTS manifest_entries_brick ON manifest_entries (brick_id);
        ALTER TABLE manifests ALTER COLUMN bricks_json DROP NOT NULL;
        """,
        _manifest_entries,
    ),
)
LATEST = MIGRATIONS[-1].version


def schema_version(conn) -> int:
    row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if not row[0]:
        return 0
    return conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def pending(conn) -> list[Migration]:
    from nexus_assets.vault.migrations import VaultTooNew

    current = schema_version(conn)
    if current > LATEST:
        raise VaultTooNew(
            f"this vault is at PostgreSQL schema version {current}, newer than this Nexus Sync knows ({LATEST}); "
            "upgrade nexus-sync to open it"
        )
    return [m for m in MIGRATIONS if m.version > current]


def upgrade(conn) -> list[Migration]:
    if not pending(conn):
        return []
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(?)", [_SCHEMA_LOCK])
        todo = pending(conn)  # another process may have done it while we waited
        for m in todo:
            conn.raw.execute(_schema() if m.version == 1 else m.sql)
            if m.backfill is not None:
                m.backfill(conn)
            conn.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?)", [m.version, m.description, datetime.now(timezone.utc)]
            )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return todo
