"""The record's rows (DESIGN §3.1): each run's passages as addresses into its stored nodes, and
which run versions they were built for. A passage's text is never stored twice: it is the slice
of its node's text, which the `nodes` table already holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records, RunVersion

if TYPE_CHECKING:
    from nexus_assets.ingest.names import RunName

# Latest passages read per query when an index is built: a slice at a time, never all at once.
PASSAGE_SLICE = 50_000


@dataclass(frozen=True)
class PassageRow:
    """A passage of a run's latest version, with what recall filters and shows by."""

    passage_id: str
    run_id: str
    version_id: str
    json_path: str
    start: int
    end: int
    kind: str
    node_checksum: str
    node_type: str
    hidden: bool
    branch: str
    speaker: str | None
    timestamp: str | None  # the message's, else the run's start
    position: int
    text: str


def passage_source(row: PassageRow, name: RunName | None, *, stale: bool = False) -> dict:
    """A passage's one source, with its conversation's title, its speaker and time (DESIGN §7), as
    recall results and a passage's own object (trace, the API, MCP) show it."""
    return {
        "run_id": row.run_id, "json_path": row.json_path, "start": row.start, "end": row.end,
        "node_checksum": row.node_checksum, "node_type": row.node_type, "branch": row.branch, "stale": stale,
        "speaker": row.speaker, "time": row.timestamp,
        "run_title": name.title if name else None, "run_date": name.date if name else None,
    }


# Every run version that holds a passage's node, latest or not (what trace reads: a passage a
# later version of its run no longer holds is still shown, as drifted).
_ANY_VERSION = """
    FROM passages p
    JOIN nodes n ON n.run_id = p.run_id AND n.json_path = p.json_path AND n.checksum = p.node_checksum
    JOIN runs r ON r.run_id = n.run_id AND r.version_id = n.version_id
"""
_LATEST = _ANY_VERSION + "    AND r.is_latest\n"
# In PassageRow's field order. substr counts characters (code points) from 1 in both engines.
_COLUMNS = """p.passage_id, p.run_id, n.version_id, p.json_path, p.start_offset, p.end_offset, p.kind, p.node_checksum,
    n.node_type, n.hidden, n.branch, n.speaker, coalesce(n.timestamp, r.started_at), n.position,
    substr(n.text, p.start_offset + 1, p.end_offset - p.start_offset)"""


class PassageRecords(Records):
    """The `passages` and `passage_builds` tables: written when runs are read, read by recall."""

    def unbuilt_versions(self, splitter: str) -> list[RunVersion]:
        """Latest run versions whose passages this splitter has not built yet, in run id order."""
        rows = self.conn.execute(
            """SELECT r.run_id, r.version_id FROM runs r WHERE r.is_latest AND NOT EXISTS (
                   SELECT 1 FROM passage_builds b WHERE b.run_id = r.run_id AND b.version_id = r.version_id AND b.splitter = ?)
               ORDER BY r.run_id""",
            [splitter],
        ).fetchall()
        return [RunVersion(r, v) for r, v in rows]

    def split_nodes(self, run_ids: Iterable[str]) -> set[tuple[str, str, str]]:
        """(run_id, json_path, node_checksum) of every node of these runs already split: a new
        version's unchanged nodes keep their passages."""
        run_ids = sorted(set(run_ids))
        if not run_ids:
            return set()
        rows = self.conn.execute(
            "SELECT DISTINCT run_id, json_path, node_checksum FROM passages WHERE run_id IN (SELECT unnest(?))", [run_ids]
        ).fetchall()
        return {(r, p, c) for r, p, c in rows}

    def store(self, rows: Sequence[dict], built: Sequence[tuple[RunVersion, int]], splitter: str) -> None:
        """New passages and the versions they complete, in one transaction."""
        stamp = now()
        with self.transaction():
            for start in range(0, len(rows), PASSAGE_SLICE):
                self._insert_df("passages", list(rows[start : start + PASSAGE_SLICE]), conflict=None)
            self._insert_df(
                "passage_builds",
                [{"run_id": rv.run_id, "version_id": rv.version_id, "splitter": splitter, "passages": n, "built_at": stamp}
                 for rv, n in built],
                conflict=None,
            )

    def built_versions(self, splitter: str) -> dict[str, str]:
        """run_id -> its latest version, for every run whose latest version has its passages."""
        rows = self.conn.execute(
            """SELECT r.run_id, r.version_id FROM runs r JOIN passage_builds b
                 ON b.run_id = r.run_id AND b.version_id = r.version_id AND b.splitter = ?
               WHERE r.is_latest""",
            [splitter],
        ).fetchall()
        return dict(rows)

    def newest_build_runs(self) -> list[str]:
        """The runs the newest build split (what a sync's check reads)."""
        rows = self.conn.execute(
            "SELECT DISTINCT run_id FROM passage_builds WHERE built_at = (SELECT max(built_at) FROM passage_builds) ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def latest_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute(f"SELECT p.passage_id {_LATEST}").fetchall()]

    def latest_count(self) -> int:
        return self.conn.execute(f"SELECT count(*) {_LATEST}").fetchone()[0]

    def latest(self, run_ids: Iterable[str] | None = None) -> Iterator[PassageRow]:
        """The passages of each run's latest version (of these runs), in run and document order,
        streamed: each query reads about PASSAGE_SLICE passages at most (runs gathered until
        they hold that many; a run holding more read in windows of its node positions), so what
        the engine joins and sorts at once stays one slice, whatever the size of a run."""
        where, params = "", []
        if run_ids is not None:
            where, params = "WHERE p.run_id IN (SELECT unnest(?))", [sorted(set(run_ids))]
        sizes = self.conn.execute(
            f"SELECT p.run_id, count(*), min(n.position), max(n.position) {_LATEST} {where} GROUP BY 1 ORDER BY 1", params
        ).fetchall()
        batch: list[str] = []
        held = 0
        for run, count, low, high in sizes:
            if batch and (held + count > PASSAGE_SLICE or count > PASSAGE_SLICE):
                yield from self._read_latest("p.run_id IN (SELECT unnest(?))", [batch])
                batch, held = [], 0
            if count <= PASSAGE_SLICE:
                batch.append(run)
                held += count
                continue
            windows = -(-count // PASSAGE_SLICE)
            width = -(-(high - low + 1) // windows)
            for w in range(windows):
                yield from self._read_latest(
                    "p.run_id = ? AND n.position BETWEEN ? AND ?", [run, low + w * width, low + (w + 1) * width - 1]
                )
        if batch:
            yield from self._read_latest("p.run_id IN (SELECT unnest(?))", [batch])

    def _read_latest(self, where: str, params: list) -> Iterator[PassageRow]:
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} {_LATEST} WHERE {where} ORDER BY p.run_id, n.position, p.json_path, p.start_offset", params
        ).fetchall()
        for row in rows:
            yield PassageRow(*row)

    def by_ids(self, passage_ids: Iterable[str], runs: Iterable[str] | None = None) -> dict[str, PassageRow]:
        """The latest passages with these ids; `runs`, the runs they are in when the caller knows
        them (recall does), lets the engine skip every other run's rows (8 ms against 66 on LoCoMo)."""
        ids = sorted(set(passage_ids))
        if not ids:
            return {}
        # A held vault (a warm server) remembers the passages it read: a passage never changes
        # under a hold, and a query asked again reads none from the vault.
        wanted = sorted(set(runs)) if runs is not None else None
        return self.vault.remembered_each("passages", ids, lambda missing: self._by_ids(missing, wanted))

    def _by_ids(self, ids: list[str], runs: list[str] | None) -> dict[str, PassageRow]:
        if runs is None:
            rows = self.conn.execute(f"SELECT {_COLUMNS} {_LATEST} WHERE p.passage_id IN (SELECT unnest(?))", [ids]).fetchall()
        else:
            rows = self.conn.execute(
                f"""SELECT {_COLUMNS} {_LATEST} WHERE p.run_id IN (SELECT unnest(?)) AND n.run_id IN (SELECT unnest(?))
                      AND p.passage_id IN (SELECT unnest(?))""",
                [runs, runs, ids],
            ).fetchall()
        return {r[0]: PassageRow(*r) for r in rows}

    def ids_with_prefix(self, prefix: str, limit: int = 3) -> list[str]:
        """Passage ids (of any version) starting with `prefix`: one means the prefix names it."""
        rows = self.conn.execute(
            "SELECT DISTINCT passage_id FROM passages WHERE passage_id >= ? AND passage_id < ? ORDER BY 1 LIMIT ?",
            [prefix, prefix + "\uffff", limit],
        ).fetchall()
        return [r[0] for r in rows]

    def last_seen(self, passage_id: str) -> PassageRow | None:
        """The passage as the newest run version that holds it reads it: its run's latest version, or
        (when the run was read again and changed there) the last version it was in."""
        found = self.conn.execute(
            f"""SELECT {_COLUMNS} {_ANY_VERSION} WHERE p.passage_id = ?
                ORDER BY r.is_latest DESC, r.ingest_seq DESC, n.checksum LIMIT 1""",
            [passage_id],
        ).fetchone()
        return PassageRow(*found) if found else None

    def around(self, row: PassageRow, before: int = 2, after: int = 2) -> list[PassageRow]:
        """The passage with the passages next to it in its node, as its run version reads it (the
        text around it)."""
        rows = self.conn.execute(
            f"""SELECT {_COLUMNS} {_ANY_VERSION}
                WHERE p.run_id = ? AND p.json_path = ? AND p.node_checksum = ? AND n.version_id = ?
                ORDER BY p.start_offset""",
            [row.run_id, row.json_path, row.node_checksum, row.version_id],
        ).fetchall()
        found = [PassageRow(*r) for r in rows]
        at = next((i for i, p in enumerate(found) if p.passage_id == row.passage_id), None)
        return found if at is None else found[max(0, at - before) : at + after + 1]

    def forget_runs(self, run_ids: Iterable[str]) -> int:
        """Every passage and build record of these runs (invariant 15: the one deletion)."""
        run_ids = sorted(set(run_ids))
        if not run_ids:
            return 0
        n = self.conn.execute("SELECT count(*) FROM passages WHERE run_id IN (SELECT unnest(?))", [run_ids]).fetchone()[0]
        self.conn.execute("DELETE FROM passages WHERE run_id IN (SELECT unnest(?))", [run_ids])
        self.conn.execute("DELETE FROM passage_builds WHERE run_id IN (SELECT unnest(?))", [run_ids])
        return n
