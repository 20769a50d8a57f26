"""The manifest chain as stored: what the newest manifest lists (its digest, its hash re-checked
inside the database), and the chain read back. `BrickRecords` writes it (publish/records.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

from nexus_assets.core.fingerprint import sha256_hex
from nexus_assets.core.models import Manifest, ManifestEntry, ManifestHead, Tombstone
from nexus_assets.publish.manifest import altered, hash_of_listing
from nexus_assets.resolve.records import visible_entries
from nexus_assets.vault.records import Records


@dataclass(frozen=True)
class Listing:
    """A topic's visible bricks in manifest order, as its hash reads the entries (`hash_of_listing`)."""

    canonical: str
    count: int
    digest: str  # its entries_sha256


class ManifestRecords(Records):
    """The `manifests` table read: the newest head and digest, the SQL hash check, whole manifests."""

    def listing(self, topic_id: str) -> Listing | None:
        """The published visible bricks in manifest order as their hash reads them (canonical JSON
        entries), built in SQL; None where an id, fingerprint or state is not one this vault writes
        (such a list goes through the Python rule, which escapes whatever it holds)."""
        # list() then array_to_string: an ordered string_agg is several times slower in DuckDB.
        hex_ids = (
            "(brick_id || fingerprint) ~ '^[0-9a-f]{128}$'" if self.vault.on_postgres
            else "regexp_full_match(brick_id || fingerprint, '[0-9a-f]{128}')"
        )
        canonical, count, plain = self.conn.execute(
            """SELECT coalesce(array_to_string(list('{"brick_id":"' || brick_id || '","fingerprint":"' || fingerprint
                                                    || '","order_index":' || order_index || ',"state":"' || state || '"}'
                                                    ORDER BY order_index, brick_id), ','), ''),
                      count(*),
                      coalesce(bool_and({hex_ids}
                                        AND state IN ('IMPROVISE', 'FORMING', 'FINAL') AND order_index IS NOT NULL), true)
               FROM bricks WHERE topic_id = ? AND state <> 'SUPERSEDED'""".replace("{hex_ids}", hex_ids),
            [topic_id],
        ).fetchone()
        return Listing(canonical, count, sha256_hex(canonical)) if plain else None

    def _latest(self, topic_id: str) -> tuple[ManifestHead, bool, str | None] | None:
        """The newest manifest's head, whether it carries a tombstone, and its `entries_sha256`."""
        row = self.conn.execute(
            """SELECT manifest_hash, previous_hash, entry_count, tombstone_json IS NOT NULL, entries_sha256, seq
               FROM manifests WHERE topic_id = ? ORDER BY seq DESC LIMIT 1""",
            [topic_id],
        ).fetchone()
        if row is None:
            return None
        count = row[2]
        if count is None:  # only a list the migration could not read; counted the slow way
            count = self.conn.execute(
                "SELECT json_array_length(bricks_json) FROM manifests WHERE topic_id = ? AND seq = ?", [topic_id, row[5]]
            ).fetchone()[0]
        return ManifestHead(row[0], row[1], count), row[3], row[4]

    def _lists_latest(self, topic_id: str, listing: Listing, latest: tuple[ManifestHead, bool, str | None] | None) -> bool:
        """Whether the newest manifest lists exactly these entries, known without reading its list:
        by its entries digest (or, with none, its own hash; one with a tombstone and no digest is
        taken as different, and the next manifest is written)."""
        if latest is None:
            return False
        head, tombstoned, digest = latest
        if digest is not None:
            return digest == listing.digest
        return not tombstoned and hash_of_listing(topic_id, head.previous_hash, listing.canonical) == head.manifest_hash

    def latest_hash_problems(self, topic_id: str, seq: int) -> list[str] | None:
        """`hash_problems` of the newest manifest (#seq), re-hashed from its stored list inside
        DuckDB; None where SQL cannot judge it (a tombstone, or a list holding anything but what
        the vault writes): then the caller parses it and asks the Python rule.

        A list stored as the vault now writes it (`[` + its canonical entries + `]`) is hashed as
        it is stored: equal hashes prove the stored text is the hashed one, so its entries too."""
        row = self.conn.execute(
            """SELECT manifest_hash, previous_hash, tombstone_json IS NULL, bricks_json FROM manifests
               WHERE topic_id = ? AND (bricks_json = '[]' OR starts_with(bricks_json, '[{"brick_id":"'))
                 AND seq = (SELECT max(seq) FROM manifests WHERE topic_id = ?)""",
            [topic_id, topic_id],
        ).fetchone()
        if row is not None and row[2]:
            stored, previous_hash, _, listed = row
            return altered(seq, topic_id, stored, hash_of_listing(topic_id, previous_hash, listed[1:-1]))
        if self.vault.on_postgres:
            return None  # the Python rule judges it (DuckDB's list lambdas have no PostgreSQL spelling)
        try:
            row = self.conn.execute(
                """WITH m AS (
                       SELECT manifest_hash, previous_hash, tombstone_json,
                              from_json(bricks_json, '[{"order_index":"BIGINT","brick_id":"VARCHAR","fingerprint":"VARCHAR","state":"VARCHAR"}]') AS entries
                       FROM manifests WHERE topic_id = ? ORDER BY seq DESC LIMIT 1)
                   SELECT manifest_hash, previous_hash, tombstone_json IS NULL
                          AND coalesce(list_bool_and(list_transform(entries, lambda e:
                                regexp_full_match(e.brick_id, '[0-9a-f]{64}') AND regexp_full_match(e.fingerprint, '[0-9a-f]{64}')
                                AND e.state IN ('IMPROVISE', 'FORMING', 'FINAL') AND e.order_index IS NOT NULL)), true),
                          array_to_string(list_transform(entries, lambda e:
                                '{"brick_id":"' || e.brick_id || '","fingerprint":"' || e.fingerprint
                                || '","order_index":' || e.order_index || ',"state":"' || e.state || '"}'), ',')
                   FROM m""",
                [topic_id],
            ).fetchone()
        except duckdb.Error:
            return None
        if row is None or not row[2]:
            return None
        stored, previous_hash, _, canonical = row
        return altered(seq, topic_id, stored, hash_of_listing(topic_id, previous_hash, canonical or ""))

    def latest_head(self, topic_id: str) -> ManifestHead | None:
        """The topic's newest manifest, without parsing its brick list."""
        latest = self._latest(topic_id)
        return latest[0] if latest else None

    def manifest_entries(self, topic_id: str) -> tuple[ManifestEntry, ...]:
        """The published visible bricks in manifest order, read as entries only."""
        return visible_entries(self.conn, "bricks", topic_id)

    def manifests(self, topic_id: str) -> list[Manifest]:
        rows = self.conn.execute(
            "SELECT manifest_hash, previous_hash, bricks_json, tombstone_json FROM manifests WHERE topic_id = ? ORDER BY seq",
            [topic_id],
        ).fetchall()
        return [
            Manifest(
                topic_id=topic_id,
                manifest_hash=h,
                previous_hash=p,
                bricks=tuple(ManifestEntry(**e) for e in json.loads(b)),
                tombstone=Tombstone.model_validate_json(t) if t else None,
            )
            for h, p, b, t in rows
        ]

    def latest_manifest(self, topic_id: str, *, sealed: bool = False) -> Manifest | None:
        """The topic's newest manifest; with `sealed`, the newest one written by a seal."""
        row = self.conn.execute(
            f"""SELECT manifest_hash, previous_hash, bricks_json, tombstone_json FROM manifests
                WHERE topic_id = ? {'AND sealed' if sealed else ''} ORDER BY seq DESC LIMIT 1""",
            [topic_id],
        ).fetchone()
        if row is None:
            return None
        return Manifest(
            topic_id=topic_id,
            manifest_hash=row[0],
            previous_hash=row[1],
            bricks=tuple(ManifestEntry(**e) for e in json.loads(row[2])),
            tombstone=Tombstone.model_validate_json(row[3]) if row[3] else None,
        )
