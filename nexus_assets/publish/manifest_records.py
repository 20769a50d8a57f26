"""The manifest chain as stored: what the newest manifest lists (its digest, its hash re-checked
inside the database), and the chain read back. `BrickRecords` writes it (publish/records.py).

A manifest's list is stored once per entry, not once per manifest (issue 61): `manifest_entries`
holds each entry with the manifest seq it is listed from (`valid_from`) and the first seq that no
longer lists it (`valid_to`, NULL while the newest manifest still does), so recording a manifest
writes only what changed; manifest #seq lists the entries with `valid_from <= seq < valid_to`, in
manifest order (order_index, brick_id), byte for byte the list its hash was taken over. A list
that order cannot give back (an id or state the vault does not write, two entries alike, entries
out of that order: only a vault edited by hand or an old release holds one) stays whole in
`bricks_json`, as every list was before; the open entries then close, so the newest manifest's
entries are always exactly the open ones."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Sequence

import duckdb

from nexus_assets.core.fingerprint import sha256_hex
from nexus_assets.core.models import Manifest, ManifestEntry, ManifestHead, Tombstone
from nexus_assets.publish.manifest import altered, hash_of_listing
from nexus_assets.resolve.records import visible_entries
from nexus_assets.vault.records import Records

# An entry as its hash reads it (canonical JSON: keys sorted, no spaces), spelled in SQL over the
# columns of `bricks` or `manifest_entries`; exact for the ids and states the vault writes.
ENTRY_JSON = """'{"brick_id":"' || brick_id || '","fingerprint":"' || fingerprint
                || '","order_index":' || order_index || ',"state":"' || state || '"}'"""
# The entries manifest #$seq lists (`manifest_entries`).
LISTED_AT = "topic_id = $topic AND valid_from <= $seq AND (valid_to IS NULL OR valid_to > $seq)"
STATES = ("IMPROVISE", "FORMING", "FINAL")
_HEX_ID = re.compile(r"[0-9a-f]{64}")


def storable_as_entries(entries: Sequence[ManifestEntry]) -> bool:
    """Whether `manifest_entries` gives this list back byte for byte: ids and states as the vault
    writes them (nothing to escape), in manifest order, no brick twice. Migration 27 states the same
    rule on stored text (vault/migrations.py `_entries_of_list`): the vault layer may not import
    publish, and a migration keeps the rule of its day, so a change here is not a change there."""
    keys = [(e.order_index, e.brick_id) for e in entries]
    return (
        all(_HEX_ID.fullmatch(e.brick_id) and _HEX_ID.fullmatch(e.fingerprint) and e.state in STATES for e in entries)
        and all(a < b for a, b in zip(keys, keys[1:]))
        and len({e.brick_id for e in entries}) == len(entries)
    )


@dataclass(frozen=True)
class Listing:
    """A topic's visible bricks in manifest order, as its hash reads the entries (`hash_of_listing`)."""

    canonical: str
    count: int
    digest: str  # its entries_sha256


class ManifestRecords(Records):
    """The `manifests` table read: the newest head and digest, the SQL hash check, whole manifests."""

    def _plain(self) -> str:
        """SQL: the row's ids are hex and its state one a visible brick has (nothing to escape)."""
        hex_ids = (
            "(brick_id || fingerprint) ~ '^[0-9a-f]{128}$'" if self.vault.on_postgres
            else "regexp_full_match(brick_id || fingerprint, '[0-9a-f]{128}')"
        )
        return f"{hex_ids} AND state IN ('IMPROVISE', 'FORMING', 'FINAL') AND order_index IS NOT NULL"

    def listing(self, topic_id: str) -> Listing | None:
        """The published visible bricks in manifest order as their hash reads them (canonical JSON
        entries), built in SQL; None where an id, fingerprint or state is not one this vault writes
        (such a list goes through the Python rule, which escapes whatever it holds)."""
        # list() then array_to_string: an ordered string_agg is several times slower in DuckDB.
        canonical, count, plain = self.conn.execute(
            f"""SELECT coalesce(array_to_string(list({ENTRY_JSON} ORDER BY order_index, brick_id), ','), ''),
                       count(*), coalesce(bool_and({self._plain()}), true)
                FROM bricks WHERE topic_id = ? AND state <> 'SUPERSEDED'""",
            [topic_id],
        ).fetchone()
        return Listing(canonical, count, sha256_hex(canonical)) if plain else None

    def _stored_listing(self, topic_id: str, seq: int) -> str | None:
        """Manifest #seq's list from `manifest_entries` as its hash reads it; None where an entry
        is not one the vault writes (edited by hand): the Python rule then reads it."""
        canonical, plain = self.conn.execute(
            f"""SELECT coalesce(array_to_string(list({ENTRY_JSON} ORDER BY order_index, brick_id), ','), ''),
                       coalesce(bool_and({self._plain()}), true)
                FROM manifest_entries WHERE {LISTED_AT}""",
            {"topic": topic_id, "seq": seq},
        ).fetchone()
        return canonical if plain else None

    def _entries_of(self, topic_id: str, seq: int | None = None) -> dict[int, tuple[ManifestEntry, ...]]:
        """What each manifest of the topic stored as entries lists (only #seq with `seq`), by seq."""
        rows = self.conn.execute(
            f"""SELECT m.seq, e.order_index, e.brick_id, e.fingerprint, e.state
                FROM manifests m JOIN manifest_entries e
                  ON e.topic_id = m.topic_id AND e.valid_from <= m.seq AND (e.valid_to IS NULL OR e.valid_to > m.seq)
                WHERE m.topic_id = $topic AND m.bricks_json IS NULL {'' if seq is None else 'AND m.seq = $seq'}
                ORDER BY m.seq, e.order_index, e.brick_id""",
            {"topic": topic_id} if seq is None else {"topic": topic_id, "seq": seq},
        ).fetchall()
        listed: dict[int, list[ManifestEntry]] = {}
        for n, order_index, brick_id, fingerprint, state in rows:
            listed.setdefault(n, []).append(ManifestEntry(order_index=order_index, brick_id=brick_id, fingerprint=fingerprint, state=state))
        return {n: tuple(entries) for n, entries in listed.items()}

    def _listed(self, seq: int, bricks_json: str | None, stored: dict[int, tuple[ManifestEntry, ...]]) -> tuple[ManifestEntry, ...]:
        if bricks_json is not None:
            return tuple(ManifestEntry(**e) for e in json.loads(bricks_json))
        return stored.get(seq, ())

    def listed_in(self, brick_ids: Sequence[str], topic_id: str | None = None) -> list[tuple[str, int, str, bool, dict[str, int]]]:
        """Every recorded manifest (of one topic, with `topic_id`) listing any of these bricks:
        (topic, seq, manifest hash, sealed, {listed brick: its order_index}), by topic and seq."""
        wanted = set(brick_ids)
        where = "AND m.topic_id = $topic" if topic_id is not None else ""
        params: dict = {"ids": sorted(wanted)} | ({"topic": topic_id} if topic_id is not None else {})
        found: dict[tuple[str, int], tuple[str, bool, dict[str, int]]] = {}
        for t, n, h, sealed, listed in self.conn.execute(
            f"SELECT topic_id, seq, manifest_hash, sealed, bricks_json FROM manifests m WHERE bricks_json IS NOT NULL {where}",
            {"topic": topic_id} if topic_id is not None else None,
        ).fetchall():
            places = {e["brick_id"]: e["order_index"] for e in json.loads(listed) if e["brick_id"] in wanted}
            if places:
                found[(t, n)] = (h, sealed, places)
        if wanted:
            for t, n, h, sealed, brick_id, order_index in self.conn.execute(
                f"""SELECT m.topic_id, m.seq, m.manifest_hash, m.sealed, e.brick_id, e.order_index
                    FROM manifests m JOIN manifest_entries e
                      ON e.topic_id = m.topic_id AND e.valid_from <= m.seq AND (e.valid_to IS NULL OR e.valid_to > m.seq)
                    WHERE m.bricks_json IS NULL AND e.brick_id IN (SELECT unnest($ids)) {where}""",
                params,
            ).fetchall():
                found.setdefault((t, n), (h, sealed, {}))[2][brick_id] = order_index
        return [(t, n, h, sealed, places) for (t, n), (h, sealed, places) in sorted(found.items())]

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
        # The newest manifest in one read: whether its list is stored as entries (bricks_json NULL).
        newest = self.conn.execute(
            """SELECT manifest_hash, previous_hash, tombstone_json IS NULL, seq, bricks_json IS NULL FROM manifests
               WHERE topic_id = ? ORDER BY seq DESC LIMIT 1""",
            [topic_id],
        ).fetchone()
        if newest is not None and newest[4]:
            stored, previous_hash, untombstoned, at, _ = newest
            canonical = self._stored_listing(topic_id, at) if untombstoned else None
            return None if canonical is None else altered(seq, topic_id, stored, hash_of_listing(topic_id, previous_hash, canonical))
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
            "SELECT seq, manifest_hash, previous_hash, bricks_json, tombstone_json FROM manifests WHERE topic_id = ? ORDER BY seq",
            [topic_id],
        ).fetchall()
        stored = self._entries_of(topic_id) if any(b is None for _, _, _, b, _ in rows) else {}
        return [
            Manifest(
                topic_id=topic_id,
                manifest_hash=h,
                previous_hash=p,
                bricks=self._listed(n, b, stored),
                tombstone=Tombstone.model_validate_json(t) if t else None,
            )
            for n, h, p, b, t in rows
        ]

    def latest_manifest(self, topic_id: str, *, sealed: bool = False) -> Manifest | None:
        """The topic's newest manifest; with `sealed`, the newest one written by a seal."""
        row = self.conn.execute(
            f"""SELECT seq, manifest_hash, previous_hash, bricks_json, tombstone_json FROM manifests
                WHERE topic_id = ? {'AND sealed' if sealed else ''} ORDER BY seq DESC LIMIT 1""",
            [topic_id],
        ).fetchone()
        if row is None:
            return None
        n, h, p, b, t = row
        return Manifest(
            topic_id=topic_id,
            manifest_hash=h,
            previous_hash=p,
            bricks=self._listed(n, b, self._entries_of(topic_id, n) if b is None else {}),
            tombstone=Tombstone.model_validate_json(t) if t else None,
        )
