"""Where the vault's recorded folders are (invariant 13): relative to the vault's own folder when
they lie inside it, so a vault folder copied or moved elsewhere reads its own runs and topics;
absolute otherwise (a shared folder outside stays where it is)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb


def vault_folder(conn: duckdb.DuckDBPyConnection) -> Path | None:
    """The folder that holds the vault file this connection opened; None for an in-memory vault
    or a PostgreSQL one (its recorded folders are absolute)."""
    if getattr(conn, "backend", "duckdb") != "duckdb":
        return None
    row = conn.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    return Path(os.path.abspath(row[0])).parent if row and row[0] else None


def stored_path(path: Path | str, folder: Path | None) -> str:
    """What is recorded for a folder: relative to `folder` (the vault's) when inside it, else absolute."""
    absolute = Path(path).resolve()
    if folder is not None:
        try:
            relative = absolute.relative_to(folder.resolve())
        except ValueError:
            return str(absolute)
        return relative.as_posix() or "."
    return str(absolute)


def recorded_path(stored: str, folder: Path | None) -> Path:
    """A recorded folder as a path to read: a relative one is under the vault's folder, an absolute
    one (every vault before migration 21 recorded those) is taken as it is."""
    path = Path(stored)
    if path.is_absolute() or folder is None:
        return path
    return (folder / path).resolve()
