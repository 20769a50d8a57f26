"""The vault's side of recall (docs/recall.md): embeddings keyed by (model, fingerprint) and the
append-only audit trail of answers: `vault.recall`.

The audit trail holds ids, hashes and figures, never question or answer text, so forgetting a
source never has to edit it (invariant 15) and nothing ever does (invariant 16).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Iterable, Sequence

from nexus_assets.core.models import SourceAddress
from nexus_assets.vault.records import Records


def _grouped(rows: list[tuple]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for row in rows:
        out.setdefault(row[0], []).append(row)
    return out


class RecallRecords(Records):

    def fingerprints_without_embedding(self, topic_id: str, model: str) -> list[tuple[str, str]]:
        """(fingerprint, text) of the topic's visible bricks not yet embedded with `model`."""
        return self.conn.execute(
            """SELECT b.fingerprint, arg_min(b.content, b.brick_id) FROM bricks b
               LEFT JOIN embeddings e ON e.model = ? AND e.fingerprint = b.fingerprint
               WHERE b.topic_id = ? AND b.state <> 'SUPERSEDED' AND e.fingerprint IS NULL
               GROUP BY b.fingerprint ORDER BY b.fingerprint""",
            [model, topic_id],
        ).fetchall()

    def store_embeddings(self, model: str, fingerprints: Sequence[str], vectors, at: datetime) -> None:
        """`vectors` is an (n, 384) float32 array. It goes in as 384 numpy-backed columns: DuckDB scans
        those directly, where a list of Python floats per row costs ~1 ms a row and 1.5 KB of objects."""
        import pandas as pd

        if not len(fingerprints):
            return
        if self.vault.on_postgres:
            # real[] takes the float32 values exactly; the rows go in through COPY.
            self._insert_df(
                "embeddings",
                [{"model": model, "fingerprint": f, "vector": v.tolist(), "created_at": at} for f, v in zip(fingerprints, vectors)],
            )
            return
        frame = pd.DataFrame(vectors, columns=[f"c{i}" for i in range(vectors.shape[1])], copy=False)
        frame.insert(0, "fingerprint", list(fingerprints))
        columns = ", ".join(f"c{i}" for i in range(vectors.shape[1]))
        with self._registered(_vectors=frame):
            self.conn.execute(
                f"""INSERT INTO embeddings SELECT ?, fingerprint, array_value({columns})::FLOAT[384], ? FROM _vectors
                    ON CONFLICT DO NOTHING""",
                [model, at],
            )

    def visible_vectors(self, topic_id: str, model: str):
        """(brick ids, (n, 384) float32 array) of the topic's visible embedded bricks in manifest order."""
        import numpy as np

        ids: list[str] = []
        parts = []
        for chunk_ids, vectors in self.visible_vector_chunks(topic_id, model):
            ids += chunk_ids
            parts.append(vectors)
        return ids, (np.concatenate(parts) if parts else np.zeros((0, 384), "float32"))

    def visible_vector_chunks(self, topic_id: str, model: str, rows: int = 8192):
        """`visible_vectors` a slice at a time, in manifest order: an index can be built from them
        without the whole array existing twice (a 125k-brick topic's vectors are 190 MB).

        Only ids are sorted; each slice's vectors are looked up by fingerprint and put in their rows.
        Joining and sorting 130k vectors (200 MB) inside DuckDB's bounded pool ran out of memory."""
        import numpy as np

        ordered = self._visible_embedded(topic_id, model)
        for start in range(0, len(ordered), rows):
            piece = ordered[start : start + rows]
            place = {fingerprint: i for i, (_, fingerprint) in enumerate(piece)}  # one visible brick per fingerprint
            vectors = np.zeros((len(piece), 384), "float32")
            cursor = self.conn.execute(
                "SELECT fingerprint, vector FROM embeddings WHERE model = ? AND fingerprint IN (SELECT unnest(?))",
                [model, list(place)],
            )
            for fingerprints, found in self._vector_chunks(cursor):
                vectors[[place[f] for f in fingerprints]] = found
            yield [b for b, _ in piece], vectors

    def unembedded_counts(self, topic_ids: Sequence[str], model: str) -> dict[str, int]:
        """Per topic, how many visible bricks have no vector from `model` (a sync without recall);
        topics with none are left out."""
        topic_ids = list(topic_ids)
        return dict(
            self.vault.remembered(
                ("unembedded_counts", tuple(topic_ids), model),
                lambda: self.conn.execute(
                    """SELECT topic_id, count(*) FROM bricks
                       WHERE topic_id IN (SELECT unnest(?)) AND state <> 'SUPERSEDED'
                         AND fingerprint NOT IN (SELECT fingerprint FROM embeddings WHERE model = ?)
                       GROUP BY topic_id""",
                    [topic_ids, model],
                ).fetchall(),
            )
        )

    def visible_brick_count(self, topic_id: str) -> int:
        return self.conn.execute(
            "SELECT count(*) FROM bricks WHERE topic_id = ? AND state <> 'SUPERSEDED'", [topic_id]
        ).fetchone()[0]

    def visible_embedded_ids(self, topic_id: str, model: str) -> list[str]:
        """Brick ids of `visible_vectors` that have a vector, without reading the vectors."""
        return [b for b, _ in self._visible_embedded(topic_id, model)]

    def visible_embedded(self, topic_id: str, model: str) -> list[tuple[str, str]]:
        """(brick id, fingerprint) of `visible_vectors`, without reading the vectors."""
        return self._visible_embedded(topic_id, model)

    def _visible_embedded(self, topic_id: str, model: str) -> list[tuple[str, str]]:
        """(brick id, fingerprint) of the topic's visible bricks that have a vector, in manifest order."""
        return self.conn.execute(
            """SELECT brick_id, fingerprint FROM bricks
               WHERE topic_id = ? AND state <> 'SUPERSEDED'
                 AND fingerprint IN (SELECT fingerprint FROM embeddings WHERE model = ?)
               ORDER BY order_index, brick_id""",
            [topic_id, model],
        ).fetchall()

    def vectors_of(self, model: str, fingerprints: Iterable[str]) -> dict:
        """The stored vector (384 float32) of each of these fingerprints that has one from `model`."""
        import numpy as np

        found: dict = {}
        cursor = self.conn.execute(
            "SELECT fingerprint, vector FROM embeddings WHERE model = ? AND fingerprint IN (SELECT unnest(?))",
            [model, list(dict.fromkeys(fingerprints))],
        )
        for fingerprints, vectors in self._vector_chunks(cursor):
            for fp, vector in zip(fingerprints, vectors):
                found[fp] = np.asarray(vector, dtype="float32")
        return found

    def _vector_chunks(self, cursor):
        """(fingerprints, (n, 384) float32 array) a slice at a time from a `fingerprint, vector` query."""
        import numpy as np

        if self.vault.on_postgres:
            while rows := cursor.fetchmany(2048):
                yield [r[0] for r in rows], np.asarray([r[1] for r in rows], dtype="float32")
            return
        while len(found := cursor.fetch_df_chunk(1)):
            yield list(found["fingerprint"]), np.stack(found["vector"].to_numpy())

    def embedding_count(self, model: str) -> int:
        return self.conn.execute("SELECT count(*) FROM embeddings WHERE model = ?", [model]).fetchone()[0]

    def append_audit(self, row: dict) -> None:
        self.conn.execute(
            """INSERT INTO audit (audit_id, recorded_at, user_name, agent, question_sha256, topic_ids, brick_ids, model,
                                  prompt_tokens, completion_tokens, cost_usd, ccc, revisions, outcome, reason, answer_sha256)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                row["audit_id"], row["recorded_at"], row["user"], row["agent"], row["question_sha256"],
                json.dumps(sorted(row["topic_ids"])), json.dumps(row["brick_ids"]), row["model"],
                row["prompt_tokens"], row["completion_tokens"], row["cost_usd"], row["ccc"], row["revisions"],
                row["outcome"], row["reason"], row.get("answer_sha256"),
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

    def source_facts(
        self, *, brick_ids: Iterable[str] | None = None, topic_ids: Iterable[str] | None = None, dates: bool = True
    ) -> dict[str, list[tuple]]:
        """Per visible brick (of these ids, or of these topics), each source's (speaker, date): who
        said it and the day it was said (the message's timestamp, else its run's start; None when
        neither is known), for recall's speaker and date filters (docs/recall.md). `dates` False: the
        speakers alone, without reading the nodes (the date is None)."""
        if brick_ids is not None:
            scope, param = "s.brick_id IN (SELECT unnest(?))", sorted(set(brick_ids))
        else:
            scope = "s.brick_id IN (SELECT brick_id FROM bricks WHERE topic_id IN (SELECT unnest(?)) AND state <> 'SUPERSEDED')"
            param = sorted(set(topic_ids or ()))
        if not dates:
            rows = self.conn.execute(f"SELECT s.brick_id, s.speaker, NULL FROM brick_sources s WHERE {scope}", [param]).fetchall()
            return {b: [(sp, None) for _, sp, _ in group] for b, group in _grouped(rows).items()}
        rows = self.conn.execute(
            f"""SELECT s.brick_id, s.speaker, coalesce(min(n.timestamp), min(r.started_at))
                FROM brick_sources s
                LEFT JOIN nodes n ON n.run_id = s.run_id AND n.json_path = s.json_path AND n.checksum = s.node_checksum
                LEFT JOIN runs r ON r.run_id = s.run_id AND r.is_latest
                WHERE {scope}
                GROUP BY s.brick_id, s.seq, s.speaker""",
            [param],
        ).fetchall()
        out: dict[str, list[tuple]] = {}
        for brick_id, speaker, stamp in rows:
            out.setdefault(brick_id, []).append((speaker, str(stamp)[:10] if stamp else None))
        return out

    def known_speakers(self, topic_ids: Iterable[str]) -> list[str]:
        """The speakers named in these topics' visible bricks' sources, for reading them in a query."""
        return [
            r[0]
            for r in self.conn.execute(
                """SELECT DISTINCT s.speaker FROM brick_sources s JOIN bricks b USING (brick_id)
                   WHERE b.topic_id IN (SELECT unnest(?)) AND b.state <> 'SUPERSEDED' AND s.speaker IS NOT NULL
                   ORDER BY 1""",
                [sorted(set(topic_ids))],
            ).fetchall()
        ]

    def visible_bricks_at(self, addresses: Iterable[tuple[str, str, int, int]], topic_ids: Iterable[str]) -> dict[tuple, list[str]]:
        """(run_id, json_path, start, end) -> the visible bricks of these topics with a source there:
        a passage at such an address is that brick's text, and recall lists it as the brick."""
        addresses = sorted(set(addresses))
        topic_ids = sorted(set(topic_ids))
        if not addresses or not topic_ids:
            return {}
        rows = self.conn.execute(
            """SELECT s.run_id, s.json_path, s.start_offset, s.end_offset, s.brick_id FROM brick_sources s
               JOIN bricks b ON b.brick_id = s.brick_id AND b.state <> 'SUPERSEDED' AND b.topic_id IN (SELECT unnest(?))
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS json_path, unnest(?) AS start_offset, unnest(?) AS end_offset) a
                 ON a.run_id = s.run_id AND a.json_path = s.json_path AND a.start_offset = s.start_offset
                AND a.end_offset = s.end_offset
               ORDER BY s.brick_id""",
            [topic_ids, [a[0] for a in addresses], [a[1] for a in addresses], [a[2] for a in addresses], [a[3] for a in addresses]],
        ).fetchall()
        out: dict[tuple, list[str]] = {}
        for run_id, path, start, end, brick_id in rows:
            out.setdefault((run_id, path, start, end), []).append(brick_id)
        return out

    def canonical_sources(self, brick_ids: Iterable[str]):
        rows = self.conn.execute(
            """SELECT brick_id, run_id, json_path, start_offset, end_offset, node_checksum FROM brick_sources
               WHERE seq = 0 AND brick_id IN (SELECT unnest(?))""",
            [sorted(set(brick_ids))],
        ).fetchall()
        return {b: SourceAddress(run_id=r, json_path=p, start=s, end=e, node_checksum=c) for b, r, p, s, e, c in rows}
