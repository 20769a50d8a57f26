"""The gate's verdicts: occurrences (pointers that passed, with their offsets and checksums) and
rejections (with reason codes), and what the hallucination check and `nexus eval` read of them."""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from nexus_assets.core.models import (
    Occurrence,
    Rejection,
    SourceAddress,
    trusted,
)
from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records, RunVersion, storable_text


class OccurrenceRecords(Records):
    """The `occurrences` and `rejections` tables, written by the gate."""

    def store_validations(
        self, results: Sequence[tuple[str, RunVersion, Sequence[Occurrence], Sequence[Rejection]]]
    ) -> None:
        """Store the gate's verdicts for several extractions with one insert per table."""
        stamp = now()
        self._insert_df(
            "occurrences",
            [
                {
                    "topic_id": o.topic_id,
                    "run_id": o.address.run_id,
                    "version_id": run.version_id,
                    "json_path": o.address.json_path,
                    "start_offset": o.address.start,
                    "end_offset": o.address.end,
                    "node_checksum": o.address.node_checksum,
                    "node_type": o.address.node_type,
                    "branch": o.address.branch,
                    "content": o.content,
                    "fingerprint": o.fingerprint,
                    "ts": o.timestamp,
                    "position": o.position,
                    "extraction_key": key,
                }
                for key, run, occurrences, _ in results
                for o in occurrences
            ],
        )
        self._insert_df(
            "rejections",
            [
                {
                    "extraction_key": key,
                    "seq": i,
                    "topic_id": r.topic_id,
                    "run_id": r.run_id,
                    "version_id": run.version_id,
                    # What the model sent, which may not be Unicode text at all.
                    "json_path": storable_text(r.json_path),
                    "verbatim_quote": storable_text(r.verbatim_quote),
                    "reason": r.reason,
                    "detail": storable_text(r.detail),
                    "recorded_at": stamp,
                }
                for key, run, _, rejections in results
                for i, r in enumerate(rejections)
            ],
        )
        if results:
            self.conn.execute(
                "UPDATE extractions SET validated = true WHERE extraction_key IN (SELECT unnest(?))",
                [[key for key, *_ in results]],
            )

    def stream(self, topic_id: str, *, fingerprints: Iterable[str] | None = None) -> Iterator[tuple[Occurrence, str]]:
        """Every occurrence ever validated for the topic (or only those of these `fingerprints`),
        with the run version it was seen in. Streamed in batches, so the raw rows of a large topic
        are never all held at once; consume it before the next query on this vault."""
        only = "" if fingerprints is None else "AND o.fingerprint IN (SELECT unnest(?))"
        cursor = self.conn.execute(
            f"""SELECT o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum, o.content, o.fingerprint, o.ts,
                      o.position, o.version_id, o.node_type, o.branch, r.version_seq
               FROM occurrences o LEFT JOIN (
                   -- Each version's place among its run's versions, oldest first (see `canonical_key`).
                   SELECT run_id, version_id, row_number() OVER (PARTITION BY run_id ORDER BY ingested_at, version_id) AS version_seq
                   FROM runs) r USING (run_id, version_id)
               WHERE o.topic_id = ? {only}""",
            [topic_id] if fingerprints is None else [topic_id, list(fingerprints)],
        )
        # Built with `trusted`: a 200 MB export holds hundreds of thousands of occurrences. Ids and
        # paths repeat across them; each is held once.
        same: dict = {}
        held = lambda value: same.setdefault(value, value)  # noqa: E731
        while rows := cursor.fetchmany(10_000):
            for r in rows:
                address = trusted(
                    SourceAddress, run_id=held(r[0]), json_path=held(r[1]), start=r[2], end=r[3],
                    node_checksum=held(r[4]), node_type=held(r[10]), branch=held(r[11]) or "current", stale=False,
                )
                occurrence = trusted(
                    Occurrence, topic_id=topic_id, address=address, content=r[5], fingerprint=r[6],
                    timestamp=held(r[7]), position=r[8], version_seq=r[12],
                )
                yield occurrence, held(r[9])

    def fingerprints(self, topic_id: str) -> set[str]:
        """Every text's fingerprint the topic's occurrences hold."""
        rows = self.conn.execute("SELECT DISTINCT fingerprint FROM occurrences WHERE topic_id = ?", [topic_id]).fetchall()
        return {r[0] for r in rows}

    def occurrence_count(self, topic_id: str, runs: Iterable[str] | None = None) -> int:
        only, params = _of_runs("run_id", runs)
        return self.conn.execute(f"SELECT count(*) FROM occurrences WHERE topic_id = ? {only}", [topic_id, *params]).fetchone()[0]

    def occurrences_not_matching_nodes(self, topic_id: str, runs: Iterable[str] | None = None) -> list[tuple[Occurrence, str, str | None]]:
        """Occurrences whose stored node does not hold their text (invariant 1), with their run
        version and what is wrong; the problem is None where no text node was stored at that path
        (a pointer at another string leaf), which only the run's document can settle. `runs`: only
        the occurrences of these."""
        only, params = _of_runs("o.run_id", runs)
        rows = self.conn.execute(
            f"""SELECT o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum, o.content, o.fingerprint,
                      o.ts, o.position, o.version_id,
                      CASE WHEN n.text IS NULL THEN NULL
                           WHEN n.checksum <> o.node_checksum THEN 'checksum'
                           WHEN length(n.text) < o.end_offset THEN 'short'
                           ELSE 'slice' END AS problem
               FROM occurrences o LEFT JOIN nodes n
                 ON n.run_id = o.run_id AND n.version_id = o.version_id AND n.json_path = o.json_path
               WHERE o.topic_id = ? {only} AND (n.text IS NULL OR n.checksum <> o.node_checksum
                     OR length(n.text) < o.end_offset
                     OR substring(n.text, o.start_offset + 1, o.end_offset - o.start_offset) <> o.content)
               ORDER BY o.run_id, o.version_id, o.json_path, o.start_offset""",
            [topic_id, *params],
        ).fetchall()
        out = []
        for r in rows:
            occ = Occurrence(
                topic_id=topic_id,
                address=SourceAddress(run_id=r[0], json_path=r[1], start=r[2], end=r[3], node_checksum=r[4]),
                content=r[5],
                fingerprint=r[6],
                timestamp=r[7],
                position=r[8],
            )
            out.append((occ, r[9], r[10]))
        return out

    def canonical_content_mismatches(self, topic_id: str, runs: Iterable[str] | None = None) -> tuple[int, list[str]]:
        """(bricks checked, ids of bricks whose content is not the text of their canonical occurrence);
        `runs`: only the bricks with a source in these."""
        only, params = _of_runs("run_id", runs)
        scope = f"AND brick_id IN (SELECT brick_id FROM brick_sources WHERE true {only})" if runs is not None else ""
        rows = self.conn.execute(
            f"""WITH scoped AS (SELECT brick_id, content FROM bricks WHERE topic_id = ? {scope}),
                     canon AS (SELECT s.* FROM brick_sources s WHERE s.brick_id IN (SELECT brick_id FROM scoped) AND s.seq = 0),
                     occ AS (SELECT DISTINCT o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum, o.content
                             FROM occurrences o
                             WHERE (o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum) IN
                                   (SELECT run_id, json_path, start_offset, end_offset, node_checksum FROM canon)
                               AND o.topic_id = ?)
                SELECT count(*), list(b.brick_id ORDER BY b.brick_id) FILTER (WHERE o.content IS NULL OR o.content <> b.content)
                FROM scoped b
                LEFT JOIN canon s USING (brick_id)
                LEFT JOIN occ o USING (run_id, json_path, start_offset, end_offset, node_checksum)""",
            [topic_id, *params, topic_id],
        ).fetchone()
        return rows[0], list(rows[1] or [])

    def addresses_changed_in_latest(self, topic_id: str) -> tuple[set[SourceAddress], list[tuple[SourceAddress, str]]]:
        """Addresses of the topic whose run has a newer version: (those whose node there no longer has
        their checksum, those with no stored text node at that path in the newer version, with that version)."""
        rows = self.conn.execute(
            """SELECT DISTINCT o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum, l.version_id,
                      n.checksum IS NULL AS unknown,
                      n.checksum IS NOT NULL AND (n.checksum <> o.node_checksum OR length(n.text) < o.end_offset) AS changed
               FROM occurrences o
               JOIN runs l ON l.run_id = o.run_id AND l.is_latest AND l.version_id <> o.version_id
               LEFT JOIN nodes n ON n.run_id = o.run_id AND n.version_id = l.version_id AND n.json_path = o.json_path
               WHERE o.topic_id = ?""",
            [topic_id],
        ).fetchall()
        changed, unknown = set(), []
        for run_id, path, start, end, checksum, latest, is_unknown, is_changed in rows:
            a = SourceAddress(run_id=run_id, json_path=path, start=start, end=end, node_checksum=checksum)
            if is_unknown:
                unknown.append((a, latest))
            elif is_changed:
                changed.add(a)
        return changed, unknown

    def rejections(self, topic_id: str) -> list[dict]:
        cur = self.conn.execute(
            """SELECT topic_id, run_id, json_path, verbatim_quote, reason, detail FROM rejections
               WHERE topic_id = ? ORDER BY run_id, recorded_at, extraction_key, seq""",
            [topic_id],
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def rejection_counts(self, topic_id: str) -> dict[str, int]:
        return dict(
            self.conn.execute(
                "SELECT reason, count(*) FROM rejections WHERE topic_id = ? GROUP BY reason ORDER BY reason", [topic_id]
            ).fetchall()
        )

    def pointer_verdict_counts(self, topic_id: str) -> tuple[int, int]:
        """(accepted, rejected) pointers of the topic, from the stored occurrences and rejections."""
        return self.conn.execute(
            """SELECT (SELECT count(*) FROM occurrences WHERE topic_id = ?),
                      (SELECT count(*) FROM rejections WHERE topic_id = ?)""",
            [topic_id, topic_id],
        ).fetchone()

    def brick_source_spans(self, topic_id: str) -> list[tuple[str, str, int, int]]:
        """(run_id, json_path, start, end) of every source address of every brick of the topic,
        superseded ones included: each is text the extractor found and the gate accepted."""
        return self.conn.execute(
            """SELECT DISTINCT s.run_id, s.json_path, s.start_offset, s.end_offset
               FROM brick_sources s JOIN bricks b USING (brick_id)
               WHERE b.topic_id = ? ORDER BY 1, 2, 3, 4""",
            [topic_id],
        ).fetchall()


def _of_runs(column: str, runs: Iterable[str] | None) -> tuple[str, list]:
    """A filter to `runs` (nothing when None), and its parameter."""
    if runs is None:
        return "", []
    return f"AND {column} IN (SELECT unnest(?))", [sorted(runs)]
