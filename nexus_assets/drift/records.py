"""The vault's record of drift (invariant 14): each source node's status as the files stand now,
every flip of it, and the brick-level `stale` flag derived from it.

`vault.drift`. Status is kept per source node (run, path, checksum): every address into
one node shares its fate. A brick is stale when its canonical source (seq 0) has drifted.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Mapping

from nexus_assets.core.models import SourceAddress
from nexus_assets.vault.records import Records

NodeKey = tuple[str, str, str]  # run_id, json_path, node_checksum


def node_key(a: SourceAddress) -> NodeKey:
    return (a.run_id, a.json_path, a.node_checksum)


class DriftRecords(Records):

    def record_source_status(
        self, checked: Iterable[SourceAddress], drifted: Mapping[SourceAddress, str], *, observed_by: str
    ) -> list[dict]:
        """Store what a check saw for every address it checked (drifted or matching again) and
        re-derive the `stale` flag of the bricks those nodes back. Returns the flips, oldest state first."""
        seen: dict[NodeKey, str | None] = {}
        for a in checked:
            seen.setdefault(node_key(a), None)
        for a, problem in drifted.items():
            if seen.get(node_key(a)) is None:
                seen[node_key(a)] = problem
        if not seen:
            return []
        keys = sorted(seen)
        stamp = datetime.now(timezone.utc)
        cols = [[k[i] for k in keys] for i in range(3)]
        before = {
            (r, p, c): d
            for r, p, c, d in self.conn.execute(
                """SELECT s.run_id, s.json_path, s.node_checksum, s.drifted FROM source_status s
                   JOIN (SELECT unnest(?) AS run_id, unnest(?) AS json_path, unnest(?) AS node_checksum) k
                   USING (run_id, json_path, node_checksum)""",
                cols,
            ).fetchall()
        }
        # A node never seen drifted needs no row: absence means it matches.
        flips = [
            {"run_id": k[0], "json_path": k[1], "node_checksum": k[2], "drifted": seen[k] is not None, "problem": seen[k]}
            for k in keys
            if before.get(k, False) != (seen[k] is not None)
        ]
        rows = [k for k in keys if k in before or seen[k] is not None]
        if rows:
            self.conn.execute(
                """INSERT INTO source_status
                   SELECT unnest(?), unnest(?), unnest(?), unnest(?), unnest(?), ?
                   ON CONFLICT (run_id, json_path, node_checksum) DO UPDATE
                   SET drifted = excluded.drifted, problem = excluded.problem, checked_at = excluded.checked_at""",
                [
                    [k[0] for k in rows],
                    [k[1] for k in rows],
                    [k[2] for k in rows],
                    [seen[k] is not None for k in rows],
                    [seen[k] for k in rows],
                    stamp,
                ],
            )
        if flips:
            self.conn.execute(
                """INSERT INTO source_status_history
                   SELECT unnest(?), unnest(?), unnest(?), unnest(?), unnest(?), ?, ?""",
                [
                    [f["run_id"] for f in flips],
                    [f["json_path"] for f in flips],
                    [f["node_checksum"] for f in flips],
                    [f["drifted"] for f in flips],
                    [f["problem"] for f in flips],
                    observed_by,
                    stamp,
                ],
            )
            self._refresh_stale([(f["run_id"], f["json_path"], f["node_checksum"]) for f in flips], stamp)
        return flips

    def _refresh_stale(self, keys: list[NodeKey], stamp: datetime) -> None:
        self.conn.execute(
            """UPDATE bricks SET stale = x.stale, updated_at = ?
               FROM (
                   SELECT s.brick_id, coalesce(st.drifted, false) AS stale
                   FROM brick_sources s
                   JOIN (SELECT unnest(?) AS run_id, unnest(?) AS json_path, unnest(?) AS node_checksum) k
                        USING (run_id, json_path, node_checksum)
                   LEFT JOIN source_status st USING (run_id, json_path, node_checksum)
                   WHERE s.seq = 0
               ) x
               WHERE bricks.brick_id = x.brick_id AND bricks.stale <> x.stale""",
            [stamp, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]],
        )

    def refresh_topic_stale(self, topic_id: str) -> None:
        """Re-derive every brick's flag of a topic from its canonical source (after publishing,
        since a linked source may have become canonical)."""
        self.conn.execute(
            """UPDATE bricks SET stale = x.stale
               FROM (
                   SELECT b.brick_id, coalesce(st.drifted, false) AS stale
                   FROM bricks b
                   LEFT JOIN brick_sources s ON s.brick_id = b.brick_id AND s.seq = 0
                   LEFT JOIN source_status st USING (run_id, json_path, node_checksum)
                   WHERE b.topic_id = ?
               ) x
               WHERE bricks.brick_id = x.brick_id AND bricks.stale <> x.stale""",
            [topic_id],
        )

    def drifted_addresses(self, topic_id: str | None = None) -> dict[SourceAddress, str]:
        """Every source address (of the topic's bricks) whose node is recorded as drifted, with why."""
        where = "WHERE b.topic_id = ?" if topic_id else ""
        rows = self.conn.execute(
            f"""SELECT DISTINCT s.run_id, s.json_path, s.start_offset, s.end_offset, s.node_checksum, st.problem
                FROM brick_sources s
                JOIN source_status st USING (run_id, json_path, node_checksum)
                JOIN bricks b ON b.brick_id = s.brick_id
                {where} {'AND' if where else 'WHERE'} st.drifted""",
            [topic_id] if topic_id else [],
        ).fetchall()
        return {
            SourceAddress(run_id=r, json_path=p, start=s, end=e, node_checksum=c): problem or "drifted"
            for r, p, s, e, c, problem in rows
        }

    def source_problems(self, addresses: Iterable[SourceAddress]) -> dict[NodeKey, str]:
        keys = sorted({node_key(a) for a in addresses})
        if not keys:
            return {}
        rows = self.conn.execute(
            """SELECT run_id, json_path, node_checksum, problem FROM source_status
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS json_path, unnest(?) AS node_checksum) k
               USING (run_id, json_path, node_checksum)
               WHERE drifted""",
            [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]],
        ).fetchall()
        return {(r, p, c): problem or "drifted" for r, p, c, problem in rows}

    def source_status_history(self, run_id: str | None = None) -> list[dict]:
        """Every flip of a source node's status, oldest first."""
        cur = self.conn.execute(
            f"""SELECT run_id, json_path, node_checksum, drifted, problem, observed_by, observed_at
                FROM source_status_history {'WHERE run_id = ?' if run_id else ''}
                ORDER BY observed_at, rowid""",
            [run_id] if run_id else [],
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def stale_brick_ids(self, topic_id: str | None = None) -> list[str]:
        """Visible bricks flagged stale, as recorded (after `record_source_status`), without loading bricks."""
        where = "AND topic_id = ?" if topic_id else ""
        rows = self.conn.execute(
            f"SELECT brick_id FROM bricks WHERE stale AND state <> 'SUPERSEDED' {where} ORDER BY brick_id",
            [topic_id] if topic_id else [],
        ).fetchall()
        return [r[0] for r in rows]

    def stale_bricks(self, topic_id: str) -> list[dict]:
        """The topic's visible stale bricks, each with its canonical source and why it drifted."""
        cur = self.conn.execute(
            """SELECT b.brick_id, b.state, b.order_index, s.run_id, s.json_path, st.problem
               FROM bricks b
               JOIN brick_sources s ON s.brick_id = b.brick_id AND s.seq = 0
               LEFT JOIN source_status st USING (run_id, json_path, node_checksum)
               WHERE b.topic_id = ? AND b.stale AND b.state <> 'SUPERSEDED'
               ORDER BY b.order_index NULLS LAST, b.brick_id""",
            [topic_id],
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def addresses_after_latest(self, topic_id: str) -> set[SourceAddress]:
        """The topic's addresses seen only in versions of their run first read after its latest one:
        the file went back to bytes read before (`restore_versions`). Empty unless a run was restored."""
        rows = self.conn.execute(
            """WITH seq AS (
                   SELECT run_id, version_id, is_latest,
                          row_number() OVER (PARTITION BY run_id ORDER BY ingested_at, version_id) AS n
                   FROM runs),
               latest AS (SELECT run_id, n FROM seq WHERE is_latest),
               restored AS (SELECT DISTINCT run_id FROM seq JOIN latest l USING (run_id) WHERE seq.n > l.n)
               SELECT o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum
               FROM occurrences o JOIN seq v USING (run_id, version_id) JOIN latest l USING (run_id)
               WHERE o.topic_id = ? AND o.run_id IN (SELECT run_id FROM restored)
               GROUP BY o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum
               HAVING min(v.n) > min(l.n)""",
            [topic_id],
        ).fetchall()
        return {SourceAddress(run_id=r, json_path=p, start=s, end=e, node_checksum=c) for r, p, s, e, c in rows}

    def restore_versions(self, sha: str, source_file: str) -> list[str]:
        """A file back to bytes it held before: the run versions read from those bytes become the
        latest again for runs whose latest version came from this same path. Returns those run ids."""
        rows = self.conn.execute(
            """SELECT DISTINCT o.run_id, o.version_id FROM runs o
               JOIN runs l ON l.run_id = o.run_id AND l.is_latest AND l.version_id <> o.version_id
               WHERE o.file_sha256 = ? AND l.source_file = ?""",
            [sha, source_file],
        ).fetchall()
        for run_id, version_id in rows:
            self.conn.execute("UPDATE runs SET is_latest = (version_id = ?) WHERE run_id = ?", [version_id, run_id])
        return sorted(r for r, _ in rows)

    def runs_off_their_file(self, run_ids: Iterable[str]) -> set[str]:
        """Runs whose latest version came from bytes other than the ones last read at its source
        path: the file was rewritten into something that does not give that version (it no longer
        reads, or holds other runs), and its new stat is recorded, so only this tells."""
        rows = self.conn.execute(
            """SELECT r.run_id FROM runs r LEFT JOIN file_stats f ON f.path = r.source_file
               WHERE r.is_latest AND r.run_id IN (SELECT unnest(?)) AND f.file_sha256 IS DISTINCT FROM r.file_sha256""",
            [sorted(set(run_ids))],
        ).fetchall()
        return {r[0] for r in rows}

    def run_file_copies(self) -> list[tuple[str, str, list[str]]]:
        """(source file, sha256, other paths last read with those bytes) for each file the latest
        version of some run came from whose bytes were read under another path too."""
        rows = self.conn.execute(
            """WITH src AS (SELECT DISTINCT source_file, file_sha256 FROM runs WHERE is_latest)
               SELECT s.source_file, s.file_sha256, list(f.path ORDER BY f.path)
               FROM src s JOIN file_stats f ON f.file_sha256 = s.file_sha256 AND f.path <> s.source_file
               GROUP BY 1, 2 ORDER BY 1, 2"""
        ).fetchall()
        return [(f, sha, list(paths)) for f, sha, paths in rows]

    def file_records(self, paths: Iterable[str]) -> dict[str, tuple[tuple[int, int, int, int], str]]:
        """path -> ((size, mtime_ns, ctime_ns, inode), sha256) as last read."""
        rows = self.conn.execute(
            "SELECT path, size, mtime_ns, ctime_ns, inode, file_sha256 FROM file_stats WHERE path IN (SELECT unnest(?))",
            [sorted(set(paths))],
        ).fetchall()
        return {r[0]: (tuple(r[1:5]), r[5]) for r in rows}

    def move_run_sources(self, old: str, sha: str, new: str) -> list[str]:
        """The latest versions read from `old` with these bytes are now read from `new` (the same
        bytes): where verify and drift look moves, nothing else. Returns those run ids."""
        rows = self.conn.execute(
            """UPDATE runs SET source_file = ? WHERE is_latest AND source_file = ? AND file_sha256 = ?
               RETURNING run_id""",
            [new, old, sha],
        ).fetchall()
        return sorted(r[0] for r in rows)
