"""The vault's side of lineage and forgetting (invariant 15): what a source gave rise to, the rows
that hold its text, and the tombstones that keep it out.

`vault.forgetting`. Tables added by other features (embeddings, the answer audit trail) are
looked up by name, so lineage and forgetting reach them whenever they exist.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Iterable, Sequence

from nexus_assets.vault.migrations import STAGE_TABLES
from nexus_assets.vault.records import Records

# Every table that holds a run's text or what was derived from it, keyed by run_id.
RUN_TABLES = (
    "runs", "nodes", "occurrences", "rejections", "extractions", "llm_calls", "llm_requests",
    "run_closures", "source_status", "source_status_history",
)


class ForgettingRecords(Records):

    # Finding a source

    def runs_of_file(self, path: str | Path) -> tuple[list[str], list[str]]:
        """(run ids read from this file, its known sha256s) by the path the vault recorded. A run
        read from bytes this path held counts even when it is read from another path now (the file
        was moved, or copied: the same bytes are the same text)."""
        resolved = str(Path(path).resolve())
        shas = self.conn.execute(
            """SELECT DISTINCT file_sha256 FROM (
                   SELECT file_sha256 FROM run_files WHERE path = ? OR path = ?
                   UNION SELECT file_sha256 FROM runs WHERE source_file = ?
                   UNION SELECT file_sha256 FROM file_stats WHERE path = ?) AS shas
               ORDER BY 1""",
            [resolved, str(path), resolved, resolved],
        ).fetchall()
        runs = self.conn.execute(
            "SELECT DISTINCT run_id FROM runs WHERE source_file = ? OR file_sha256 IN (SELECT unnest(?)) ORDER BY run_id",
            [resolved, [r[0] for r in shas]],
        ).fetchall()
        return [r[0] for r in runs], [r[0] for r in shas]

    def run_files_of(self, run_ids: Sequence[str]) -> list[dict]:
        rows = self.conn.execute(
            """SELECT DISTINCT source_file, file_sha256 FROM runs WHERE run_id IN (SELECT unnest(?)) ORDER BY 1, 2""",
            [sorted(run_ids)],
        ).fetchall()
        return [{"file": f, "sha256": s} for f, s in rows]

    def runs_known(self, run_ids: Sequence[str]) -> set[str]:
        rows = self.conn.execute("SELECT DISTINCT run_id FROM runs WHERE run_id IN (SELECT unnest(?))", [sorted(run_ids)]).fetchall()
        return {r[0] for r in rows}

    # Lineage

    def forward_lineage(self, run_ids: Sequence[str]) -> dict:
        """Everything derived from these runs: what `nexus forget` would remove or change."""
        ids = sorted(set(run_ids))
        occurrences = self.conn.execute(
            """SELECT topic_id, count(*) FROM occurrences WHERE run_id IN (SELECT unnest(?)) GROUP BY topic_id ORDER BY 1""",
            [ids],
        ).fetchall()
        bricks = self.conn.execute(
            """SELECT b.brick_id, b.topic_id, b.state,
                      bool_and(s.run_id IN (SELECT unnest(?))) AS alone,
                      list(DISTINCT s.run_id ORDER BY s.run_id) AS runs
               FROM bricks b JOIN brick_sources s USING (brick_id)
               GROUP BY b.brick_id, b.topic_id, b.state
               HAVING bool_or(s.run_id IN (SELECT unnest(?)))
               ORDER BY b.topic_id, b.brick_id""",
            [ids, ids],
        ).fetchall()
        alone = [{"brick_id": b, "topic_id": t, "state": s} for b, t, s, a, _ in bricks if a]
        shared = [{"brick_id": b, "topic_id": t, "state": s, "other_runs": [r for r in rs if r not in ids]} for b, t, s, a, rs in bricks if not a]
        touched = {b for b, *_ in bricks}
        manifests = [
            {"topic_id": t, "seq": seq, "manifest_hash": h, "sealed": sealed}
            for t, seq, h, sealed, _ in self.vault.bricks.listed_in(sorted(touched))
        ]
        calls = self.conn.execute(
            "SELECT call_key, topic_id, run_id, model, prompt_version, status FROM llm_calls WHERE run_id IN (SELECT unnest(?)) ORDER BY 2, 3, 1",
            [ids],
        ).fetchall()
        out = {
            "run_ids": ids,
            "files": self.run_files_of(ids),
            "run_versions": self.conn.execute("SELECT count(*) FROM runs WHERE run_id IN (SELECT unnest(?))", [ids]).fetchone()[0],
            "nodes": self.conn.execute("SELECT count(*) FROM nodes WHERE run_id IN (SELECT unnest(?))", [ids]).fetchone()[0],
            "occurrences": {t: n for t, n in occurrences},
            "rejections": self.conn.execute("SELECT count(*) FROM rejections WHERE run_id IN (SELECT unnest(?))", [ids]).fetchone()[0],
            "bricks_alone": alone,
            "bricks_shared": shared,
            "manifests": manifests,
            "llm_calls": [
                {"call_key": k, "topic_id": t, "run_id": r, "model": m, "prompt_version": v, "status": st} for k, t, r, m, v, st in calls
            ],
            "topics": sorted({t for t, _ in occurrences} | {b["topic_id"] for b in alone + shared}),
        }
        fingerprints = sorted({fp for (fp,) in self.conn.execute(
            "SELECT fingerprint FROM bricks WHERE brick_id IN (SELECT unnest(?))", [[b["brick_id"] for b in alone]]
        ).fetchall()})
        out["embeddings"] = self.conn.execute(
            "SELECT count(*) FROM embeddings WHERE fingerprint IN (SELECT unnest(?))", [fingerprints]
        ).fetchone()[0]
        out["answers"] = self.answers_citing(touched)
        return out

    def run_texts(self, run_ids: Sequence[str], *, outside: bool = False) -> list[str]:
        """Every distinct text node of these runs (`outside`: of every other run)."""
        test = "NOT IN" if outside else "IN"
        return [t for (t,) in self.conn.execute(
            f"SELECT DISTINCT text FROM nodes WHERE run_id {test} (SELECT unnest(?))", [sorted(run_ids)]
        ).fetchall()]

    def brick_texts(self, brick_ids: Sequence[str], *, outside: bool = False) -> list[str]:
        """The text of these bricks (`outside`: of every other brick)."""
        test = "NOT IN" if outside else "IN"
        return [c for (c,) in self.conn.execute(
            f"SELECT content FROM bricks WHERE brick_id {test} (SELECT unnest(?))", [list(brick_ids)]
        ).fetchall()]

    def brick_fingerprints(self, brick_ids: Sequence[str], *, outside: bool = False) -> list[str]:
        """The distinct fingerprints of these bricks (`outside`: of every other brick)."""
        test = "NOT IN" if outside else "IN"
        return [fp for (fp,) in self.conn.execute(
            f"SELECT DISTINCT fingerprint FROM bricks WHERE brick_id {test} (SELECT unnest(?))", [list(brick_ids)]
        ).fetchall()]

    def answers_citing(self, brick_ids: Iterable[str]) -> list[dict]:
        """Audited answers that cited any of these bricks."""
        ids = set(brick_ids)
        if not ids:
            return []
        rows = self.conn.execute("SELECT audit_id, brick_ids FROM audit ORDER BY recorded_at, audit_id").fetchall()
        return [{"audit_id": a} for a, cited in rows if ids & set(json.loads(cited))]

    def brick_lineage(self, brick_id: str) -> dict:
        """Backwards from one brick: its sources' files, run versions, extractions, LLM calls,
        occurrences, and every manifest that listed it."""
        sources = self.conn.execute(
            """SELECT s.seq, s.run_id, s.json_path, s.start_offset, s.end_offset, s.node_checksum,
                      o.version_id, o.extraction_key, r.source_file, r.file_sha256, r.ingested_at,
                      e.extractor, e.created_at
               FROM brick_sources s
               JOIN bricks b USING (brick_id)
               LEFT JOIN occurrences o ON o.topic_id = b.topic_id AND o.run_id = s.run_id AND o.json_path = s.json_path
                    AND o.start_offset = s.start_offset AND o.end_offset = s.end_offset AND o.node_checksum = s.node_checksum
               LEFT JOIN runs r ON r.run_id = s.run_id AND r.version_id = o.version_id
               LEFT JOIN extractions e ON e.extraction_key = o.extraction_key
               WHERE s.brick_id = ? ORDER BY s.seq""",
            [brick_id],
        ).fetchall()
        out = []
        for seq, run_id, path, start, end, checksum, version, ext_key, file, sha, ingested, extractor, extracted_at in sources:
            calls = self.conn.execute(
                """SELECT call_key, model, prompt_version, status, recorded_at FROM llm_calls
                   WHERE run_id = ? AND topic_id = (SELECT topic_id FROM bricks WHERE brick_id = ?) AND status = 'ok'
                   ORDER BY recorded_at""",
                [run_id, brick_id],
            ).fetchall()
            out.append(
                {
                    "seq": seq,
                    "canonical": seq == 0,
                    "file": file,
                    "file_sha256": sha,
                    "run_id": run_id,
                    "run_version": version,
                    "ingested_at": str(ingested) if ingested else None,
                    "extraction": {"extraction_key": ext_key, "extractor": extractor, "created_at": str(extracted_at) if extracted_at else None},
                    "llm_calls": [
                        {"call_key": k, "model": m, "prompt_version": v, "status": st, "recorded_at": str(at)} for k, m, v, st, at in calls
                    ],
                    "pointer": {"json_path": path},
                    "occurrence": {"json_path": path, "start": start, "end": end, "node_checksum": checksum},
                }
            )
        topic = self.conn.execute("SELECT topic_id FROM bricks WHERE brick_id = ?", [brick_id]).fetchone()
        manifests = [
            {"topic_id": t, "seq": seq, "manifest_hash": h, "sealed": sealed, "order_index": places[brick_id]}
            for t, seq, h, sealed, places in (self.vault.bricks.listed_in([brick_id], topic[0]) if topic else [])
        ]
        return {"sources": out, "manifests": manifests, "answers": self.answers_citing([brick_id])}

    # Forgetting

    def forgotten_runs(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT run_id, tombstone_id FROM forgotten_runs").fetchall())

    def forgotten_files(self) -> dict[str, str]:
        """file sha256 -> the tombstone that forgot it."""
        return dict(self.conn.execute("SELECT file_sha256, tombstone_id FROM forgotten_files").fetchall())

    def erase_runs(
        self, run_ids: Sequence[str], file_shas: Sequence[str], bricks_alone: Sequence[str], fingerprints_gone: Sequence[str],
        files: Sequence[str] = (),
    ) -> dict[str, int]:
        """Delete every row holding these runs' text or derived only from it. Returns rows removed per table.
        The files that held them lose their read marks, so the next sync looks again and says it skips them."""
        ids, shas, doomed = sorted(set(run_ids)), sorted(set(file_shas)), sorted(set(bricks_alone))
        forgotten_files = shas
        shas = sorted(set(shas) | {sha for (sha,) in self.conn.execute(
            "SELECT DISTINCT file_sha256 FROM runs WHERE run_id IN (SELECT unnest(?))", [ids]).fetchall()})
        removed: dict[str, int] = {}

        def delete(table: str, where: str, params: list) -> None:
            n = self.conn.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()[0]
            if n:
                self.conn.execute(f"DELETE FROM {table} WHERE {where}", params)
            removed[table] = removed.get(table, 0) + n

        # A request may carry several runs' text (prompt v3 packs small runs together) and names
        # only its first run: every request any of these runs' answers came from goes too (the
        # other runs keep their answers; only the record of the shared request is lost).
        delete(
            "llm_requests",
            "request_key IN (SELECT request_key FROM llm_calls WHERE run_id IN (SELECT unnest(?)) AND request_key IS NOT NULL)",
            [ids],
        )
        for table in RUN_TABLES:
            delete(table, "run_id IN (SELECT unnest(?))", [ids])
        # (shas were read from `runs` above, before its rows went.)
        delete("brick_sources", "run_id IN (SELECT unnest(?))", [ids])
        delete("brick_sources", "brick_id IN (SELECT unnest(?))", [doomed])
        delete("sealed_bricks", "brick_id IN (SELECT unnest(?))", [doomed])
        delete("bricks", "brick_id IN (SELECT unnest(?))", [doomed])
        # A person's keep/drop of a forgotten brick quotes its text (the topic file's example is the
        # person's own file, outside the vault: `nexus forget` does not rewrite it).
        delete("teachings", "brick_id IN (SELECT unnest(?))", [doomed])
        # A resolution staged but not yet published may quote the runs: that stage goes whole
        # (its topic resolves again at the next sync).
        staged = [t for (t,) in self.conn.execute(
            "SELECT DISTINCT topic_id FROM staged_brick_sources WHERE run_id IN (SELECT unnest(?))", [ids]).fetchall()]
        for table in STAGE_TABLES:
            delete(table, "topic_id IN (SELECT unnest(?))", [staged])
        delete("run_files", "file_sha256 IN (SELECT unnest(?)) OR path IN (SELECT unnest(?))", [shas, sorted(files)])
        delete("file_stats", "file_sha256 IN (SELECT unnest(?)) OR path IN (SELECT unnest(?))", [shas, sorted(files)])
        # Errors name files and conversations, and their problem text may quote the source.
        delete("ingestion_errors", "file_sha256 IN (SELECT unnest(?)) OR conversation IN (SELECT unnest(?))", [forgotten_files, ids])
        delete("embeddings", "fingerprint IN (SELECT unnest(?))", [sorted(set(fingerprints_gone))])
        # A conflict's reason quotes values of both texts: a removed brick's relations go whole, and
        # the bricks that were related to it are looked at again by the next sync.
        holders = [b for (b,) in self.conn.execute(
            "SELECT DISTINCT brick_id FROM brick_relations WHERE related_id IN (SELECT unnest(?))", [doomed]).fetchall()]
        delete("brick_relations", "brick_id IN (SELECT unnest(?)) OR related_id IN (SELECT unnest(?))", [doomed, doomed])
        delete("relation_builds", "brick_id IN (SELECT unnest(?))", [sorted(set(doomed) | set(holders))])
        return {t: n for t, n in removed.items() if n}

    def record_tombstone(self, tombstone_id: str, *, run_ids, file_shas, brick_ids, topic_ids, reason: str, actor: str, at: datetime) -> None:
        self.conn.execute(
            "INSERT INTO tombstones VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [tombstone_id, json.dumps(sorted(run_ids)), json.dumps(sorted(file_shas)), json.dumps(sorted(brick_ids)),
             json.dumps(sorted(topic_ids)), reason, actor, at],
        )
        for r in sorted(set(run_ids)):
            self.conn.execute("INSERT INTO forgotten_runs VALUES (?, ?) ON CONFLICT DO NOTHING", [r, tombstone_id])
        for sha in sorted(set(file_shas)):
            self.conn.execute("INSERT INTO forgotten_files VALUES (?, ?) ON CONFLICT DO NOTHING", [sha, tombstone_id])

    def tombstones(self) -> list[dict]:
        cur = self.conn.execute("SELECT * FROM tombstones ORDER BY forgotten_at, tombstone_id")
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def reseal_bricks(self, topic_id: str, bricks, manifest_hash: str) -> None:
        """After a forget in a sealed topic: the seal-time snapshot follows the tombstone manifest."""
        for b in bricks:
            if b.state != "FINAL":
                continue
            self.conn.execute(
                "UPDATE sealed_bricks SET content = ?, sources_json = ?, order_index = ?, manifest_hash = ? WHERE topic_id = ? AND brick_id = ?",
                [b.content, json.dumps([s.model_dump() for s in b.sources], ensure_ascii=False), b.order_index, manifest_hash, topic_id, b.brick_id],
            )
