"""What every record store of the vault shares: the one DuckDB connection, transactions and bulk
inserts; the key of a run version; and how untrusted text is stored."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

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


# How many rows by id (bricks, run names) a held vault remembers per kind before starting over.
MEMO_IDS = 20_000


@dataclass(frozen=True)
class RunVersion:
    run_id: str
    version_id: str


class Database:
    """The vault's one connection, shared by every record store: transactions and bulk inserts.
    `backend` says which engine it is ("duckdb" or "postgresql"); a store that must say a thing
    differently on each asks it, so the difference is written out where it is."""

    def __init__(self, conn):
        self.conn = conn
        self.backend: str = getattr(conn, "backend", "duckdb")
        self._in_transaction = False
        # What was read through a vault a server holds open (vault/warm.py), by key; None when
        # opened the ordinary way. Held open, the vault cannot change, so a read stays true until
        # the hold is let go for a writer (and this memo with it).
        self.memo: dict | None = None
        # On a held vault, what outlives a writer because its key changes with it (a run's name by
        # run version): the store that uses it drops the keys the vault no longer has.
        self.lasting: dict | None = None

    def remembered(self, key, compute):
        """`compute()`, or what it gave before on this held vault. Callers must not change it."""
        memo = self.memo
        if memo is None:
            return compute()
        try:
            return memo[key]
        except KeyError:
            value = memo[key] = compute()
            return value

    def remembered_each(self, key, ids, compute) -> dict:
        """{id: value} for these ids, from `compute(missing ids) -> {id: value}` for those not read
        before on this held vault. An id `compute` leaves out is asked again next time."""
        ids = list(dict.fromkeys(ids))
        memo = self.memo
        if memo is None:
            return compute(ids)
        known = memo.setdefault(key, {})
        missing = [i for i in ids if i not in known]
        if missing:
            if len(known) + len(missing) > MEMO_IDS:
                known.clear()  # bounded: a long-lived reader of a huge vault does not end up holding all of it
            known.update(compute(missing))
        return {i: known[i] for i in ids if i in known}

    @property
    def on_postgres(self) -> bool:
        return self.backend == "postgresql"

    def topic_lock(self, topic_id: str) -> AbstractContextManager[None]:
        """Two writers of one topic take turns (PostgreSQL: a session advisory lock per topic);
        writers of different topics go on at once. DuckDB has one writer at a time anyway."""
        return self.exclusive("nexus-topic:" + topic_id)

    @contextmanager
    def exclusive(self, key: str) -> Iterator[None]:
        """Work only one process does at a time on a PostgreSQL vault (a session advisory lock):
        one topic's writes, or ingestion, whose rows every topic shares."""
        if not self.on_postgres:
            yield
            return
        self.conn.execute("SELECT pg_advisory_lock(hashtextextended(?, 0))", [key])
        try:
            yield
        finally:
            self.conn.execute("SELECT pg_advisory_unlock(hashtextextended(?, 0))", [key])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # Nested use joins the outer transaction: forgetting publishes inside its own.
        if self._in_transaction:
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

    def insert_rows(self, table: str, rows: list[dict], *, conflict: str | None = "DO NOTHING") -> None:
        if not rows:
            return
        if self.on_postgres:
            from nexus_assets.vault.postgres.bulk import insert_rows

            return insert_rows(self.conn, table, rows, conflict=conflict)
        import pandas as pd  # only writers need it; read commands start faster without it

        frame = pd.DataFrame(rows)
        cols = ", ".join(frame.columns)
        on_conflict = f" ON CONFLICT {conflict}" if conflict else ""
        # Through a relation, not `register`: a registered frame stays alive until the transaction
        # commits, so a run's node slices all stayed in memory at once (invariant 12).
        self.conn.from_df(frame).query("_rows", f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _rows{on_conflict}")

    @contextmanager
    def registered(self, **frames) -> Iterator[None]:
        """DataFrames visible to SQL under these names for the duration of the block."""
        if self.on_postgres:
            from nexus_assets.vault.postgres.bulk import registered

            with registered(self.conn, frames):
                yield
            return
        for name, frame in frames.items():
            self.conn.register(name, frame)
        try:
            yield
        finally:
            for name in frames:
                self.conn.unregister(name)


class OpenVault(Protocol):
    """What a record store needs of the vault it is part of: the database (connection,
    transactions, bulk inserts) and, by name, the other phases' stores (`vault.drift`). The vault
    itself is composed above the phases (`nexus_assets.store`); this layer never imports it."""

    conn: Any

    def transaction(self) -> AbstractContextManager[None]: ...

    def insert_rows(self, table: str, rows: list[dict], *, conflict: str | None = ...) -> None: ...

    def registered(self, **frames) -> AbstractContextManager[None]: ...

    def __getattr__(self, store: str) -> Any: ...


class Records:
    """The base of every record store: a phase's tables, over the `Vault`'s one connection. A store
    that needs another's records asks the vault for that store (`self.vault.drift`), never its SQL."""

    def __init__(self, vault: OpenVault):
        self.vault = vault

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        return self.vault.conn

    def transaction(self) -> AbstractContextManager[None]:
        return self.vault.transaction()

    def _insert_df(self, table: str, rows: list[dict], *, conflict: str | None = "DO NOTHING") -> None:
        self.vault.insert_rows(table, rows, conflict=conflict)

    def _registered(self, **frames) -> AbstractContextManager[None]:
        return self.vault.registered(**frames)
