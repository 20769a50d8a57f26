"""Run files, runs and their versions, text nodes and ingestion errors: what ingestion writes and every
later phase reads a run from."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from itertools import islice
from typing import Iterable, Mapping, Sequence

from nexus_assets.core.models import (
    IngestionError,
    Run,
    RunStatus,
)
from nexus_assets.ingest.formats import READER_VERSION
from nexus_assets.ingest.names import RunName, run_name
from nexus_assets.ingest.nodes import (
    NodeRecord,
    StepsCache,
    node_from_record,
    node_records,
    run_from_nodes,
)
from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records, RunVersion

# File contents whose every verdict found problems under an older reader than READER_VERSION
# (bound as ?): they are read again.
_OUTDATED_VERDICTS = (
    "SELECT file_sha256 FROM run_files GROUP BY file_sha256 HAVING NOT bool_or(errors = 0 OR coalesce(reader_version, 1) >= ?)"
)

# Text nodes stored per insert, for the same reason.
NODE_SLICE = 20_000
# In NodeRecord's field order, so a row becomes a record positionally.
NODE_COLUMNS = ", ".join(f"n.{f.name}" for f in fields(NodeRecord))


def _node_filter(keys: list[RunVersion], only: Mapping[RunVersion, Iterable[str]] | None) -> tuple[str, dict]:
    """The exact test of `load_run_nodes` on a node row, and its parameters: the wanted (run,
    version) pairs, or with `only` the wanted (run, version, path) triples."""
    if only is None:
        test = "(run_id, version_id) IN (SELECT unnest($runs), unnest($run_versions))"
        return test, {"runs": [k.run_id for k in keys], "run_versions": [k.version_id for k in keys]}
    triples = [(k.run_id, k.version_id, path) for k in keys for path in sorted(set(only.get(k, ())))]
    test = "(run_id, version_id, json_path) IN (SELECT unnest($runs), unnest($run_versions), unnest($paths))"
    return test, {"runs": [t[0] for t in triples], "run_versions": [t[1] for t in triples], "paths": [t[2] for t in triples]}




class RunRecords(Records):
    """The `run_files`, `file_stats`, `runs`, `nodes` and `ingestion_errors` tables: written by ingestion,
    read by every later phase."""

    # Run files and runs

    def files_seen(self) -> set[str]:
        """The sha256 of every file content read for good: one query for a sync, not one per file.

        Content that had problems under an older reader is not among them: it is read again.
        """
        rows = self.conn.execute(
            f"SELECT DISTINCT file_sha256 FROM run_files WHERE file_sha256 NOT IN ({_OUTDATED_VERDICTS})", [READER_VERSION]
        )
        return {r[0] for r in rows.fetchall()}

    def file_stats(self) -> dict[str, tuple[int, int, int, int]]:
        """(size, mtime_ns, ctime_ns, inode) of every run file as it was when last read, by absolute path;
        not of a file whose content is to be read again (see `files_seen`)."""
        rows = self.conn.execute(
            f"SELECT path, size, mtime_ns, ctime_ns, inode FROM file_stats WHERE file_sha256 NOT IN ({_OUTDATED_VERDICTS})",
            [READER_VERSION],
        ).fetchall()
        return {r[0]: tuple(r[1:]) for r in rows}

    def latest_sources(self) -> dict[str, frozenset[str]]:
        """Source path -> the sha256 of the bytes each latest run version from that path was read
        from: `restore_versions` changes nothing at a path whose set is at most the bytes it holds."""
        rows = self.conn.execute(
            "SELECT source_file, list(DISTINCT file_sha256) FROM runs WHERE is_latest GROUP BY source_file"
        ).fetchall()
        return {path: frozenset(shas) for path, shas in rows}

    def file_verdicts(self) -> dict[str, tuple[frozenset[str], bool]]:
        """sha256 -> (the names its bytes were read under, whether the first reading found problems):
        what `copy_file_verdict` decides from, in one query for a sync instead of one per file."""
        rows = self.conn.execute("SELECT file_sha256, path, errors FROM run_files ORDER BY file_sha256, first_seen, path").fetchall()
        names: dict[str, set[str]] = {}
        broken: dict[str, bool] = {}
        for sha, path, errors in rows:
            names.setdefault(sha, set()).add(path)
            broken.setdefault(sha, bool(errors))
        return {sha: (frozenset(paths), broken[sha]) for sha, paths in names.items()}

    def record_file_stats(self, stats: Sequence[tuple[str, tuple[int, int, int, int], str]]) -> None:
        """(absolute path, (size, mtime_ns, ctime_ns, inode), sha256) of files read completely."""
        stamp = now()
        self._insert_df(
            "file_stats",
            [
                {"path": p, "size": st[0], "mtime_ns": st[1], "ctime_ns": st[2], "inode": st[3], "file_sha256": sha, "recorded_at": stamp}
                for p, st, sha in stats
            ],
            conflict="(path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, ctime_ns = excluded.ctime_ns, "
            "inode = excluded.inode, file_sha256 = excluded.file_sha256, recorded_at = excluded.recorded_at",
        )

    def copy_file_verdict(self, file_sha256: str, path: str) -> list[IngestionError]:
        """A file whose bytes were read before under another name: if those bytes were broken,
        name this file too (same problems), once. Returns the errors recorded for `path`."""
        rows = self.conn.execute(
            "SELECT path, runs, errors FROM run_files WHERE file_sha256 = ? ORDER BY first_seen, path", [file_sha256]
        ).fetchall()
        if not rows or any(p == path for p, _, _ in rows) or not rows[0][2]:
            return []
        first, runs, count = rows[0]
        problems = self.conn.execute(
            "SELECT conversation, problem FROM ingestion_errors WHERE file = ? AND file_sha256 = ? ORDER BY recorded_at",
            [first, file_sha256],
        ).fetchall()
        copies = [IngestionError(path, problem, conversation, file_sha256) for conversation, problem in problems]
        with self.transaction():
            self.record_errors(copies)
            self.record_files([(file_sha256, path, runs, count)])
        return copies

    def record_files(self, files: Sequence[tuple[str, str, int, int]]) -> None:
        """(file_sha256, path, runs, errors) of files read completely."""
        stamp = now()
        self._insert_df(
            "run_files",
            [
                {"file_sha256": h, "path": p, "runs": r, "errors": e, "first_seen": stamp, "reader_version": READER_VERSION}
                for h, p, r, e in files
            ],
            # A file read again by a newer reader: its verdict is the new one.
            conflict="(file_sha256, path) DO UPDATE SET runs = excluded.runs, errors = excluded.errors, "
            "reader_version = excluded.reader_version",
        )

    def record_errors_once(self, errors: Sequence[IngestionError]) -> None:
        """Record the errors not already recorded with the same file and problem: a path a sync
        skips without reading it (a link out of the runs folder) is named once, not per sync."""
        known = set(
            self.conn.execute(
                "SELECT file, problem FROM ingestion_errors WHERE file IN (SELECT unnest(?))", [sorted({e.file for e in errors})]
            ).fetchall()
        )
        self.record_errors([e for e in errors if (e.file, e.problem) not in known])

    def record_errors(self, errors: Sequence[IngestionError]) -> None:
        self._insert_df(
            "ingestion_errors",
            [
                {"file": e.file, "file_sha256": e.file_sha256, "conversation": e.conversation, "problem": e.problem, "recorded_at": now()}
                for e in errors
            ],
            conflict=None,
        )

    def latest_versions(self, run_ids: Iterable[str] | None = None) -> dict[str, str]:
        if run_ids is None:
            return dict(self.conn.execute("SELECT run_id, version_id FROM runs WHERE is_latest").fetchall())
        return dict(
            self.conn.execute(
                "SELECT run_id, version_id FROM runs WHERE is_latest AND run_id IN (SELECT unnest(?))", [sorted(set(run_ids))]
            ).fetchall()
        )

    def store_runs(self, items: Sequence[tuple[Run, str, str]]) -> tuple[list[Run], list[Run]]:
        """Insert (run, source file, file sha256) items not seen before; returns (new runs, new
        versions of known runs).

        A known (run_id, version_id) is a no-op. A new version becomes the latest one; older
        versions stay so every stored address can still be shown.
        """
        if not items:
            return [], []
        runs = [run for run, _, _ in items]
        source = {id(run): (f, sha) for run, f, sha in items}
        latest = self.latest_versions(r.run_id for r in runs)
        known = {
            (r, v)
            for r, v in self.conn.execute(
                "SELECT run_id, version_id FROM runs WHERE run_id IN (SELECT unnest(?))", [[r.run_id for r in runs]]
            ).fetchall()
        }
        fresh, changed, rows, seen_again = [], [], [], []
        for run in runs:
            if (run.run_id, run.version_id) in known:
                seen_again.append([*source[id(run)], run.run_id, run.version_id])
                continue
            known.add((run.run_id, run.version_id))
            (changed if run.run_id in latest else fresh).append(run)
            rows.append(run)
        if seen_again:
            # A re-export under another name: same content, so only where `verify` should look moves.
            self.conn.executemany(
                "UPDATE runs SET source_file = ?, file_sha256 = ? WHERE run_id = ? AND version_id = ?",
                seen_again,
            )
        if not rows:
            return [], []
        seq_base = self.conn.execute("SELECT nextval('ingest_seq')").fetchone()[0]
        previous_seq = dict(
            self.conn.execute(
                "SELECT run_id, min(ingest_seq) FROM runs WHERE run_id IN (SELECT unnest(?)) GROUP BY run_id",
                [[r.run_id for r in changed]],
            ).fetchall()
        ) if changed else {}
        self.conn.execute(
            "UPDATE runs SET is_latest = false WHERE is_latest AND run_id IN (SELECT unnest(?))",
            [[r.run_id for r in rows]],
        )
        stamp = now()
        last_row = {r.run_id: i for i, r in enumerate(rows)}
        self._insert_df(
            "runs",
            [
                {
                    "run_id": r.run_id,
                    "version_id": r.version_id,
                    "format": r.format,
                    "status": r.status,
                    "started_at": r.started_at,
                    "source_file": source[id(r)][0],
                    "file_sha256": source[id(r)][1],
                    "raw_json": json.dumps(r.document, ensure_ascii=False),
                    # Ingestion order is per run, not per version: a new version keeps its place.
                    "ingest_seq": previous_seq.get(r.run_id, seq_base * 1_000_000 + i),
                    "is_latest": last_row[r.run_id] == i,
                    "ingested_at": stamp,
                }
                for i, r in enumerate(rows)
            ],
        )
        self.store_nodes(record for r in rows for record in node_records(r))
        return fresh, changed

    def store_nodes(self, records: Iterable[NodeRecord]) -> None:
        # A slice at a time: a run of a million one-line messages as one frame took ~500 MB
        # more than its text (invariant 12). vars(), not asdict(): asdict deep-copies each scalar.
        records = iter(records)
        while chunk := [vars(r) for r in islice(records, NODE_SLICE)]:
            self._insert_df("nodes", chunk)

    def load_run_nodes(
        self, keys: Iterable[RunVersion], *, only: Mapping[RunVersion, Iterable[str]] | None = None
    ) -> dict[RunVersion, Run]:
        """Run versions rebuilt from their stored text nodes (no raw JSON is parsed). With `only`,
        each version holds just the nodes at those normalized paths (what the gate needs to judge
        pointers at them), so the rest of its text is not read."""
        keys = list(keys)
        if not keys:
            return {}
        wanted = [[k.run_id for k in keys], [k.version_id for k in keys]]
        heads = self.conn.execute(
            """SELECT r.run_id, r.version_id, r.format, r.started_at FROM runs r
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS version_id) k USING (run_id, version_id)""",
            wanted,
        ).fetchall()
        # A filter, not a join: joining the key list made DuckDB read every node's text, once per
        # chunk (4.5 s per pass over 100 MB of runs, against 1.3 s). `= ANY` is pushed into the
        # scan, so only the chunk's text is read; the pair (or path) test keeps the result exact.
        # Callers pass chunks sorted by run id: the id range is a cheap first test, and it skips
        # whole row groups where runs were ingested in id order.
        test, params = _node_filter(keys, only)
        cursor = self.conn.execute(
            f"""SELECT {NODE_COLUMNS} FROM nodes n
               WHERE run_id BETWEEN $first AND $last AND version_id = ANY($versions) AND {test}""",
            {
                **params,
                "first": min(k.run_id for k in keys),
                "last": max(k.run_id for k in keys),
                "versions": sorted({k.version_id for k in keys}),
            },
        )
        # Each row becomes its Node as it is fetched, a slice at a time: a run of a million
        # messages never exists as rows, records and nodes at once (invariant 12).
        by_version: dict[RunVersion, list] = {}
        steps = StepsCache()
        while rows := cursor.fetchmany(NODE_SLICE):
            for row in rows:
                record = NodeRecord(*row)
                by_version.setdefault(RunVersion(record.run_id, record.version_id), []).append(node_from_record(record, steps))
            del rows
        status = self.run_status({h[0] for h in heads})
        return {
            RunVersion(run_id, version_id): run_from_nodes(
                run_id=run_id,
                version_id=version_id,
                status=status.get(run_id, "OPEN"),
                started_at=started_at,
                format=fmt,
                nodes=by_version.pop(RunVersion(run_id, version_id), []),
            )
            for run_id, version_id, fmt, started_at in heads
        }

    def close_run(self, run_id: str, actor: str = "nexus close") -> bool:
        """Close a run (one-way). False when it was closed already."""
        if self.conn.execute("SELECT 1 FROM runs WHERE run_id = ? LIMIT 1", [run_id]).fetchone() is None:
            raise KeyError(run_id)
        if self.run_status([run_id]).get(run_id) == "CLOSED":
            return False
        self.conn.execute("INSERT INTO run_closures VALUES (?, ?, ?) ON CONFLICT DO NOTHING", [run_id, actor, now()])
        return True

    def run_status(self, run_ids: Iterable[str] | None = None) -> dict[str, RunStatus]:
        """CLOSED once any version said so or a person closed it: closing never reverts."""
        # Filtered in SQL: callers ask per chunk of runs, and a scan of every run per chunk grew
        # with the vault (1 s of a 100 MB sync).
        wanted = "" if run_ids is None else "WHERE run_id IN (SELECT unnest($ids))"
        rows = self.conn.execute(
            f"""SELECT run_id, bool_or(status = 'CLOSED') OR run_id IN (SELECT run_id FROM run_closures)
                FROM runs {wanted} GROUP BY run_id""",
            {} if run_ids is None else {"ids": sorted(set(run_ids))},
        ).fetchall()
        return {r: ("CLOSED" if closed else "OPEN") for r, closed in rows}

    def run_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM runs WHERE is_latest").fetchone()[0]

    def ingestion_seq(self) -> dict[str, int]:
        return dict(
            self.vault.remembered(
                "ingestion_seq", lambda: self.conn.execute("SELECT run_id, min(ingest_seq) FROM runs GROUP BY run_id").fetchall()
            )
        )

    def load_runs(self, keys: Iterable[RunVersion]) -> dict[RunVersion, Run]:
        keys = list(keys)
        if not keys:
            return {}
        rows = self.conn.execute(
            """SELECT r.run_id, r.version_id, r.raw_json, r.status FROM runs r
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS version_id) k USING (run_id, version_id)""",
            [[k.run_id for k in keys], [k.version_id for k in keys]],
        ).fetchall()
        status = self.run_status({r[0] for r in rows})
        from nexus_assets.ingest.formats.dispatch import (
            parse_document,  # the readers: only when raw JSON is read
        )

        out = {}
        for run_id, version_id, raw, _ in rows:
            run = parse_document(json.loads(raw))
            out[RunVersion(run_id, version_id)] = _with(run, status=status.get(run_id, run.status), version_id=version_id)
        return out

    def latest_runs(self, run_ids: Iterable[str] | None = None) -> dict[str, Run]:
        versions = self.latest_versions(run_ids)
        loaded = self.load_runs(RunVersion(r, v) for r, v in versions.items())
        return {k.run_id: run for k, run in loaded.items()}

    def run_sources(self, run_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """run_id -> (file it was last ingested from, latest version_id)."""
        return self.vault.remembered_each("run_sources", run_ids, self._run_sources)

    def _run_sources(self, run_ids: list[str]) -> dict[str, tuple[str, str]]:
        rows = self.conn.execute(
            "SELECT run_id, source_file, version_id FROM runs WHERE is_latest AND run_id IN (SELECT unnest(?))",
            [list(run_ids)],
        ).fetchall()
        return {r: (f, v) for r, f, v in rows}

    def version_files(self, keys: Iterable[RunVersion]) -> dict[RunVersion, str]:
        """The file each run version is read from (where trace and verify look)."""
        keys = list(keys)
        if not keys:
            return {}
        rows = self.conn.execute(
            """SELECT r.run_id, r.version_id, r.source_file FROM runs r
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS version_id) k USING (run_id, version_id)""",
            [[k.run_id for k in keys], [k.version_id for k in keys]],
        ).fetchall()
        return {RunVersion(r, v): f for r, v, f in rows}

    def ingestion_error_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM ingestion_errors").fetchone()[0]

    def ingestion_errors(self) -> list[dict]:
        cur = self.conn.execute(
            "SELECT file, conversation, problem, file_sha256, recorded_at FROM ingestion_errors ORDER BY recorded_at, file"
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def latest_node_texts(self, addresses: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Text of stored nodes in each run's latest version, by (run_id, normalized json_path)."""
        addresses = list(dict.fromkeys(addresses))
        if not addresses:
            return {}
        rows = self.conn.execute(
            """SELECT n.run_id, n.json_path, n.text FROM nodes n
               JOIN runs r ON r.run_id = n.run_id AND r.version_id = n.version_id AND r.is_latest
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS json_path) k
                 ON k.run_id = n.run_id AND k.json_path = n.json_path""",
            [[a[0] for a in addresses], [a[1] for a in addresses]],
        ).fetchall()
        return {(r, p): t for r, p, t in rows}

    def run_names(self, run_ids: Iterable[str]) -> dict[str, RunName]:
        """The title and start date of each run's latest version, for people to read (`names.py`)."""
        run_ids = list(dict.fromkeys(run_ids))
        if not run_ids:
            return {}
        return self.vault.remembered_each("run_names", run_ids, self._lasting_run_names)

    def _lasting_run_names(self, run_ids: list[str]) -> dict[str, RunName]:
        """On a held vault, names kept by run version across writers: reading a name means reading
        the run's raw JSON, which DuckDB does for every run of the table (~0.4 s on 3,400 runs on a
        busy machine), while a run's latest version is a cheap column."""
        lasting = self.vault.lasting
        if lasting is None:
            return self._run_names(run_ids)
        known = lasting.setdefault("run_names", {})
        self.drop_stale_names()
        versions = dict(
            self.conn.execute(
                "SELECT run_id, version_id FROM runs WHERE is_latest AND run_id IN (SELECT unnest(?))", [run_ids]
            ).fetchall()
        )
        missing = [r for r in run_ids if (r, versions.get(r)) not in known]
        if missing:
            for r, name in self._run_names(missing).items():
                known[(r, versions.get(r))] = name
        return {r: known[(r, versions.get(r))] for r in run_ids}

    def keep_names(self, most: int = 50_000) -> None:
        """On a held vault: the name of every run's latest version read now, in one pass, so a
        request never reads raw JSON for a name (a server calls this after each writer, off the
        request path). Not for a vault of more than `most` runs: they are then read as asked."""
        lasting = self.vault.lasting
        if lasting is None:
            return
        self.drop_stale_names()
        known = lasting.setdefault("run_names", {})
        latest = self.conn.execute("SELECT run_id, version_id FROM runs WHERE is_latest").fetchall()
        missing = [(r, v) for r, v in latest if (r, v) not in known]
        if missing and len(latest) <= most:
            versions = dict(missing)
            for r, name in self._run_names(list(versions)).items():
                known[(r, versions[r])] = name

    def drop_stale_names(self) -> None:
        """Once per hold of the vault: the names of run versions it no longer has (a run forgotten,
        a newer version read) are dropped from what is kept."""
        known = (self.vault.lasting or {}).get("run_names")
        if known:
            self.vault.remembered("run_names_pruned", lambda: self._prune_names(known))

    def _prune_names(self, known: dict) -> bool:
        latest = set(self.conn.execute("SELECT run_id, version_id FROM runs WHERE is_latest").fetchall())
        for key in [k for k in list(known) if k not in latest]:
            known.pop(key, None)
        return True

    def _run_names(self, run_ids: list[str]) -> dict[str, RunName]:
        rows = self.conn.execute(
            """SELECT run_id, coalesce(json_extract_string(raw_json, '$.title'), json_extract_string(raw_json, '$.name')),
                      started_at,
                      CASE WHEN format IN ('claude-code', 'codex') THEN json_extract_string(raw_json, '$.project') END
               FROM runs WHERE is_latest AND run_id IN (SELECT unnest(?))""",
            [run_ids],
        ).fetchall()
        found = {r: run_name(r, title, started, project) for r, title, started, project in rows}
        return {r: found.get(r, RunName(r, None, None)) for r in run_ids}

    def latest_raw_json(self, run_id: str) -> str | None:
        """The latest version's raw JSON (for gold paths not written in normalized form)."""
        row = self.conn.execute("SELECT raw_json FROM runs WHERE run_id = ? AND is_latest", [run_id]).fetchone()
        return row[0] if row else None


def _with(run: Run, **changes) -> Run:
    return replace(run, **changes)
