"""Bulk rows on PostgreSQL: what DuckDB reads straight from a DataFrame goes through COPY into a
temporary table here (one round trip for a run's thousands of nodes, not one per row)."""

from __future__ import annotations

import itertools
import math
from contextlib import contextmanager
from datetime import datetime
from typing import Iterator

from nexus_assets.vault.postgres.connection import storable

_names = itertools.count()


def _plain(value):
    """A value as psycopg adapts it: numpy scalars become Python ones, a missing value None."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (bytes, str)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            value = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, tuple):
        return list(value)  # DuckDB's fixed-size arrays come back as tuples: an array here, not a record
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    return value


def _copy(conn, table: str, columns: list[str], rows) -> None:
    with conn.raw.cursor() as cur:
        with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([_plain(v) for v in row])


def insert_rows(conn, table: str, rows: list[dict], *, conflict: str | None = "DO NOTHING") -> None:
    columns = list(rows[0])
    scratch = f"_rows_{next(_names)}"
    cols = ", ".join(columns)
    # The scratch table takes the target's column types (and bytewise collation), not its constraints.
    conn.raw.execute(f"CREATE TEMP TABLE {scratch} AS SELECT {cols} FROM {table} WITH NO DATA")
    try:
        _copy(conn, scratch, columns, ([r.get(c) for c in columns] for r in rows))
        on_conflict = f" ON CONFLICT {conflict}" if conflict else ""
        conn.raw.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {scratch}{on_conflict}")
    finally:
        _drop(conn, scratch)


def _sql_type(series) -> str:
    kind = series.dtype.kind
    if kind == "b" or str(series.dtype) == "boolean":
        return "boolean"
    if kind in "iu" or str(series.dtype).startswith(("Int", "UInt")):
        return "bigint"
    if kind == "f" or str(series.dtype).startswith("Float"):
        return "real" if str(series.dtype) == "float32" else "float8"
    if kind == "M":
        return "timestamptz"
    first = next((v for v in series if v is not None and not (isinstance(v, float) and math.isnan(v))), None)
    if isinstance(first, (bytes, bytearray, memoryview)):
        return "bytea"
    if isinstance(first, bool):
        return "boolean"
    if isinstance(first, int):
        return "bigint"
    if isinstance(first, float):
        return "float8"
    if isinstance(first, datetime):
        return "timestamptz"
    if isinstance(first, (list, tuple)) or hasattr(first, "tolist"):
        inner = next((v for v in first if v is not None), "") if len(first) else ""
        return "real[]" if isinstance(inner, float) or hasattr(inner, "dtype") else "text[]"
    return 'text COLLATE "C"'


@contextmanager
def registered(conn, frames: dict) -> Iterator[None]:
    """Each DataFrame as a temporary table of that name for the duration of the block."""
    made = []
    try:
        for name, frame in frames.items():
            columns = [str(c) for c in frame.columns]
            spec = ", ".join(f"{c} {_sql_type(frame[c])}" for c in columns)
            conn.raw.execute(f"CREATE TEMP TABLE {name} ({spec})")
            made.append(name)
            _copy(conn, name, columns, frame.itertuples(index=False, name=None))
        yield
    finally:
        for name in made:
            _drop(conn, name)


def _drop(conn, table: str) -> None:
    """Drop a scratch table; in a transaction that already failed, its rollback drops it."""
    import psycopg

    if conn.raw.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
        return
    conn.raw.execute(f"DROP TABLE IF EXISTS {table}")
