"""The vault's schema, as an ordered list of migrations with a version table.

A vault written by any earlier release is upgraded in place when it is opened for writing: each
pending migration runs in its own transaction and is recorded in `schema_version`. Migrations only
add (tables, columns with defaults, indexes); stored rows, ids and hashes never change, with three
exceptions: migration 16 trims LLM replies over the size limit to their start (keeping size and hash),
migration 21 records the vault's folders relative to the vault's own folder, and migration 27 moves
each manifest's list into `manifest_entries` (every manifest still lists byte for byte what its hash
was taken over).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping

import duckdb

from nexus_assets.vault.migration_base import Migration
from nexus_assets.vault.migrations_1_to_9 import MIGRATIONS_1_TO_9
from nexus_assets.vault.migrations_11_to_16 import MIGRATIONS_11_TO_16
from nexus_assets.vault.sources import stored_path, vault_folder

# Older migrations live beside this file by era (migrations_1_to_9.py, migrations_11_to_16.py); a new
# one is added at the end of MIGRATIONS below.
__all__ = [
    "LATEST", "MIGRATIONS", "RELEASE_0_1_TABLES", "STAGE_TABLES", "Migration", "UpgradeNeedsBackfill", "VaultTooNew",
    "pending", "schema_version", "upgrade",
]


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


_ENTRY_KEYS = {"brick_id", "fingerprint", "order_index", "state"}
_STATES = {"IMPROVISE", "FORMING", "FINAL"}
_HEX = frozenset("0123456789abcdef")
_FLUSH_ROWS = 50_000


def _canonical_json(value) -> str:
    # core.fingerprint.canonical_json as this migration was written against it: the vault layer
    # imports only itself, and a migration keeps the rule of its day.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _entries_of_list(listed: str) -> list[tuple[str, str, int, str]] | None:
    """A stored list as (brick_id, fingerprint, order_index, state) entries, where
    `manifest_entries` gives it back byte for byte (publish/manifest_records.py,
    `storable_as_entries`, the same rule kept here on purpose: a migration keeps the rule of its
    day); None where it must stay whole."""
    try:
        parsed = json.loads(listed)
    except ValueError:
        return None
    if not isinstance(parsed, list) or "[" + ",".join(_canonical_json(e) for e in parsed) + "]" != listed:
        return None
    entries = []
    for e in parsed:
        if not isinstance(e, dict) or set(e) != _ENTRY_KEYS:
            return None
        b, f, o, st = e["brick_id"], e["fingerprint"], e["order_index"], e["state"]
        if not (isinstance(b, str) and isinstance(f, str) and len(b) == len(f) == 64 and set(b) <= _HEX and set(f) <= _HEX):
            return None
        if type(o) is not int or st not in _STATES:
            return None
        entries.append((b, f, o, st))
    keys = [(o, b) for b, _, o, _ in entries]
    if any(a >= c for a, c in zip(keys, keys[1:])) or len({b for b, *_ in entries}) != len(entries):
        return None
    return entries


def store_manifest_entries(conn, insert: Callable[[list[dict]], None]) -> None:
    """Migration 27 (and PostgreSQL's 6): every stored manifest list that `manifest_entries` gives
    back byte for byte moves there, each entry once with the seqs it is listed from and to; the
    rest stay whole. One topic at a time and one list at a time, so memory holds one list."""
    topics = [t for (t,) in conn.execute(
        "SELECT DISTINCT topic_id FROM manifests WHERE bricks_json IS NOT NULL ORDER BY 1").fetchall()]
    rows: list[dict] = []
    for topic in topics:
        open_: dict[tuple, int] = {}
        moved: list[int] = []
        for (seq,) in conn.execute("SELECT seq FROM manifests WHERE topic_id = ? ORDER BY seq", [topic]).fetchall():
            listed = conn.execute("SELECT bricks_json FROM manifests WHERE topic_id = ? AND seq = ?", [topic, seq]).fetchone()[0]
            entries = _entries_of_list(listed) if listed is not None else None
            now_listed = set(entries or ())
            for entry in [e for e in open_ if e not in now_listed]:
                rows.append(_entry_row(topic, entry, open_.pop(entry), seq))
            for entry in entries or ():
                open_.setdefault(entry, seq)
            if entries is not None:
                moved.append(seq)
            if len(rows) >= _FLUSH_ROWS:
                insert(rows)
                rows = []
        rows += [_entry_row(topic, entry, since, None) for entry, since in open_.items()]
        if moved:
            conn.execute("UPDATE manifests SET bricks_json = NULL WHERE topic_id = ? AND seq IN (SELECT unnest(?))", [topic, moved])
    if rows:
        insert(rows)


def _entry_row(topic: str, entry: tuple, valid_from: int, valid_to: int | None) -> dict:
    b, f, o, st = entry
    return {"topic_id": topic, "brick_id": b, "fingerprint": f, "order_index": o, "state": st,
            "valid_from": valid_from, "valid_to": valid_to}


def _duckdb_manifest_entries(conn: duckdb.DuckDBPyConnection) -> None:
    import pandas as pd

    def insert(rows: list[dict]) -> None:
        frame = pd.DataFrame(rows, columns=["topic_id", "brick_id", "fingerprint", "order_index", "state", "valid_from", "valid_to"])
        frame["valid_to"] = frame["valid_to"].astype("Int64")
        conn.from_df(frame).query("_rows", "INSERT INTO manifest_entries SELECT * FROM _rows")

    store_manifest_entries(conn, insert)


MIGRATIONS: tuple[Migration, ...] = (
    *MIGRATIONS_1_TO_9,
    *MIGRATIONS_11_TO_16,
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
    Migration(
        26,
        "the record (DESIGN §3.1): every run's passages (its sentences and list items, each an address into a stored "
        "node: no second copy of its text), which run versions they were built for, and which runs each topic is about",
        # No keys (DuckDB holds every index in memory); a node's passages are written once, whole, by
        # its (run, path, checksum), so a grown run's unchanged nodes are not split again.
        """
        CREATE TABLE IF NOT EXISTS passages (
            run_id TEXT NOT NULL,
            json_path TEXT NOT NULL,
            node_checksum TEXT NOT NULL,
            start_offset INTEGER NOT NULL,
            end_offset INTEGER NOT NULL,
            kind TEXT NOT NULL,
            passage_id TEXT NOT NULL
        );
        CREATE TABLE IF NOT EXISTS passage_builds (
            run_id TEXT NOT NULL,
            version_id TEXT NOT NULL,
            splitter TEXT NOT NULL,
            passages INTEGER NOT NULL,
            built_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS topic_record_runs (
            topic_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            version_id TEXT NOT NULL,
            definition_sha256 TEXT NOT NULL,
            about BOOLEAN NOT NULL,
            reads_tools BOOLEAN NOT NULL,
            why TEXT NOT NULL,
            recorded_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    Migration(
        27,
        "a manifest's list is stored once per entry (`manifest_entries`: each entry with the manifest seqs it is listed "
        "from and to), so recording a manifest writes what changed; every manifest lists as before and its hash re-proves",
        # No keys (DuckDB holds every index in memory); a list `manifest_entries` cannot give back
        # byte for byte stays in `bricks_json`, which is otherwise NULL from here on.
        """
        CREATE TABLE IF NOT EXISTS manifest_entries (
            topic_id TEXT NOT NULL,
            brick_id TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            order_index BIGINT NOT NULL,
            state TEXT NOT NULL,
            valid_from INTEGER NOT NULL,
            valid_to INTEGER
        );
        ALTER TABLE manifests ALTER COLUMN bricks_json DROP NOT NULL;
        """,
        _duckdb_manifest_entries,
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
