"""The extractor's answers: its pointers per run version (`extractions`), written by the extract
phase and read by the gate and `nexus eval`."""

from __future__ import annotations

import json
from typing import Iterable, Sequence

from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records, RunVersion, storable_json


class ExtractionRecords(Records):
    """The `extractions` table: each answer is kept as soon as it exists."""

    def extraction_keys_present(self, keys: Iterable[str]) -> set[str]:
        keys = list(keys)
        if not keys:
            return set()
        rows = self.conn.execute(
            "SELECT extraction_key FROM extractions WHERE extraction_key IN (SELECT unnest(?))", [keys]
        ).fetchall()
        return {r[0] for r in rows}

    def store_extractions(self, topic_id: str, extractor: str, answers: Sequence[tuple[str, RunVersion, list]]) -> None:
        stamp = now()
        self._insert_df(
            "extractions",
            [
                {
                    "extraction_key": key,
                    "topic_id": topic_id,
                    "run_id": rv.run_id,
                    "version_id": rv.version_id,
                    "extractor": extractor,
                    "pointers_json": storable_json(pointers),
                    "validated": False,
                    "created_at": stamp,
                }
                for key, rv, pointers in answers
            ],
        )

    def unvalidated_extractions(self, topic_id: str) -> list[tuple[str, RunVersion, list]]:
        rows = self.conn.execute(
            """SELECT extraction_key, run_id, version_id, pointers_json FROM extractions
               WHERE topic_id = ? AND NOT validated ORDER BY run_id, version_id, extraction_key""",
            [topic_id],
        ).fetchall()
        return [(k, RunVersion(r, v), json.loads(p)) for k, r, v, p in rows]

    def answers(self, topic_id: str) -> list[tuple[str, str, str]]:
        """(extraction_key, extractor, version_id) of every answer stored for the topic."""
        return self.conn.execute(
            "SELECT extraction_key, extractor, version_id FROM extractions WHERE topic_id = ?", [topic_id]
        ).fetchall()

    def quotes_of(self, keys: Sequence[str]):
        """The verbatim quotes these answers pointed at, streamed a batch of answers at a time."""
        keys = list(keys)
        for start in range(0, len(keys), 2_000):
            rows = self.conn.execute(
                "SELECT pointers_json FROM extractions WHERE extraction_key IN (SELECT unnest(?))", [keys[start : start + 2_000]]
            ).fetchall()
            for (raw,) in rows:
                for p in json.loads(raw) or ():
                    quote = p.get("verbatim_quote") if isinstance(p, dict) else None
                    if isinstance(quote, str):
                        yield quote

    def extractor_identities(self, topic_id: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT DISTINCT extractor FROM extractions WHERE topic_id = ? ORDER BY extractor", [topic_id]
        ).fetchall()
        return [r[0] for r in rows]

    def kept_extractions(self, topic_id: str, extractor: str) -> list[tuple[RunVersion, list]]:
        """The pointers one extractor identity returned for the topic: for each run, its answer for
        the newest run version that identity was asked about (the latest answer, if asked twice)."""
        rows = self.conn.execute(
            """SELECT run_id, version_id, pointers_json FROM (
                   SELECT e.run_id, e.version_id, e.pointers_json,
                          row_number() OVER (PARTITION BY e.run_id ORDER BY r.ingest_seq DESC, e.created_at DESC,
                                             e.extraction_key) AS newest
                   FROM extractions e
                   JOIN runs r ON r.run_id = e.run_id AND r.version_id = e.version_id
                   WHERE e.topic_id = ? AND e.extractor = ?) kept
               WHERE newest = 1
               ORDER BY run_id""",
            [topic_id, extractor],
        ).fetchall()
        return [(RunVersion(r, v), json.loads(p)) for r, v, p in rows]

    def answers_for_run(self, topic_id: str, run_id: str) -> list[tuple[str, str, list]]:
        """(extractor, version_id, pointers) of every answer stored for the topic and run, newest first."""
        rows = self.conn.execute(
            """SELECT extractor, version_id, pointers_json FROM extractions
               WHERE topic_id = ? AND run_id = ? ORDER BY created_at DESC, extraction_key""",
            [topic_id, run_id],
        ).fetchall()
        return [(e, v, json.loads(p)) for e, v, p in rows]

    # What a grown run version's answer builds on (`extract/replay.py`)

    def earlier_versions(self, run_ids: Sequence[str]) -> list[tuple[str, str]]:
        """(run_id, version_id) of every stored version of these runs, newest first per run."""
        return self.conn.execute(
            """SELECT run_id, version_id FROM runs WHERE run_id IN (SELECT unnest(?))
               ORDER BY run_id, ingested_at DESC, version_id""",
            [sorted(set(run_ids))],
        ).fetchall()

    def node_signatures(self, versions: Sequence[RunVersion]) -> dict[RunVersion, dict[str, tuple[tuple, int]]]:
        """Per run version, each text node's path -> (what its answer depends on, its document
        position); its text is not read, only its checksum."""
        if not versions:
            return {}
        # The id range and `= ANY` are pushed into the scan (as `RunRecords.load_run_nodes` does);
        # the pair test keeps the result exact.
        rows = self.conn.execute(
            """SELECT run_id, version_id, json_path, checksum, node_type, branch, hidden, speaker, timestamp, position
               FROM nodes WHERE run_id BETWEEN $first AND $last AND version_id = ANY($wanted)
               AND (run_id, version_id) IN (SELECT unnest($runs), unnest($versions))""",
            {
                "runs": [v.run_id for v in versions],
                "versions": [v.version_id for v in versions],
                "first": min(v.run_id for v in versions),
                "last": max(v.run_id for v in versions),
                "wanted": sorted({v.version_id for v in versions}),
            },
        ).fetchall()
        out: dict[RunVersion, dict[str, tuple[tuple, int]]] = {}
        for run_id, version_id, path, *signature, position in rows:
            out.setdefault(RunVersion(run_id, version_id), {})[path] = (tuple(signature), position)
        return out

    def pointers_by_key(self, keys: Sequence[str]) -> dict[str, list]:
        """The stored pointers of these answers, by extraction key."""
        rows = self.conn.execute(
            "SELECT extraction_key, pointers_json FROM extractions WHERE extraction_key IN (SELECT unnest(?))", [list(keys)]
        ).fetchall()
        return {k: json.loads(p) or [] for k, p in rows}
