"""The vault opened for reading what it lists: topics, brick counts, manifest hashes, recorded
sources. Plain rows and no models, so `nexus topics` starts without loading pydantic; `Vault`
builds on it."""

from __future__ import annotations

import contextlib
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Mapping, Self

import duckdb

from nexus_assets.vault.connection import (
    VaultUnusable,
    connect,
    writer_intent,
)
from nexus_assets.vault import warm
from nexus_assets.vault.address import parse_address
from nexus_assets.vault.migrations import pending, upgrade
from nexus_assets.vault.records import Database
from nexus_assets.vault.sources import recorded_path, vault_folder


class BaseCatalog(Database):
    """One connection to the vault (DuckDB's, or a pooled PostgreSQL one), configured and migrated:
    the base of `nexus_assets.catalog.Catalog` and `nexus_assets.store.Vault`, which add `backfills`."""

    # The upgrades that need a phase's code, by name: handed in by the classes composed above the
    # phases (`nexus_assets.catalog.Catalog`, `nexus_assets.store.Vault`).
    backfills: ClassVar[Mapping[str, Callable]] = {}

    def __init__(self, conn, *, migrate: bool = True):
        super().__init__(conn)
        if self.on_postgres:
            if migrate:
                from nexus_assets.vault.postgres.migrations import upgrade as upgrade_postgres

                upgrade_postgres(conn)
            return
        # DuckDB draws a progress bar on stdout for long queries; it would corrupt `--json` output.
        # (Its memory is bounded where the connection is made: vault.connection.connect.)
        conn.execute("SET enable_progress_bar = false")
        if migrate:
            upgrade(conn, type(self).backfills)

    @classmethod
    @contextmanager
    def open(cls, db_path: str | Path, *, read_only: bool = False, unfinished_ok: bool = False) -> Iterator[Self]:
        """The vault at this address (a path or `duckdb:///path`, or `postgresql://…`). A vault an
        unfinished `nexus vault copy` left is refused (only a copy opens it: `unfinished_ok`)."""
        with cls._open(db_path, read_only=read_only) as vault:
            if not unfinished_ok and (detail := vault.unfinished_copy()):
                raise VaultUnusable(
                    f"vault {vault.address.shown} is not usable: {detail}; copy it again with `nexus vault copy`, "
                    "or use the vault it was copied from"
                )
            yield vault

    def unfinished_copy(self) -> str | None:
        """What an unfinished copy into this vault wrote of itself, or None."""
        return self.remembered("unfinished_copy", self._unfinished_copy)

    def _unfinished_copy(self) -> str | None:
        try:
            row = self.conn.execute("SELECT detail FROM vault_marks WHERE mark = 'unfinished_copy'").fetchone()
        except duckdb.CatalogException:
            return None  # a vault from before migration 22 (opened without migrating) has no marks
        return row[0] if row else None

    @classmethod
    @contextmanager
    def _open(cls, db_path: str | Path, *, read_only: bool = False) -> Iterator[Self]:
        address = parse_address(db_path)
        if address.is_postgres:
            from nexus_assets.vault.postgres.connection import connection

            with connection(address.target, pool_size=address.options.pool_size) as conn:
                # A new database gets its tables even from a command that only reads (upgrade
                # asks once whether anything is pending).
                vault = cls(conn)
                if read_only:
                    conn.execute("SET default_transaction_read_only = on")
                vault.address = address
                yield vault
            return
        db_path = address.path
        if read_only and (held := warm.holding(address)) is not None:
            # A server holds this vault open (vault/warm.py): read on its connection.
            with held.reading(cls) as vault:
                if vault is not None:
                    vault.address = address
                    yield vault
                    return
        with contextlib.ExitStack() as stack:
            if not read_only:
                stack.enter_context(writer_intent(db_path))
            conn = connect(db_path, read_only=read_only, memory=address.options.memory)
            if read_only and pending(conn):
                # A vault from an earlier release is upgraded once, even by a command that only reads.
                conn.close()
                with cls._open(address):
                    pass
                conn = connect(db_path, read_only=True, memory=address.options.memory)
            try:
                vault = cls(conn, migrate=not read_only)
                vault.address = address
                yield vault
            finally:
                conn.close()

    def recorded_sources(self) -> dict[str, str]:
        """kind (runs_dir / topics_dir) -> the folder a sync last read, as a path to read now."""
        folder = vault_folder(self.conn)
        return {kind: str(recorded_path(path, folder)) for kind, path in self.conn.execute("SELECT kind, path FROM vault_sources").fetchall()}

    def topic_state(self, topic_id: str) -> str | None:
        if self.memo is not None:
            return self.remembered("topic_states", lambda: dict(self.conn.execute("SELECT topic_id, state FROM topics").fetchall())).get(topic_id)
        row = self.conn.execute("SELECT state FROM topics WHERE topic_id = ?", [topic_id]).fetchone()
        return row[0] if row else None

    def topic_summaries(self) -> list[dict]:
        """topic_id, display_name, state and ordering_rule of every recorded topic, from their own
        columns: listing topics does not validate whole definitions."""
        rows = self.remembered(
            "topic_summaries",
            lambda: self.conn.execute(
                "SELECT topic_id, display_name, state, ordering_rule, definition_json FROM topics ORDER BY topic_id"
            ).fetchall(),
        )
        return [
            {**dict(zip(("topic_id", "display_name", "state", "ordering_rule"), r[:4])), "examples": _example_counts(r[4])}
            for r in rows
        ]

    def brick_counts(self) -> dict[str, dict[str, int]]:
        rows = self.remembered(
            "brick_counts",
            lambda: self.conn.execute(
                "SELECT topic_id, state, count(*) FROM bricks GROUP BY topic_id, state ORDER BY topic_id, state"
            ).fetchall(),
        )
        counts: dict[str, dict[str, int]] = {}
        for topic_id, state, n in rows:
            counts.setdefault(topic_id, {})[state] = n
        return counts

    def latest_manifest_hashes(self) -> dict[str, str]:
        """Each topic's newest manifest hash, without reading the manifests' brick lists."""
        return dict(
            self.remembered(
                "latest_manifest_hashes",
                lambda: self.conn.execute("SELECT topic_id, arg_max(manifest_hash, seq) FROM manifests GROUP BY topic_id").fetchall(),
            )
        )


def _example_counts(definition_json: str | None) -> dict[str, int]:
    """How many keep and drop examples a person gave the topic (docs/inputs.md `examples`)."""
    import json

    try:
        examples = (json.loads(definition_json or "{}") or {}).get("examples") or {}
    except ValueError:
        examples = {}
    return {"keep": len(examples.get("keep") or ()), "drop": len(examples.get("drop") or ())}
