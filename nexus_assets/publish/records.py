"""Published bricks, their sources, the manifest chain and the record of each sync: what the
publish phase writes in one transaction, and what every read command lists."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Iterable, Sequence

from nexus_assets.core.models import (
    Brick,
    Manifest,
    ManifestEntry,
    ManifestHead,
    SourceAddress,
    trusted,
)
from nexus_assets.publish.immutability import FinalBrickChanged, final_brick_changes
from nexus_assets.core.listing import canonical_entries, entries_sha256
from nexus_assets.publish.manifest import hash_of_listing
from nexus_assets.publish.manifest_records import Listing, ManifestRecords, storable_as_entries
from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records


class BrickRecords(ManifestRecords, Records):
    """The `bricks`, `brick_sources`, `manifests` and `syncs` tables, written by publishing (the
    manifest chain's reads are `ManifestRecords`)."""

    def record_unchanged_sync(self, topic_id: str, *, dagster_run_id: str | None, inputs_digest: str) -> None:
        self._record_sync(topic_id, dagster_run_id, "unchanged", now(), inputs_digest)

    def _record_sync(self, topic_id: str, dagster_run_id: str | None, detail: str | None, at: datetime, inputs_digest: str | None) -> None:
        """A successful sync of the topic, with the hash of its newest manifest (looked up in SQL:
        parsing a large manifest only for its hash would cost more than the rest of a no-op sync)."""
        self.conn.execute(
            """INSERT INTO syncs (topic_id, dagster_run_id, status, manifest_hash, detail, finished_at, inputs_digest)
               VALUES ($topic, $run, 'ok',
                       (SELECT manifest_hash FROM manifests WHERE topic_id = $topic ORDER BY seq DESC LIMIT 1),
                       $detail, $at, $digest)""",
            {"topic": topic_id, "run": dagster_run_id, "detail": detail, "at": at, "digest": inputs_digest},
        )

    def contents(self, brick_ids: list[str]) -> dict[str, str]:
        """Each brick's text, by id (the ids that exist)."""
        if not brick_ids:
            return {}
        return dict(self.conn.execute(
            "SELECT brick_id, content FROM bricks WHERE brick_id IN (SELECT unnest(?))", [brick_ids]
        ).fetchall())

    def tool_output_bricks(self, brick_ids: list[str]) -> set[str]:
        """The bricks whose every source is a tool call or tool output (docs/inputs.md node types)."""
        if not brick_ids:
            return set()
        rows = self.conn.execute(
            "SELECT brick_id FROM brick_sources WHERE brick_id IN (SELECT unnest(?)) GROUP BY brick_id "
            "HAVING bool_and(coalesce(node_type IN ('tool_call', 'tool_message'), false))",
            [brick_ids],
        ).fetchall()
        return {r[0] for r in rows}

    def select(
        self,
        topic_id: str | None = None,
        *,
        brick_ids: Iterable[str] | None = None,
        state: str | None = None,
        visible_only: bool = False,
        limit: int | None = None,
        staged: bool = False,
    ) -> list[Brick]:
        """The topic's bricks in manifest order; `staged`: those waiting in the stage instead."""
        if brick_ids is not None and self.vault.memo is not None and (topic_id, state, visible_only, limit, staged) == (None, None, False, None, False):
            # On a held vault (vault/warm.py) a brick read once is not read again: recall asks for a
            # few dozen by id per query.
            found = self.vault.remembered_each(
                "bricks", brick_ids, lambda missing: {b.brick_id: b for b in self._select(brick_ids=missing)}
            ).values()
            return sorted(found, key=lambda b: (b.topic_id, b.order_index is None, b.order_index or 0, b.brick_id))
        return self._select(topic_id, brick_ids=brick_ids, state=state, visible_only=visible_only, limit=limit, staged=staged)

    def _select(
        self,
        topic_id: str | None = None,
        *,
        brick_ids: Iterable[str] | None = None,
        state: str | None = None,
        visible_only: bool = False,
        limit: int | None = None,
        staged: bool = False,
    ) -> list[Brick]:
        if staged:
            table, sources = "staged_bricks", "staged_brick_sources s USING (topic_id, brick_id)"
        else:
            table, sources = "bricks", "brick_sources s USING (brick_id)"
        where, params = [], []
        if visible_only:
            where.append("b.state <> 'SUPERSEDED'")
        if state is not None:
            where.append("b.state = ?")
            params.append(state)
        if topic_id is not None:
            where.append("b.topic_id = ?")
            params.append(topic_id)
        if brick_ids is not None:
            where.append("b.brick_id IN (SELECT unnest(?))")
            params.append(list(brick_ids))
        if limit is not None:
            # The first bricks are chosen before their sources are gathered, not after for all of them.
            where.append(
                f"""b.brick_id IN (SELECT b.brick_id FROM {table} b WHERE {' AND '.join(where) or 'true'}
                    ORDER BY b.topic_id, b.order_index NULLS LAST, b.brick_id LIMIT {int(limit)})"""
            )
            params = params + params
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self.conn.execute(
            f"""SELECT b.brick_id, b.topic_id, b.content, b.fingerprint, b.state, b.order_index,
                       b.superseded_by, b.stale,
                       {self._sources_list(staged)}
                FROM {table} b LEFT JOIN {sources}
                LEFT JOIN source_status st ON st.run_id = s.run_id AND st.json_path = s.json_path
                     AND st.node_checksum = s.node_checksum
                {clause}
                GROUP BY b.brick_id, b.topic_id, b.content, b.fingerprint, b.state, b.order_index, b.superseded_by, b.stale
                ORDER BY b.topic_id, b.order_index NULLS LAST, b.brick_id
                {'LIMIT ' + str(int(limit)) if limit is not None else ''}""",
            params,
        ).fetchall()
        return [
            trusted(
                Brick,
                brick_id=r[0],
                topic_id=r[1],
                content=r[2],
                fingerprint=r[3],
                state=r[4],
                order_index=r[5],
                superseded_by=r[6],
                stale=r[7],
                sources=tuple(
                    trusted(SourceAddress, **{**s, "branch": s["branch"] or "current"}) for s in r[8] if s["run_id"] is not None
                ),
            )
            for r in rows
        ]

    def publish(
        self, topic_id: str, bricks: Sequence[Brick], manifest: Manifest | None, *, inputs_digest: str | None = None, **options
    ) -> None:
        """Stage these bricks and publish them at once; `options` as for `publish_staged`."""
        with self.transaction():
            self.vault.stage.write(topic_id, bricks, inputs_digest=inputs_digest)
            self.publish_staged(topic_id, manifest, inputs_digest=inputs_digest, **options)

    def publish_staged(
        self,
        topic_id: str,
        manifest: Manifest | None,
        *,
        dagster_run_id: str | None,
        sealed: bool = False,
        inputs_digest: str | None = None,
        forgetting: bool = False,
    ) -> None:
        """Write a topic's staged bricks and (when the list changed) its next manifest, atomically,
        and empty the stage. `forgetting`: the one exception to FINAL immutability (invariant 15),
        under a tombstone."""
        self._refuse_final_changes(topic_id, forgetting)
        stamp = now()
        with self.transaction():
            # The manifest row goes first: DuckDB needs several copies of its one large brick list
            # while inserting it, and does best before the brick writes below fill its memory.
            if manifest is not None:
                self._insert_manifest(topic_id, manifest, sealed, dagster_run_id, stamp)
            self._apply_stage(topic_id, stamp)
            self._finish(topic_id, dagster_run_id, stamp, inputs_digest)

    def publish_changes(
        self,
        topic_id: str,
        decide: Callable[[tuple[ManifestEntry, ...]], Manifest | None],
        *,
        dagster_run_id: str | None,
        inputs_digest: str | None = None,
    ) -> tuple[ManifestHead | None, bool]:
        """Publish a partial stage (an incremental resolution): write the changed bricks, re-rank
        the topic from its kept keys, and record the manifest the visible bricks now call for, all
        in one transaction. Returns (the topic's current manifest, whether it is a new one).

        The list is built, compared with the chain and hashed inside DuckDB (`listing`,
        `hash_of_listing`), so the cost does not grow with a Python object per brick; `decide` (the
        rule on entries) is the fallback where the stored ids are not what the vault writes."""
        self._refuse_final_changes(topic_id, False)
        stamp = now()
        with self.transaction():
            low = self._lowest_moved_key(topic_id)
            self._apply_stage(topic_id, stamp)
            self._rank(topic_id, low)
            listing = self.listing(topic_id)
            latest = self._latest(topic_id)
            if listing is None:
                manifest = decide(self.manifest_entries(topic_id))
                head = ManifestHead.of(manifest) if manifest is not None else None
                if manifest is not None:
                    self._insert_manifest(topic_id, manifest, False, dagster_run_id, stamp)
            elif self._lists_latest(topic_id, listing, latest):
                head = None
            else:
                earlier = self.vault.history.earlier_manifest_head(topic_id, listing.digest) if latest is not None else None
                if earlier is None:
                    previous_hash = latest[0].manifest_hash if latest is not None else None
                    earlier = (hash_of_listing(topic_id, previous_hash, listing.canonical), previous_hash)
                head = ManifestHead(earlier[0], earlier[1], listing.count)
                self._insert_listing(topic_id, head, listing, dagster_run_id, stamp)
            self._finish(topic_id, dagster_run_id, stamp, inputs_digest)
        return (head or (latest[0] if latest else None)), head is not None

    def _sources_list(self, staged: bool = False) -> str:
        """A brick's sources as one list of records (DuckDB: structs; PostgreSQL: JSON objects). A
        staged source has no speaker yet: publishing fills it from the nodes."""
        speaker = "CAST(NULL AS TEXT)" if staged else "s.speaker"
        if self.vault.on_postgres:
            return """json_agg(json_build_object('run_id', s.run_id, 'json_path', s.json_path, 'start', s.start_offset,
                                      'end', s.end_offset, 'node_checksum', s.node_checksum, 'node_type', s.node_type,
                                      'branch', s.branch, 'stale', coalesce(st.drifted, false), 'speaker', """ + speaker + """)
                            ORDER BY s.seq)"""
        return """list(struct_pack(run_id := s.run_id, json_path := s.json_path, start := s.start_offset,
                                        "end" := s.end_offset, node_checksum := s.node_checksum,
                                        node_type := s.node_type,
                                        branch := s.branch,
                                        stale := coalesce(st.drifted, false),
                                        speaker := """ + speaker + """) ORDER BY s.seq)"""

    def _insert_listing(self, topic_id: str, head: ManifestHead, listing: Listing, dagster_run_id: str | None, stamp: datetime) -> None:
        """A manifest listing the topic's visible published bricks (`listing` read them): its head
        row, and of its list only the entries that changed (manifest_records.py)."""
        seq = self._next_seq(topic_id)
        self.conn.execute(
            """INSERT INTO manifests (topic_id, seq, manifest_hash, previous_hash, bricks_json, sealed, dagster_run_id, created_at,
                                      entries_sha256, entry_count)
               VALUES ($topic, $seq, $hash, $previous, NULL, false, $run, $at, $digest, $count)""",
            {"topic": topic_id, "seq": seq, "hash": head.manifest_hash, "previous": head.previous_hash,
             "run": dagster_run_id, "at": stamp, "digest": listing.digest, "count": head.bricks},
        )
        same = """e.brick_id = b.brick_id AND e.fingerprint = b.fingerprint AND e.order_index = b.order_index AND e.state = b.state"""
        self.conn.execute(
            f"""UPDATE manifest_entries SET valid_to = $seq
                WHERE topic_id = $topic AND valid_to IS NULL
                  AND NOT EXISTS (SELECT 1 FROM bricks b WHERE b.topic_id = $topic AND b.state <> 'SUPERSEDED'
                                  AND {same.replace('e.', 'manifest_entries.')})""",
            {"topic": topic_id, "seq": seq},
        )
        self.conn.execute(
            f"""INSERT INTO manifest_entries (topic_id, brick_id, fingerprint, order_index, state, valid_from, valid_to)
                SELECT $topic, brick_id, fingerprint, order_index, state, $seq, NULL FROM bricks b
                WHERE b.topic_id = $topic AND b.state <> 'SUPERSEDED'
                  AND NOT EXISTS (SELECT 1 FROM manifest_entries e WHERE e.topic_id = $topic AND e.valid_to IS NULL AND {same})""",
            {"topic": topic_id, "seq": seq},
        )

    def _next_seq(self, topic_id: str) -> int:
        return self.conn.execute("SELECT coalesce(max(seq) + 1, 0) FROM manifests WHERE topic_id = ?", [topic_id]).fetchone()[0]

    def _advance_entries(self, topic_id: str, seq: int, entries: tuple[ManifestEntry, ...] | None) -> None:
        """Manifest #seq lists `entries` (None: its list is stored whole, and no entry stays open):
        the open entries it no longer lists close at seq, the new ones open there."""
        if entries is None:
            self.conn.execute(
                "UPDATE manifest_entries SET valid_to = ? WHERE topic_id = ? AND valid_to IS NULL", [seq, topic_id]
            )
            return
        listed = {(e.brick_id, e.fingerprint, e.order_index, e.state) for e in entries}
        open_ = set(self.conn.execute(
            "SELECT brick_id, fingerprint, order_index, state FROM manifest_entries WHERE topic_id = ? AND valid_to IS NULL",
            [topic_id],
        ).fetchall())
        gone = sorted(b for b, *_ in open_ - listed)
        if gone:
            # Closed by brick id: an entry of the same brick that stays listed closes too, and the
            # open entries are read again, so whatever was open the new list opens exactly.
            self.conn.execute(
                "UPDATE manifest_entries SET valid_to = ? WHERE topic_id = ? AND valid_to IS NULL AND brick_id IN (SELECT unnest(?))",
                [seq, topic_id, gone],
            )
            open_ = set(self.conn.execute(
                "SELECT brick_id, fingerprint, order_index, state FROM manifest_entries WHERE topic_id = ? AND valid_to IS NULL",
                [topic_id],
            ).fetchall())
        self._insert_df(
            "manifest_entries",
            [{"topic_id": topic_id, "brick_id": b, "fingerprint": f, "order_index": o, "state": st, "valid_from": seq, "valid_to": None}
             for b, f, o, st in sorted(listed - open_, key=lambda e: (e[2], e[0]))],
            conflict=None,
        )

    def _refuse_final_changes(self, topic_id: str, forgetting: bool) -> None:
        # Only FINAL bricks and their staged successors are read back whole (immutability is judged
        # on them); everything else is compared and copied inside DuckDB.
        final = {b.brick_id: b for b in self.select(topic_id, state="FINAL")}
        incoming = self.select(topic_id, brick_ids=final, staged=True) if final else []
        refused = [] if forgetting else final_brick_changes(final, incoming)
        if refused:
            raise FinalBrickChanged(
                f"refusing to publish {topic_id!r}: FINAL bricks are immutable; corrections arrive as new bricks "
                f"in a new topic. {'; '.join(refused[:10])}"
            )

    def _insert_manifest(self, topic_id: str, manifest: Manifest, sealed: bool, dagster_run_id: str | None, stamp: datetime) -> None:
        seq = self._next_seq(topic_id)
        as_entries = storable_as_entries(manifest.bricks)
        self.conn.execute(
            """INSERT INTO manifests (topic_id, seq, manifest_hash, previous_hash, bricks_json, sealed,
                                      dagster_run_id, created_at, tombstone_json, entries_sha256, entry_count)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                topic_id,
                seq,
                manifest.manifest_hash,
                manifest.previous_hash,
                None if as_entries else f"[{canonical_entries(manifest.bricks)}]",
                sealed,
                dagster_run_id,
                stamp,
                manifest.tombstone.model_dump_json() if manifest.tombstone else None,
                entries_sha256(manifest.bricks),
                len(manifest.bricks),
            ],
        )
        self._advance_entries(topic_id, seq, manifest.bricks if as_entries else None)

    def _apply_stage(self, topic_id: str, stamp: datetime) -> None:
        """The staged bricks written over the published ones (new ones inserted, changed ones
        updated, their sources rewritten where they changed)."""
        address = "run_id, json_path, start_offset, end_offset, node_checksum"
        staged_bricks = "(SELECT * FROM staged_bricks WHERE topic_id = $topic)"
        staged_sources = "(SELECT * FROM staged_brick_sources WHERE topic_id = $topic)"
        self.conn.execute(
            f"""INSERT INTO bricks (brick_id, topic_id, content, fingerprint, state, order_index, superseded_by, stale,
                                    first_seen, updated_at, first_key, rank_key)
                SELECT brick_id, topic_id, content, fingerprint, state, order_index, superseded_by, stale, $stamp, $stamp,
                       first_key, rank_key
                FROM {staged_bricks} sb WHERE brick_id NOT IN (SELECT brick_id FROM bricks WHERE topic_id = $topic)""",
            {"topic": topic_id, "stamp": stamp},
        )
        self.conn.execute(
            # updated_at moves when what a brick says or is moves, not its place alone (a brick
            # superseded early in a topic shifts every later one; the search index follows updated_at).
            f"""UPDATE bricks SET state = n.state, order_index = n.order_index, superseded_by = n.superseded_by,
                                  stale = n.stale, content = n.content,
                                  updated_at = CASE WHEN (bricks.state, bricks.superseded_by, bricks.stale, bricks.content)
                                                         IS DISTINCT FROM (n.state, n.superseded_by, n.stale, n.content)
                                               THEN $stamp ELSE bricks.updated_at END
                FROM {staged_bricks} n
                WHERE bricks.brick_id = n.brick_id AND bricks.topic_id = $topic
                  AND (bricks.state, bricks.order_index, bricks.superseded_by, bricks.stale, bricks.content)
                      IS DISTINCT FROM (n.state, n.order_index, n.superseded_by, n.stale, n.content)""",
            {"topic": topic_id, "stamp": stamp},
        )
        # The keys are not part of a brick as published (updated_at does not move for them).
        self.conn.execute(
            f"""UPDATE bricks SET first_key = n.first_key, rank_key = n.rank_key
                FROM {staged_bricks} n
                WHERE bricks.brick_id = n.brick_id AND bricks.topic_id = $topic
                  AND (bricks.first_key, bricks.rank_key) IS DISTINCT FROM (n.first_key, n.rank_key)""",
            {"topic": topic_id},
        )
        # A brick whose sources changed, or only their order, gets them written again; canonical
        # first: a source that arrived later, or an older version of its node, can take seq 0,
        # so seq is refreshed.
        self.conn.execute(
            f"""INSERT INTO brick_sources (brick_id, seq, {address}, node_type, branch)
                SELECT brick_id, seq, {address}, node_type, branch FROM {staged_sources} ss
                WHERE brick_id IN (
                    SELECT brick_id FROM (
                        (SELECT brick_id, seq, {address} FROM {staged_sources} ss
                         EXCEPT SELECT brick_id, seq, {address} FROM brick_sources
                                WHERE brick_id IN (SELECT brick_id FROM {staged_bricks} sb))
                        UNION ALL
                        (SELECT brick_id, seq, {address} FROM brick_sources WHERE brick_id IN (SELECT brick_id FROM {staged_bricks} sb)
                         EXCEPT SELECT brick_id, seq, {address} FROM {staged_sources} ss)) AS changed)
                ON CONFLICT (brick_id, {address}) DO UPDATE SET seq = excluded.seq""",
            {"topic": topic_id},
        )
        # Who said each source (docs/inputs.md), from the node it points at; only the nodes of the
        # staged runs are looked at. Descriptive: no id, fingerprint or hash reads it.
        self.conn.execute(
            """UPDATE brick_sources SET speaker = n.speaker
               FROM (SELECT run_id, json_path, checksum, max(speaker) AS speaker FROM nodes
                     WHERE speaker IS NOT NULL
                       AND run_id IN (SELECT run_id FROM staged_brick_sources WHERE topic_id = $topic)
                     GROUP BY run_id, json_path, checksum) n
               WHERE brick_sources.run_id = n.run_id AND brick_sources.json_path = n.json_path
                 AND brick_sources.node_checksum = n.checksum AND brick_sources.speaker IS NULL
                 AND brick_sources.brick_id IN (SELECT brick_id FROM staged_bricks WHERE topic_id = $topic)""",
            {"topic": topic_id},
        )

    def _lowest_moved_key(self, topic_id: str) -> bytes | None:
        """The smallest place key a staged brick had or will have: no brick placed before it moves."""
        return self.conn.execute(
            """SELECT min(k) FROM (
                   SELECT coalesce(rank_key, first_key) AS k FROM staged_bricks WHERE topic_id = $topic
                   UNION ALL
                   SELECT coalesce(rank_key, first_key) FROM bricks
                   WHERE topic_id = $topic AND brick_id IN (SELECT brick_id FROM staged_bricks WHERE topic_id = $topic)) AS keys""",
            {"topic": topic_id},
        ).fetchone()[0]

    def _rank(self, topic_id: str, low: bytes | None) -> None:
        """Every visible brick's place from the kept keys, as `resolve/incremental.ranked_order`
        (and a full resolution) decide it: FINAL bricks keep theirs; the rest follow in rank-key
        order (a BLOB sorts bytewise, as the keys were made to). Only bricks from `low` on are
        ranked again: those before it kept their places (a new run usually comes last)."""
        if low is None:
            return
        self.conn.execute(
            """UPDATE bricks SET order_index = r.idx
               FROM (SELECT brick_id,
                            (SELECT count(*) FROM bricks WHERE topic_id = $topic AND state = 'FINAL' AND order_index IS NOT NULL)
                            + (SELECT count(*) FROM bricks WHERE topic_id = $topic AND state NOT IN ('FINAL', 'SUPERSEDED')
                                                           AND coalesce(rank_key, first_key) < $low)
                            + row_number() OVER (ORDER BY coalesce(rank_key, first_key)) - 1 AS idx
                     FROM bricks WHERE topic_id = $topic AND state NOT IN ('FINAL', 'SUPERSEDED')
                                       AND coalesce(rank_key, first_key) >= $low) r
               WHERE bricks.brick_id = r.brick_id AND bricks.order_index IS DISTINCT FROM r.idx""",
            {"topic": topic_id, "low": low},
        )

    def _finish(self, topic_id: str, dagster_run_id: str | None, stamp: datetime, inputs_digest: str | None) -> None:
        # What this resolution read per run, for the next sync to compare with (none: a stage
        # written without them, e.g. by forgetting, makes the next resolution a full one).
        self.conn.execute("DELETE FROM resolution_inputs WHERE topic_id = ?", [topic_id])
        self.conn.execute(
            "INSERT INTO resolution_inputs SELECT topic_id, run_id, line FROM staged_resolution_inputs WHERE topic_id = ?", [topic_id]
        )
        self.vault.stage.drop(topic_id)
        # A linked source may have become canonical: stale follows the canonical source's status.
        self.vault.drift.refresh_topic_stale(topic_id)
        self._record_sync(topic_id, dagster_run_id, None, stamp, inputs_digest)
