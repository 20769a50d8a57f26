"""Published bricks, their sources, the manifest chain and the record of each sync: what the
publish phase writes in one transaction, and what every read command lists."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Iterable, Sequence

from nexus_assets.core.models import (
    Brick,
    Manifest,
    ManifestEntry,
    SourceAddress,
    Tombstone,
    trusted,
)
from nexus_assets.publish.immutability import FinalBrickChanged, final_brick_changes
from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records


class BrickRecords(Records):
    """The `bricks`, `brick_sources`, `manifests` and `syncs` tables, written by publishing."""

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
                       list(struct_pack(run_id := s.run_id, json_path := s.json_path, start := s.start_offset,
                                        "end" := s.end_offset, node_checksum := s.node_checksum,
                                        node_type := s.node_type,
                                        branch := s.branch,
                                        stale := coalesce(st.drifted, false)) ORDER BY s.seq)
                FROM {table} b LEFT JOIN {sources}
                LEFT JOIN source_status st ON st.run_id = s.run_id AND st.json_path = s.json_path
                     AND st.node_checksum = s.node_checksum
                {clause}
                GROUP BY ALL
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
        stamp = now()
        address = "run_id, json_path, start_offset, end_offset, node_checksum"
        staged_bricks = "(SELECT * FROM staged_bricks WHERE topic_id = $topic)"
        staged_sources = "(SELECT * FROM staged_brick_sources WHERE topic_id = $topic)"
        with self.transaction():
            # The manifest row goes first: DuckDB needs several copies of its one large brick list
            # while inserting it, and does best before the brick writes below fill its memory.
            if manifest is not None:
                seq = self.conn.execute(
                    "SELECT coalesce(max(seq) + 1, 0) FROM manifests WHERE topic_id = ?", [topic_id]
                ).fetchone()[0]
                self.conn.execute(
                    """INSERT INTO manifests (topic_id, seq, manifest_hash, previous_hash, bricks_json, sealed,
                                              dagster_run_id, created_at, tombstone_json)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [
                        topic_id,
                        seq,
                        manifest.manifest_hash,
                        manifest.previous_hash,
                        json.dumps([e.model_dump() for e in manifest.bricks]),
                        sealed,
                        dagster_run_id,
                        stamp,
                        manifest.tombstone.model_dump_json() if manifest.tombstone else None,
                    ],
                )
            self.conn.execute(
                f"""INSERT INTO bricks (brick_id, topic_id, content, fingerprint, state, order_index, superseded_by, stale,
                                        first_seen, updated_at)
                    SELECT brick_id, topic_id, content, fingerprint, state, order_index, superseded_by, stale, $stamp, $stamp
                    FROM {staged_bricks} WHERE brick_id NOT IN (SELECT brick_id FROM bricks WHERE topic_id = $topic)""",
                {"topic": topic_id, "stamp": stamp},
            )
            self.conn.execute(
                f"""UPDATE bricks SET state = n.state, order_index = n.order_index, superseded_by = n.superseded_by,
                                      stale = n.stale, content = n.content, updated_at = $stamp
                    FROM {staged_bricks} n
                    WHERE bricks.brick_id = n.brick_id AND bricks.topic_id = $topic
                      AND (bricks.state, bricks.order_index, bricks.superseded_by, bricks.stale, bricks.content)
                          IS DISTINCT FROM (n.state, n.order_index, n.superseded_by, n.stale, n.content)""",
                {"topic": topic_id, "stamp": stamp},
            )
            # A brick whose sources changed, or only their order, gets them written again; canonical
            # first: a source that arrived later, or an older version of its node, can take seq 0,
            # so seq is refreshed.
            self.conn.execute(
                f"""INSERT INTO brick_sources (brick_id, seq, {address}, node_type, branch)
                    SELECT brick_id, seq, {address}, node_type, branch FROM {staged_sources}
                    WHERE brick_id IN (
                        SELECT brick_id FROM (
                            (SELECT brick_id, seq, {address} FROM {staged_sources}
                             EXCEPT SELECT brick_id, seq, {address} FROM brick_sources
                                    WHERE brick_id IN (SELECT brick_id FROM {staged_bricks}))
                            UNION ALL
                            (SELECT brick_id, seq, {address} FROM brick_sources WHERE brick_id IN (SELECT brick_id FROM {staged_bricks})
                             EXCEPT SELECT brick_id, seq, {address} FROM {staged_sources})))
                    ON CONFLICT (brick_id, {address}) DO UPDATE SET seq = excluded.seq""",
                {"topic": topic_id},
            )
            self.vault.stage.drop(topic_id)
            # A linked source may have become canonical: stale follows the canonical source's status.
            self.vault.drift.refresh_topic_stale(topic_id)
            self._record_sync(topic_id, dagster_run_id, None, stamp, inputs_digest)

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
