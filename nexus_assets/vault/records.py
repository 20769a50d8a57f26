"""What every record store of the vault shares: the one DuckDB connection, transactions and bulk
inserts; the key of a run version; and how untrusted text is stored."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


import duckdb


def storable_json(value) -> str:
    """JSON text DuckDB can hold. A model may answer with a lone surrogate (valid JSON, never valid
    UTF-8); such a value is written with \\u escapes, which read back to the very same string."""
    text = json.dumps(value, ensure_ascii=False)
    return text if _encodable(text) else json.dumps(value)


def storable_text(text: str | None) -> str | None:
    """Untrusted text as DuckDB can hold it: a lone surrogate becomes its `\\udXXX` escape."""
    if text is None or _encodable(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class RunVersion:
    run_id: str
    version_id: str


class Records:
    """The base of every record store: one DuckDB connection, shared by all the stores of a `Vault`."""

    conn: duckdb.DuckDBPyConnection

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # Nested use joins the outer transaction: forgetting publishes inside its own.
        if getattr(self, "_in_transaction", False):
            yield
            return
        self.conn.execute("BEGIN TRANSACTION")
        self._in_transaction = True
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False
        self.conn.execute("COMMIT")

    def _insert_df(self, table: str, rows: list[dict], *, conflict: str | None = "DO NOTHING") -> None:
        if not rows:
            return
        import pandas as pd  # only writers need it; read commands start faster without it

        frame = pd.DataFrame(rows)
        cols = ", ".join(frame.columns)
        on_conflict = f" ON CONFLICT {conflict}" if conflict else ""
        # Through a relation, not `register`: a registered frame stays alive until the transaction
        # commits, so a run's node slices all stayed in memory at once (invariant 12).
        self.conn.from_df(frame).query("_rows", f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _rows{on_conflict}")

    @contextmanager
    def _registered(self, **frames) -> Iterator[None]:
        """DataFrames visible to SQL under these names for the duration of the block."""
        for name, frame in frames.items():
            self.conn.register(name, frame)
        try:
            yield
        finally:
            for name in frames:
                self.conn.unregister(name)
