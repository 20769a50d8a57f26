"""The relations of a topic's bricks (docs/conflicts.md), `vault.relations`: each visible brick's nearest
related bricks by embedding (`brick_relations`, one row per brick and partner, with any conflict
between their values) and the bricks already looked at with which threshold (`relation_builds`).

Derived data, like the vector index: a function of the visible bricks and their embeddings. A
brick's rows are replaced whole when its neighbourhood changes; nothing in them enters a brick,
a state or a manifest hash, and they hold ids and figures only, never text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Mapping, Sequence

from nexus_assets.vault.records import Records

_VISIBLE_PAIRS = """
    SELECT least(r.brick_id, r.related_id) AS brick_a, greatest(r.brick_id, r.related_id) AS brick_b,
           max(r.similarity) AS similarity, max(r.conflict) AS conflict
    FROM brick_relations r
    JOIN bricks x ON x.brick_id = r.brick_id AND x.state <> 'SUPERSEDED'
    JOIN bricks y ON y.brick_id = r.related_id AND y.state <> 'SUPERSEDED'
    WHERE r.topic_id = ? AND r.model = ?
    GROUP BY 1, 2
"""


class RelationRecords(Records):

    def built(self, topic_id: str, model: str) -> dict[str, float]:
        """Bricks whose nearest related bricks are recorded, with the threshold they were found at."""
        return dict(
            self.conn.execute(
                "SELECT brick_id, threshold FROM relation_builds WHERE topic_id = ? AND model = ?", [topic_id, model]
            ).fetchall()
        )

    def partners(self, topic_id: str, model: str, brick_ids: Sequence[str]) -> dict[str, list[str]]:
        """The recorded partners of these bricks."""
        out: dict[str, list[str]] = {}
        rows = self.conn.execute(
            """SELECT brick_id, related_id FROM brick_relations
               WHERE topic_id = ? AND model = ? AND brick_id IN (SELECT unnest(?)) ORDER BY brick_id, related_id""",
            [topic_id, model, list(brick_ids)],
        ).fetchall()
        for b, r in rows:
            out.setdefault(b, []).append(r)
        return out

    def holding(self, topic_id: str, model: str, partner_ids: Sequence[str]) -> list[str]:
        """Bricks whose recorded partners include one of these."""
        return [
            r[0]
            for r in self.conn.execute(
                """SELECT DISTINCT brick_id FROM brick_relations
                   WHERE topic_id = ? AND model = ? AND related_id IN (SELECT unnest(?)) ORDER BY brick_id""",
                [topic_id, model, list(partner_ids)],
            ).fetchall()
        ]

    def replace(
        self,
        topic_id: str,
        model: str,
        threshold: float,
        lists: Mapping[str, Sequence[tuple[str, float, str | None]]],
        dropped: Iterable[str],
        at: datetime,
    ) -> None:
        """Record these bricks' nearest related bricks (partner, similarity, conflict) in place of
        what they had, and forget what `dropped` bricks (no longer visible) had; one transaction."""
        import pandas as pd

        touched = sorted(set(lists) | set(dropped))
        rows = [
            {"topic_id": topic_id, "model": model, "brick_id": b, "related_id": r, "kind": "related",
             "similarity": s, "conflict": c, "computed_at": at}
            for b in sorted(lists) for r, s, c in lists[b]
        ]
        builds = pd.DataFrame({"brick_id": sorted(lists)}, dtype=object)
        with self.transaction():
            for table in ("brick_relations", "relation_builds"):
                self.conn.execute(
                    f"DELETE FROM {table} WHERE topic_id = ? AND model = ? AND brick_id IN (SELECT unnest(?))",
                    [topic_id, model, touched],
                )
            self._insert_df("brick_relations", rows, conflict=None)
            with self._registered(_built=builds):
                self.conn.execute(
                    "INSERT INTO relation_builds SELECT ?, ?, brick_id, ?, ? FROM _built", [topic_id, model, threshold, at]
                )

    def clear(self, topic_id: str, model: str) -> None:
        """Every recorded relation of the topic (its threshold changed: all are found again)."""
        with self.transaction():
            for table in ("brick_relations", "relation_builds"):
                self.conn.execute(f"DELETE FROM {table} WHERE topic_id = ? AND model = ?", [topic_id, model])

    def pair_counts(self, topic_id: str, model: str) -> tuple[int, int]:
        """(related pairs, conflict pairs) among the topic's visible bricks."""
        row = self.conn.execute(
            f"SELECT count(*), count(conflict) FROM ({_VISIBLE_PAIRS}) AS pairs", [topic_id, model]
        ).fetchone()
        return int(row[0]), int(row[1])

    def pairs(self, topic_id: str, model: str, *, conflicts_only: bool = False) -> list[dict]:
        """Related pairs among the topic's visible bricks (each once, brick_a < brick_b), in the
        order of their earlier brick in the manifest, then the later one."""
        rows = self.conn.execute(
            f"""SELECT p.brick_a, p.brick_b, p.similarity, p.conflict FROM ({_VISIBLE_PAIRS}) p
                JOIN bricks a ON a.brick_id = p.brick_a JOIN bricks b ON b.brick_id = p.brick_b
                {"WHERE p.conflict IS NOT NULL" if conflicts_only else ""}
                ORDER BY least(a.order_index, b.order_index), greatest(a.order_index, b.order_index), p.brick_a, p.brick_b""",
            [topic_id, model],
        ).fetchall()
        return [{"brick_a": a, "brick_b": b, "similarity": s, "conflict": c} for a, b, s, c in rows]

    def related_to(self, brick_id: str, model: str) -> list[dict]:
        """The visible bricks related to one brick (either side kept the other), nearest first."""
        rows = self.conn.execute(
            """SELECT other, max(similarity) AS similarity, max(conflict) AS conflict FROM (
                   SELECT related_id AS other, similarity, conflict FROM brick_relations WHERE brick_id = ? AND model = ?
                   UNION ALL
                   SELECT brick_id, similarity, conflict FROM brick_relations WHERE related_id = ? AND model = ?
               ) r JOIN bricks b ON b.brick_id = r.other AND b.state <> 'SUPERSEDED'
               GROUP BY other ORDER BY similarity DESC, other""",
            [brick_id, model, brick_id, model],
        ).fetchall()
        return [{"brick_id": o, "similarity": s, "conflict": c} for o, s, c in rows]

    def when_said(self, topic_id: str, brick_ids: Sequence[str]) -> dict[str, dict]:
        """Each brick's canonical source and when it was said there (the message's timestamp, else
        the run's start)."""
        rows = self.conn.execute(
            """SELECT s.brick_id, s.run_id, s.json_path, s.start_offset, s.end_offset,
                      coalesce(any_value(o.ts), any_value(r.started_at)) AS said_at
               FROM brick_sources s
               LEFT JOIN occurrences o ON o.topic_id = ? AND o.run_id = s.run_id AND o.json_path = s.json_path
                    AND o.start_offset = s.start_offset AND o.end_offset = s.end_offset AND o.node_checksum = s.node_checksum
               LEFT JOIN runs r ON r.run_id = s.run_id AND r.is_latest
               WHERE s.seq = 0 AND s.brick_id IN (SELECT unnest(?))
               GROUP BY s.brick_id, s.run_id, s.json_path, s.start_offset, s.end_offset""",
            [topic_id, list(brick_ids)],
        ).fetchall()
        return {
            b: {"run_id": run, "json_path": path, "start": start, "end": end, "said_at": said}
            for b, run, path, start, end, said in rows
        }

    def known_fingerprints(self, topic_id: str, fingerprints: Sequence[str]) -> set[str]:
        """Which of these texts the topic has seen pass the gate before (a brick of any state, or an
        occurrence): those are no new brick, and the veto never asks about them. Reads the bricks
        and occurrences tables; writes neither."""
        rows = self.conn.execute(
            """SELECT fingerprint FROM bricks WHERE topic_id = ? AND fingerprint IN (SELECT unnest(?))
               UNION SELECT fingerprint FROM occurrences WHERE topic_id = ? AND fingerprint IN (SELECT unnest(?))""",
            [topic_id, list(fingerprints), topic_id, list(fingerprints)],
        ).fetchall()
        return {r[0] for r in rows}
