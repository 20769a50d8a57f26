"""The vault's side of recall (DESIGN §8): embeddings keyed by (model, fingerprint) and the
append-only audit trail of answers. A mixin of `Vault`.

The audit trail holds ids, hashes and figures, never question or answer text, so forgetting a
source never has to edit it (invariant 15) and nothing ever does (invariant 16).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Iterable, Sequence

import duckdb


class RecallRecords:
    conn: duckdb.DuckDBPyConnection

    def fingerprints_without_embedding(self, topic_id: str, model: str) -> list[tuple[str, str]]:
        """(fingerprint, text) of the topic's visible bricks not yet embedded with `model`."""
        return self.conn.execute(
            """SELECT b.fingerprint, arg_min(b.content, b.brick_id) FROM bricks b
               LEFT JOIN embeddings e ON e.model = ? AND e.fingerprint = b.fingerprint
               WHERE b.topic_id = ? AND b.state <> 'SUPERSEDED' AND e.fingerprint IS NULL
               GROUP BY b.fingerprint ORDER BY b.fingerprint""",
            [model, topic_id],
        ).fetchall()

    def store_embeddings(self, model: str, rows: Sequence[tuple[str, list[float]]], at: datetime) -> None:
        if rows:
            self.conn.execute(
                """INSERT INTO embeddings SELECT ?, unnest(?), unnest(?::FLOAT[384][]), ? ON CONFLICT DO NOTHING""",
                [model, [fp for fp, _ in rows], [v for _, v in rows], at],
            )

    def visible_vectors(self, topic_id: str, model: str) -> list[tuple[str, list[float] | None]]:
        """The topic's visible bricks in manifest order, each with its vector (None when not embedded)."""
        return self.conn.execute(
            """SELECT b.brick_id, e.vector FROM bricks b
               LEFT JOIN embeddings e ON e.model = ? AND e.fingerprint = b.fingerprint
               WHERE b.topic_id = ? AND b.state <> 'SUPERSEDED'
               ORDER BY b.order_index, b.brick_id""",
            [model, topic_id],
        ).fetchall()

    def visible_embedded_ids(self, topic_id: str, model: str) -> list[str]:
        """Brick ids of `visible_vectors` that have a vector, without reading the vectors."""
        return [
            r[0]
            for r in self.conn.execute(
                """SELECT b.brick_id FROM bricks b
                   JOIN embeddings e ON e.model = ? AND e.fingerprint = b.fingerprint
                   WHERE b.topic_id = ? AND b.state <> 'SUPERSEDED'
                   ORDER BY b.order_index, b.brick_id""",
                [model, topic_id],
            ).fetchall()
        ]

    def embedding_count(self, model: str) -> int:
        return self.conn.execute("SELECT count(*) FROM embeddings WHERE model = ?", [model]).fetchone()[0]

    def append_audit(self, row: dict) -> None:
        self.conn.execute(
            """INSERT INTO audit (audit_id, recorded_at, user_name, agent, question_sha256, topic_ids, brick_ids, model,
                                  prompt_tokens, completion_tokens, cost_usd, ccc, revisions, outcome, reason)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                row["audit_id"], row["recorded_at"], row["user"], row["agent"], row["question_sha256"],
                json.dumps(sorted(row["topic_ids"])), json.dumps(row["brick_ids"]), row["model"],
                row["prompt_tokens"], row["completion_tokens"], row["cost_usd"], row["ccc"], row["revisions"],
                row["outcome"], row["reason"],
            ],
        )

    def audit_rows(self) -> list[dict]:
        cur = self.conn.execute("SELECT * FROM audit ORDER BY recorded_at, audit_id")
        cols = [c[0] for c in cur.description]
        out = []
        for r in cur.fetchall():
            d = dict(zip(cols, r))
            d["topic_ids"], d["brick_ids"] = json.loads(d["topic_ids"]), json.loads(d["brick_ids"])
            d["recorded_at"] = str(d["recorded_at"])
            out.append(d)
        return out

    def canonical_sources(self, brick_ids: Iterable[str]):
        from nexus_assets.core.models import SourceAddress

        rows = self.conn.execute(
            """SELECT brick_id, run_id, json_path, start_offset, end_offset, node_checksum FROM brick_sources
               WHERE seq = 0 AND brick_id IN (SELECT unnest(?))""",
            [sorted(set(brick_ids))],
        ).fetchall()
        return {b: SourceAddress(run_id=r, json_path=p, start=s, end=e, node_checksum=c) for b, r, p, s, e, c in rows}
