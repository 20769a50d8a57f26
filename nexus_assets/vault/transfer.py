"""Rows from one vault to another, table by table, whatever the two backends: what `nexus vault
copy` moves. The destination is marked unusable first and only unmarked by the caller once every
manifest hash has been checked there, so a copy stopped midway is never half-trusted."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Iterator

from nexus_assets.vault.catalog import BaseCatalog
from nexus_assets.vault.sources import recorded_path, stored_path, vault_folder

UNFINISHED = "unfinished_copy"
# Each backend keeps its own schema versions; the marks are the copy's own.
NOT_COPIED = ("schema_version", "vault_marks")
# Tables whose rows are read in insertion order (a tiebreak their readers use).
IN_INSERTION_ORDER = ("topic_transitions", "source_status_history")
BATCH_ROWS = 5_000


class CopyRefused(ValueError):
    """The destination already holds a vault (or is the source)."""


def tables(vault: BaseCatalog) -> list[str]:
    if vault.on_postgres:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
    else:
        sql = "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY 1"
    return [t for (t,) in vault.conn.execute(sql).fetchall() if t not in NOT_COPIED]


def columns(vault: BaseCatalog, table: str) -> list[str]:
    rows = vault.conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = current_schema() "
        "ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [c for (c,) in rows if c != "rowid"]


def row_count(vault: BaseCatalog, table: str) -> int:
    return vault.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


def holds_rows(vault: BaseCatalog) -> list[str]:
    return [t for t in tables(vault) if row_count(vault, t)]


def mark_unfinished(vault: BaseCatalog, detail: str) -> None:
    vault.conn.execute(
        "INSERT INTO vault_marks VALUES (?, ?, ?) ON CONFLICT (mark) DO UPDATE SET detail = excluded.detail, marked_at = excluded.marked_at",
        [UNFINISHED, detail, datetime.now(timezone.utc)],
    )


def unmark(vault: BaseCatalog) -> None:
    vault.conn.execute("DELETE FROM vault_marks WHERE mark = ?", [UNFINISHED])


def _rows(vault: BaseCatalog, table: str, cols: list[str]) -> Iterator[list[tuple]]:
    order = " ORDER BY rowid" if table in IN_INSERTION_ORDER else ""
    cursor = vault.conn.execute(f'SELECT {", ".join(cols)} FROM "{table}"{order}')
    while batch := cursor.fetchmany(BATCH_ROWS):
        yield batch


def copy_rows(source: BaseCatalog, destination: BaseCatalog, *, on_table: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Every row of every table of `source` into the (emptied) `destination`; rows per table.

    The recorded runs and topics folders are written as the destination records them (relative to
    its folder when inside it, absolute otherwise): a DuckDB vault's relative paths mean nothing
    to a PostgreSQL one."""
    from_folder = vault_folder(source.conn)
    to_folder = vault_folder(destination.conn)
    copied: dict[str, int] = {}
    known = set(tables(destination))
    for table in tables(source):
        if table not in known:
            raise CopyRefused(f"the destination has no table {table}: it is from another release of Nexus Sync")
        wanted = set(columns(destination, table))
        cols = [c for c in columns(source, table) if c in wanted]
        n = 0
        for batch in _rows(source, table, cols):
            rows = [dict(zip(cols, r)) for r in batch]
            if table == "vault_sources":
                for r in rows:
                    r["path"] = stored_path(recorded_path(r["path"], from_folder), to_folder)
            destination.insert_rows(table, rows, conflict=None)
            n += len(rows)
        copied[table] = n
        if on_table:
            on_table(table, n)
    _continue_sequence(source, destination)
    return copied


def _continue_sequence(source: BaseCatalog, destination: BaseCatalog) -> None:
    """Ingestion order goes on from where the source's left it."""
    last = source.conn.execute("SELECT max(ingest_seq) FROM runs").fetchone()[0] or 0
    if destination.on_postgres:
        destination.conn.execute("SELECT setval('ingest_seq', ?, ?)", [max(last, 1), last > 0])
    else:
        destination.conn.execute(f"CREATE OR REPLACE SEQUENCE ingest_seq START {last + 1}")


def empty(destination: BaseCatalog) -> None:
    """Drop every row an earlier, unfinished copy left."""
    for table in tables(destination):
        destination.conn.execute(f'DELETE FROM "{table}"')
