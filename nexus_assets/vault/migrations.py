"""The vault's schema, as an ordered list of migrations with a version table.

A vault written by any earlier release is upgraded in place when it is opened for writing: each
pending migration runs in its own transaction and is recorded in `schema_version`. Migrations only
add (tables, columns with defaults, indexes); stored rows, ids and hashes never change, with two
exceptions: migration 16 trims LLM replies over the size limit to their start (keeping size and hash),
and migration 21 records the vault's folders relative to the vault's own folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping

import duckdb

from nexus_assets.vault.sources import stored_path, vault_folder


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str
    # Rows a new table needs from what is already stored (runs in the same transaction). A name:
    # a backfill that needs a phase's code, handed in from above (`nexus_assets.upgrades`), since
    # nothing under vault/ imports a phase.
    backfill: Callable[[duckdb.DuckDBPyConnection], None] | str | None = None


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


_ENTRY = '[{"order_index":"BIGINT","brick_id":"VARCHAR","fingerprint":"VARCHAR","state":"VARCHAR"}]'


def _relative_sources(conn: duckdb.DuckDBPyConnection) -> None:
    """Migration 21: a recorded folder inside the vault's folder becomes relative to it, so the vault
    folder can be copied or moved and still read its own runs and topics. A folder outside stays
    absolute; the next sync records whatever it reads anyway."""
    folder = vault_folder(conn)
    for kind, path in conn.execute("SELECT kind, path FROM vault_sources").fetchall():
        stored = stored_path(path, folder) if Path(path).is_absolute() else path
        if stored != path:
            conn.execute("UPDATE vault_sources SET path = ? WHERE kind = ?", [stored, kind])


def _backfill_manifest_digests(conn: duckdb.DuckDBPyConnection) -> None:
    """Migration 19: every stored manifest gets the digest of its list (`entries_sha256`, by which
    a sync finds a manifest listing the same bricks) and its count, computed in SQL. A row whose
    list does not read as entries (edited by hand) keeps NULL: it is never matched, and verify
    reports it."""
    conn.execute(
        f"""UPDATE manifests SET entry_count = len(m.e),
                   entries_sha256 = sha256(coalesce(array_to_string(list_transform(m.e, lambda x:
                       '{{"brick_id":"' || x.brick_id || '","fingerprint":"' || x.fingerprint
                       || '","order_index":' || x.order_index || ',"state":"' || x.state || '"}}'), ','), ''))
            FROM (SELECT topic_id AS t, seq AS n, try(from_json(bricks_json, '{_ENTRY}')) AS e FROM manifests) m
            WHERE manifests.topic_id = m.t AND manifests.seq = m.n AND m.e IS NOT NULL
              AND len(list_filter(m.e, lambda x: x.brick_id IS NULL OR x.fingerprint IS NULL
                                                 OR x.order_index IS NULL OR x.state IS NULL)) = 0"""
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


MIGRATIONS: tuple[Migration, ...] = (
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
    Migration(
        17,
        "an audited answer keeps the sha256 of the answer given or refused (never its text)",
        # NULL: audited by a release before this column, or nothing was generated.
        "ALTER TABLE audit ADD COLUMN IF NOT EXISTS answer_sha256 TEXT;",
    ),
    Migration(
        18,
        "a DRAFT topic whose file was deleted (a rejected proposal) leaves the topic list; its definition is kept here",
        # No key: a topic id may be proposed, rejected, written again and rejected again.
        """
        CREATE TABLE IF NOT EXISTS dropped_topics (
            topic_id TEXT NOT NULL,
            definition_json TEXT NOT NULL,
            source_file TEXT,
            actor TEXT NOT NULL,
            dropped_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    Migration(
        19,
        "bricks keep the keys of their place, each topic what its last resolution read per run, and each manifest a digest "
        "of its list, so a sync resolves and publishes only what changed",
        # NULL keys (every brick before this release): the topic's next resolution is a full one.
        """
        ALTER TABLE bricks ADD COLUMN IF NOT EXISTS first_key BLOB;
        ALTER TABLE bricks ADD COLUMN IF NOT EXISTS rank_key BLOB;
        ALTER TABLE staged_bricks ADD COLUMN IF NOT EXISTS first_key BLOB;
        ALTER TABLE staged_bricks ADD COLUMN IF NOT EXISTS rank_key BLOB;
        ALTER TABLE staged_resolutions ADD COLUMN IF NOT EXISTS partial BOOLEAN DEFAULT false;
        ALTER TABLE manifests ADD COLUMN IF NOT EXISTS entries_sha256 TEXT;
        ALTER TABLE manifests ADD COLUMN IF NOT EXISTS entry_count INTEGER;

        CREATE TABLE IF NOT EXISTS resolution_inputs (
            topic_id TEXT NOT NULL,
            run_id TEXT,
            line TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS staged_resolution_inputs (
            topic_id TEXT NOT NULL,
            run_id TEXT,
            line TEXT NOT NULL
        );
        """,
        _backfill_manifest_digests,
    ),
    Migration(
        20,
        "related bricks (docs/conflicts.md): each visible brick's nearest related bricks by embedding, with any conflict "
        "between their values, and which bricks were looked at; derived from bricks and embeddings, never part of a hash",
        # No keys: DuckDB holds every index in memory, and a brick's rows are always replaced whole.
        """
        CREATE TABLE IF NOT EXISTS brick_relations (
            topic_id TEXT NOT NULL,
            model TEXT NOT NULL,
            brick_id TEXT NOT NULL,
            related_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            similarity DOUBLE NOT NULL,
            conflict TEXT,
            computed_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS relation_builds (
            topic_id TEXT NOT NULL,
            model TEXT NOT NULL,
            brick_id TEXT NOT NULL,
            threshold DOUBLE NOT NULL,
            computed_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    Migration(
        21,
        "the runs and topics folders are recorded relative to the vault's folder when inside it (invariant 13), "
        "so a copied or moved vault folder syncs its own",
        "SELECT 1;",
        _relative_sources,
    ),
    Migration(
        22,
        "a vault can be marked unusable (a `nexus vault copy` into it that has not finished)",
        """
        CREATE TABLE IF NOT EXISTS vault_marks (
            mark TEXT PRIMARY KEY,
            detail TEXT NOT NULL,
            marked_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    Migration(
        24,
        "a person's teaching (`nexus keep` / `nexus drop`: which brick, which verdict, who and why), and which "
        "selector version selects each topic (an upgrade never moves a topic by itself: `nexus sync --reselect`)",
        """
        CREATE TABLE IF NOT EXISTS teachings (
            topic_id TEXT NOT NULL,
            brick_id TEXT NOT NULL,
            verdict TEXT NOT NULL,
            content TEXT NOT NULL,
            reason TEXT,
            actor TEXT NOT NULL,
            topic_file TEXT NOT NULL,
            recorded_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS topic_selectors (
            topic_id TEXT NOT NULL,
            selector TEXT NOT NULL,
            why TEXT NOT NULL,
            recorded_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    # 23 and 24 are other changes of the same release, merged beside this one.
    Migration(
        25,
        "every text node and brick source says who said it (docs/inputs.md: the Nexus format's `name`, an export's author "
        "name, else the role), read again once from each run version's stored JSON; never part of an id or a hash",
        """
        ALTER TABLE nodes ADD COLUMN IF NOT EXISTS speaker TEXT;
        ALTER TABLE brick_sources ADD COLUMN IF NOT EXISTS speaker TEXT;
        """,
        "speakers",
    ),
)
LATEST = MIGRATIONS[-1].version
RELEASE_0_1_TABLES = ("topics", "runs", "bricks", "brick_sources", "manifests", "llm_calls")
# A resolution waiting to be published (migration 13): always written and dropped whole, per topic.
STAGE_TABLES = ("staged_brick_sources", "staged_bricks", "staged_resolutions", "staged_resolution_inputs")


class VaultTooNew(RuntimeError):
    """The vault was written by a newer Nexus Sync than this one."""


def _tables(conn: duckdb.DuckDBPyConnection) -> set[str]:
    rows = conn.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()
    return {r[0] for r in rows}


def schema_version(conn: duckdb.DuckDBPyConnection, tables: set[str] | None = None) -> int:
    """The version a vault is at: 0 for an empty file, 1 for a release-0.1 vault (it has no version table)."""
    tables = _tables(conn) if tables is None else tables
    if "schema_version" in tables:
        recorded = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        if recorded is not None:
            return recorded
    return 1 if set(RELEASE_0_1_TABLES) <= tables else 0


def _pending_from(current: int) -> list[Migration]:
    if current > LATEST:
        raise VaultTooNew(
            f"this vault is at schema version {current}, newer than this Nexus Sync knows ({LATEST}); "
            "upgrade nexus-sync to open it"
        )
    return [m for m in MIGRATIONS if m.version > current]


def _up_to_date(conn: duckdb.DuckDBPyConnection) -> bool:
    """Every open asks this first: one tiny query, where listing the catalog costs ~15 ms."""
    try:
        return conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == LATEST
    except (duckdb.CatalogException, duckdb.InvalidInputException):
        # No version table (a new or release-0.1 file); InvalidInput when DuckDB's replacement scan
        # finds a Python name `schema_version` instead.
        return False


def pending(conn: duckdb.DuckDBPyConnection) -> list[Migration]:
    """The migrations this vault still needs; refuses a vault written by a newer release."""
    return [] if _up_to_date(conn) else _pending_from(schema_version(conn))


class UpgradeNeedsBackfill(RuntimeError):
    """A pending migration needs a phase's backfill that the opener did not hand in."""


def upgrade(conn: duckdb.DuckDBPyConnection, backfills: Mapping[str, Callable] | None = None) -> list[Migration]:
    """Bring the vault to LATEST; returns the migrations applied. Each one commits on its own, so an
    interrupted upgrade resumes where it stopped. `backfills`: the named ones, by name."""
    if _up_to_date(conn):
        return []
    tables = _tables(conn)
    current = schema_version(conn, tables)
    todo = _pending_from(current)
    if "schema_version" not in tables or current == 0:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)"
        )
        if current:
            _record(conn, MIGRATIONS[current - 1], note=" (found in place)")
    for m in todo:
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(m.sql)
            if isinstance(m.backfill, str):
                if m.backfill not in (backfills or {}):
                    raise UpgradeNeedsBackfill(
                        f"migration {m.version} needs the {m.backfill!r} backfill: open the vault through "
                        "nexus_assets.store.Vault or nexus_assets.catalog.Catalog"
                    )
                backfills[m.backfill](conn)
            elif m.backfill is not None:
                m.backfill(conn)
            _record(conn, m)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return todo


def _record(conn: duckdb.DuckDBPyConnection, m: Migration, note: str = "") -> None:
    conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)", [m.version, m.description + note, datetime.now(timezone.utc)])
