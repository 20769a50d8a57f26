"""Migrations 1 to 9 (docs/architecture.md): the schema of the first release (0.1), exactly as it
shipped, then text nodes, file stats, resolution digests, source kinds and branches, the vault's
folders, forgetting and each source's drift status. The ordered list is `MIGRATIONS` in
vault/migrations.py."""

from __future__ import annotations

import duckdb

from nexus_assets.vault.migration_base import Migration

# Version 1 is the schema of the first release (0.1), exactly as it shipped; such vaults have
# no `schema_version` table and are recognised by their tables.
RELEASE_0_1 = """
CREATE TABLE IF NOT EXISTS topics (
    topic_id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    state TEXT NOT NULL,
    ordering_rule TEXT NOT NULL,
    definition_json TEXT NOT NULL,
    source_file TEXT,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS topic_transitions (
    topic_id TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    actor TEXT NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS run_files (
    file_sha256 TEXT NOT NULL,
    path TEXT NOT NULL,
    runs INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    first_seen TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (file_sha256, path)
);
CREATE SEQUENCE IF NOT EXISTS ingest_seq;
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT NOT NULL,
    version_id TEXT NOT NULL,
    format TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT,
    source_file TEXT NOT NULL,
    file_sha256 TEXT NOT NULL,
    raw_json TEXT NOT NULL,
    ingest_seq BIGINT NOT NULL,
    is_latest BOOLEAN NOT NULL,
    ingested_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, version_id)
);
CREATE TABLE IF NOT EXISTS run_closures (
    run_id TEXT PRIMARY KEY,
    actor TEXT NOT NULL,
    closed_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS extractions (
    extraction_key TEXT PRIMARY KEY,
    topic_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    version_id TEXT NOT NULL,
    extractor TEXT NOT NULL,
    pointers_json TEXT NOT NULL,
    validated BOOLEAN NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS occurrences (
    topic_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    version_id TEXT NOT NULL,
    json_path TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    node_checksum TEXT NOT NULL,
    content TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    ts TEXT,
    position INTEGER NOT NULL,
    extraction_key TEXT NOT NULL,
    PRIMARY KEY (topic_id, run_id, json_path, start_offset, end_offset, node_checksum)
);
CREATE TABLE IF NOT EXISTS rejections (
    extraction_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    topic_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    version_id TEXT NOT NULL,
    json_path TEXT,
    verbatim_quote TEXT,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (extraction_key, seq)
);
CREATE TABLE IF NOT EXISTS bricks (
    brick_id TEXT PRIMARY KEY,
    topic_id TEXT NOT NULL,
    content TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,
    order_index INTEGER,
    superseded_by TEXT,
    stale BOOLEAN NOT NULL,
    first_seen TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS brick_sources (
    brick_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    json_path TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    node_checksum TEXT NOT NULL,
    PRIMARY KEY (brick_id, run_id, json_path, start_offset, end_offset, node_checksum)
);
CREATE TABLE IF NOT EXISTS manifests (
    topic_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    manifest_hash TEXT NOT NULL,
    previous_hash TEXT,
    bricks_json TEXT NOT NULL,
    sealed BOOLEAN NOT NULL,
    dagster_run_id TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (topic_id, seq)
);
CREATE TABLE IF NOT EXISTS sealed_bricks (
    topic_id TEXT NOT NULL,
    brick_id TEXT NOT NULL,
    order_index INTEGER NOT NULL,
    content TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    sources_json TEXT NOT NULL,
    manifest_hash TEXT NOT NULL,
    sealed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (topic_id, brick_id)
);
CREATE TABLE IF NOT EXISTS ingestion_errors (
    file TEXT NOT NULL,
    file_sha256 TEXT,
    conversation TEXT,
    problem TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS llm_calls (
    call_key TEXT NOT NULL,
    topic_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    prompt_hash TEXT NOT NULL,
    request_json TEXT NOT NULL,
    raw_response TEXT,
    pointers_json TEXT NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_ms INTEGER,
    status TEXT NOT NULL,
    error TEXT,
    attempts INTEGER NOT NULL,
    chunk_index INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL,
    response_format TEXT,
    recorded_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS syncs (
    topic_id TEXT NOT NULL,
    dagster_run_id TEXT,
    status TEXT NOT NULL,
    manifest_hash TEXT,
    detail TEXT,
    finished_at TIMESTAMPTZ NOT NULL
);
"""

NODES = """
CREATE TABLE IF NOT EXISTS nodes (
    run_id TEXT NOT NULL,
    version_id TEXT NOT NULL,
    json_path TEXT NOT NULL,
    node_type TEXT NOT NULL,
    timestamp TEXT,
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    checksum TEXT NOT NULL,
    branch TEXT NOT NULL DEFAULT 'current',
    hidden BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (run_id, version_id, json_path)
);
"""


def _backfill_source_status(conn: duckdb.DuckDBPyConnection) -> None:
    """A brick flagged stale before sources had their own status keeps it, on its canonical source,
    until the next check looks again."""
    conn.execute(
        """INSERT INTO source_status
           SELECT DISTINCT s.run_id, s.json_path, s.node_checksum, true,
                  'flagged stale before each source had its own status; checked again at the next sync or verify',
                  now()
           FROM bricks b JOIN brick_sources s ON s.brick_id = b.brick_id AND s.seq = 0
           WHERE b.stale
           ON CONFLICT DO NOTHING"""
    )
    conn.execute(
        """INSERT INTO source_status_history
           SELECT run_id, json_path, node_checksum, drifted, problem, 'migration 9', checked_at FROM source_status"""
    )


FILE_STATS = """
CREATE TABLE IF NOT EXISTS file_stats (
    path TEXT PRIMARY KEY,
    size BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    ctime_ns BIGINT NOT NULL,
    inode BIGINT NOT NULL,
    file_sha256 TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL
);
"""


MIGRATIONS_1_TO_9: tuple[Migration, ...] = (
    Migration(1, "release 0.1 schema", RELEASE_0_1),
    Migration(2, "text nodes of every run version, parsed once at ingestion", NODES, "nodes"),
    Migration(3, "size, times and inode of each run file read, so an unchanged file is not read or hashed again", FILE_STATS),
    Migration(
        4,
        "each sync records a digest of what the topic's resolution read, so an unchanged topic is not resolved again",
        "ALTER TABLE syncs ADD COLUMN IF NOT EXISTS inputs_digest TEXT;",
    ),
    Migration(
        5,
        "sources say which kind of node and which branch they are on (docs/inputs.md)",
        """
        ALTER TABLE occurrences ADD COLUMN IF NOT EXISTS node_type TEXT;
        ALTER TABLE occurrences ADD COLUMN IF NOT EXISTS branch TEXT DEFAULT 'current';
        ALTER TABLE brick_sources ADD COLUMN IF NOT EXISTS node_type TEXT;
        ALTER TABLE brick_sources ADD COLUMN IF NOT EXISTS branch TEXT DEFAULT 'current';
        """,
    ),
    Migration(
        6,
        "the runs and topics directories the vault was synced from (invariant 13)",
        """
        CREATE TABLE IF NOT EXISTS vault_sources (
            kind TEXT PRIMARY KEY,
            path TEXT NOT NULL,
            recorded_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    Migration(
        8,
        "forgetting (invariant 15): tombstones in the manifest chain and the sources a sync must never bring back",
        """
        ALTER TABLE manifests ADD COLUMN IF NOT EXISTS tombstone_json TEXT;
        CREATE TABLE IF NOT EXISTS tombstones (
            tombstone_id TEXT PRIMARY KEY,
            run_ids_json TEXT NOT NULL,
            file_sha256s_json TEXT NOT NULL,
            brick_ids_json TEXT NOT NULL,
            topic_ids_json TEXT NOT NULL,
            reason TEXT NOT NULL,
            actor TEXT NOT NULL,
            forgotten_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS forgotten_runs (
            run_id TEXT PRIMARY KEY,
            tombstone_id TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS forgotten_files (
            file_sha256 TEXT PRIMARY KEY,
            tombstone_id TEXT NOT NULL
        );
        """,
    ),
    Migration(
        9,
        "each source node's drift status as the files stand now, and every flip of it (invariant 14)",
        """
        CREATE TABLE IF NOT EXISTS source_status (
            run_id TEXT NOT NULL,
            json_path TEXT NOT NULL,
            node_checksum TEXT NOT NULL,
            drifted BOOLEAN NOT NULL,
            problem TEXT,
            checked_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (run_id, json_path, node_checksum)
        );
        CREATE TABLE IF NOT EXISTS source_status_history (
            run_id TEXT NOT NULL,
            json_path TEXT NOT NULL,
            node_checksum TEXT NOT NULL,
            drifted BOOLEAN NOT NULL,
            problem TEXT,
            observed_by TEXT NOT NULL,
            observed_at TIMESTAMPTZ NOT NULL
        );
        """,
        _backfill_source_status,
    ),
)
