"""Migrations 11 to 16 (docs/architecture.md): the clean-sync fingerprint, recall's embeddings and
audit trail, the resolution stage, reader versions, and LLM requests kept once each (with the
one change to stored rows: a reply over the size limit trimmed to its start, keeping its size and
hash). The ordered list is `MIGRATIONS` in vault/migrations.py."""

from __future__ import annotations

import duckdb

from nexus_assets.vault.migration_base import Migration

# What migration 16 keeps of a stored reply over OLD_REPLY_LIMIT bytes (the default
# NEXUS_LLM_MAX_REPLY_BYTES): its first characters, its size and its sha256. One 50 MB reply made
# every later openai sync run out of memory and `nexus calls` crash.
OLD_REPLY_LIMIT = 1_000_000
TRIMMED_REPLY_CHARS = 4096


def _trim_oversized_replies(conn: duckdb.DuckDBPyConnection) -> None:
    # SET expressions all read the row as it was, so size and hash are the whole reply's.
    conn.execute(
        f"""UPDATE llm_calls SET
               response_bytes = strlen(raw_response),
               response_sha256 = sha256(raw_response),
               raw_response = left(raw_response, {TRIMMED_REPLY_CHARS}) || ' [trimmed]',
               pointers_json = '[]',
               status = 'failed',
               error = format('the reply was {{}} bytes, over the {OLD_REPLY_LIMIT:,}-byte limit '
                              '(NEXUS_LLM_MAX_REPLY_BYTES); trimmed to its start by migration 16', strlen(raw_response))
            WHERE strlen(raw_response) > {OLD_REPLY_LIMIT}"""
    )


MIGRATIONS_11_TO_16: tuple[Migration, ...] = (
    Migration(
        11,
        "a fingerprint of the inputs of the last sync that passed everything, so an identical sync does nothing",
        """
        CREATE TABLE IF NOT EXISTS clean_syncs (
            scope TEXT PRIMARY KEY,
            fingerprint TEXT NOT NULL,
            recorded_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    Migration(
        12,
        "recall (docs/recall.md): brick embeddings keyed by model and fingerprint, and the append-only audit trail of answers",
        """
        CREATE TABLE IF NOT EXISTS embeddings (
            model TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            vector FLOAT[384] NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (model, fingerprint)
        );
        CREATE TABLE IF NOT EXISTS audit (
            audit_id TEXT PRIMARY KEY,
            recorded_at TIMESTAMPTZ NOT NULL,
            user_name TEXT NOT NULL,
            agent TEXT NOT NULL,
            question_sha256 TEXT NOT NULL,
            topic_ids TEXT NOT NULL,
            brick_ids TEXT NOT NULL,
            model TEXT NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cost_usd DOUBLE,
            ccc DOUBLE,
            revisions INTEGER NOT NULL,
            outcome TEXT NOT NULL,
            reason TEXT
        );
        """,
    ),
    Migration(
        13,
        "resolved bricks are staged in the vault between resolution and publishing, never handed over in memory",
        # No keys: the stage is rewritten whole per topic and read by topic, and DuckDB holds every
        # index in memory.
        """
        CREATE TABLE IF NOT EXISTS staged_resolutions (
            topic_id TEXT NOT NULL,
            inputs_digest TEXT,
            bricks INTEGER NOT NULL,
            staged_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS staged_bricks (
            topic_id TEXT NOT NULL,
            brick_id TEXT NOT NULL,
            content TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            state TEXT NOT NULL,
            order_index INTEGER,
            superseded_by TEXT,
            stale BOOLEAN NOT NULL
        );
        CREATE TABLE IF NOT EXISTS staged_brick_sources (
            topic_id TEXT NOT NULL,
            brick_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            run_id TEXT NOT NULL,
            json_path TEXT NOT NULL,
            start_offset INTEGER NOT NULL,
            end_offset INTEGER NOT NULL,
            node_checksum TEXT NOT NULL,
            node_type TEXT,
            branch TEXT
        );
        """,
    ),
    Migration(
        14,
        "the stage's header no longer counts its bricks (nothing read the count)",
        # Migration 13 first shipped with the column, then landed once edited out of it: schema-13
        # vaults exist both with and without it.
        "ALTER TABLE staged_resolutions DROP COLUMN IF EXISTS bricks;",
    ),
    Migration(
        15,
        "each run file's verdict says which reader gave it, so a file with problems is read again by a reader that reads more",
        # NULL: read by a release before this column, i.e. reader version 1.
        "ALTER TABLE run_files ADD COLUMN IF NOT EXISTS reader_version INTEGER;",
    ),
    Migration(
        16,
        "LLM requests are kept once each (one request may ask for several topics), batches are recorded "
        "so a backfill resumes, and a reply over the size limit is trimmed to its start, keeping its hash",
        """
        ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS request_key TEXT;
        ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS response_bytes BIGINT;
        ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS response_sha256 TEXT;
        CREATE TABLE IF NOT EXISTS llm_requests (
            request_key TEXT NOT NULL,
            run_id TEXT NOT NULL,
            topic_ids_json TEXT NOT NULL,
            model TEXT NOT NULL,
            prompt_version TEXT NOT NULL,
            prompt_hash TEXT NOT NULL,
            request_json TEXT NOT NULL,
            raw_response TEXT,
            response_bytes BIGINT,
            response_sha256 TEXT,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            latency_ms INTEGER,
            status TEXT NOT NULL,
            error TEXT,
            attempts INTEGER NOT NULL,
            chunk_index INTEGER NOT NULL,
            chunk_count INTEGER NOT NULL,
            response_format TEXT,
            batch_id TEXT,
            recorded_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS llm_batches (
            batch_id TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            input_file_id TEXT NOT NULL,
            request_keys_json TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ
        );
        """,
        backfill=lambda conn: _trim_oversized_replies(conn),
    ),
)
