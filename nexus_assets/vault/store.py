"""`Vault`: typed access to everything Nexus Sync knows, in one DuckDB file.

Append-only by design (DESIGN §2.8): a sync inserts; the only updates are a brick's state,
order, stale flag and superseded_by, and a run's latest-version marker. The one thing a sync
deletes is its own stage (`staged_*`): scratch rows holding a resolution until it is published,
in place of a pickled step output, never a record. A topic's visible result (bricks, their
sources and the manifest) is published in one transaction.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.formats import READER_VERSION
from nexus_assets.core.immutability import FinalBrickChanged, final_brick_changes
from nexus_assets.core.models import (
    Brick,
    IngestionError,
    Manifest,
    ManifestEntry,
    Occurrence,
    Rejection,
    Run,
    RunStatus,
    SourceAddress,
    Tombstone,
    Topic,
    trusted,
)
from nexus_assets.core.nodes import NodeRecord, StepsCache, node_from_record, node_records, run_from_nodes
from nexus_assets.core.resolution import PriorState
from nexus_assets.vault.catalog import Catalog
from nexus_assets.vault.connection import now
from nexus_assets.vault.drift import DriftRecords
from nexus_assets.vault.forgetting import ForgettingRecords
from nexus_assets.vault.history import HistoryQueries
from nexus_assets.vault.migrations import STAGE_TABLES
from nexus_assets.vault.recall import RecallRecords

# Raised when resolution decides differently from the same inputs (2: the oldest version of a node
# is the canonical source at its place; 3: a brick only an undone edit held is superseded history),
# so each topic is resolved again once; "" is rules 1.
RESOLUTION_RULES = "resolution-3|"

# File contents whose every verdict found problems under an older reader than READER_VERSION
# (bound as ?): they are read again.
_OUTDATED_VERDICTS = (
    "SELECT file_sha256 FROM run_files GROUP BY file_sha256 HAVING NOT bool_or(errors = 0 OR coalesce(reader_version, 1) >= ?)"
)

# Bricks staged per insert: a slice of a large topic costs a few MB of frames, not hundreds.
STAGE_SLICE = 20_000
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


def storable_json(value) -> str:
    """JSON text DuckDB can hold. A model may answer with a lone surrogate (valid JSON, never valid
    UTF-8); such a value is written with \\u escapes, which read back to the very same string."""
    text = json.dumps(value, ensure_ascii=False)
    return text if _encodable(text) else json.dumps(value)


def storable_text(text: str | None) -> str | None:
    """Untrusted text as DuckDB can hold it: a lone surrogate becomes its `\\udXXX` escape."""
    if text is None or _encodable(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class RunVersion:
    run_id: str
    version_id: str


class Vault(Catalog, HistoryQueries, DriftRecords, ForgettingRecords, RecallRecords):
    """Typed access to the vault over one DuckDB connection."""

    # Recorded sources (invariant 13)

    def record_sources(self, **paths: Path | str | None) -> None:
        """Remember the directories a sync read (kind = runs_dir / topics_dir)."""
        for kind, path in paths.items():
            if path is not None:
                self.conn.execute(
                    "INSERT INTO vault_sources VALUES (?, ?, ?) ON CONFLICT (kind) DO UPDATE SET path = excluded.path, recorded_at = excluded.recorded_at",
                    [kind, str(Path(path).resolve()), now()],
                )

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # Nested use joins the outer transaction: forgetting publishes inside its own.
        if getattr(self, "_in_transaction", False):
            yield
            return
        self.conn.execute("BEGIN TRANSACTION")
        self._in_transaction = True
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False
        self.conn.execute("COMMIT")

    def _insert_df(self, table: str, rows: list[dict], *, conflict: str | None = "DO NOTHING") -> None:
        if not rows:
            return
        import pandas as pd  # only writers need it; read commands start faster without it

        frame = pd.DataFrame(rows)
        cols = ", ".join(frame.columns)
        on_conflict = f" ON CONFLICT {conflict}" if conflict else ""
        # Through a relation, not `register`: a registered frame stays alive until the transaction
        # commits, so a run's node slices all stayed in memory at once (invariant 12).
        self.conn.from_df(frame).query("_rows", f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _rows{on_conflict}")

    @contextmanager
    def _registered(self, **frames) -> Iterator[None]:
        """DataFrames visible to SQL under these names for the duration of the block."""
        for name, frame in frames.items():
            self.conn.register(name, frame)
        try:
            yield
        finally:
            for name in frames:
                self.conn.unregister(name)

    # Topics

    def record_topic(self, topic: Topic, source_file: str | None, *, actor: str = "topic file") -> Topic:
        """Store a topic definition; returns it with the state the vault holds.

        Sealing is one-way: a LOCKED (or SEALING) topic stays so whatever its file says.
        """
        before = self.topic_state(topic.topic_id)
        state = topic.state
        if before in ("SEALING", "LOCKED"):
            state = before
        stored = topic.model_copy(update={"state": state})
        self.conn.execute(
            """INSERT INTO topics VALUES (?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (topic_id) DO UPDATE SET display_name = excluded.display_name,
               state = excluded.state, ordering_rule = excluded.ordering_rule,
               definition_json = excluded.definition_json, source_file = excluded.source_file,
               updated_at = excluded.updated_at""",
            [
                topic.topic_id,
                topic.display_name,
                state,
                topic.ordering_rule,
                canonical_json(stored.model_dump(mode="json")),
                source_file,
                now(),
            ],
        )
        if before != state:
            self.conn.execute(
                "INSERT INTO topic_transitions VALUES (?, ?, ?, ?, ?)", [topic.topic_id, before, state, actor, now()]
            )
        return stored

    def transition_topic(self, topic_id: str, to_state: str, *, actor: str) -> None:
        """Move a recorded topic to `to_state` (activation and sealing go through here, not a topic file)."""
        before = self.topic_state(topic_id)
        if before is None:
            raise KeyError(topic_id)
        if before != to_state:
            self.conn.execute("UPDATE topics SET state = ?, updated_at = ? WHERE topic_id = ?", [to_state, now(), topic_id])
            self.conn.execute("INSERT INTO topic_transitions VALUES (?, ?, ?, ?, ?)", [topic_id, before, to_state, actor, now()])

    def topics(self) -> list[Topic]:
        rows = self.conn.execute("SELECT definition_json, state FROM topics ORDER BY topic_id").fetchall()
        return [Topic.model_validate({**json.loads(d), "state": s}) for d, s in rows]

    def visible_texts(self, topic_id: str) -> Iterator[tuple[str, str]]:
        """(brick_id, content) of the topic's visible bricks, streamed; consume it before the next query."""
        cursor = self.conn.execute("SELECT brick_id, content FROM bricks WHERE topic_id = ? AND state <> 'SUPERSEDED'", [topic_id])
        while rows := cursor.fetchmany(10_000):
            yield from rows

    def topic(self, topic_id: str) -> Topic | None:
        row = self.conn.execute("SELECT definition_json, state FROM topics WHERE topic_id = ?", [topic_id]).fetchone()
        return Topic.model_validate({**json.loads(row[0]), "state": row[1]}) if row else None

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

    def topic_inputs_digest(self, topic_id: str) -> str:
        """A digest of everything resolution reads for a topic: its definition and state, its
        occurrences, and for each of their runs the latest version, status and ingestion place.
        RESOLUTION_RULES goes in too: a topic resolved under older rules is resolved again once."""
        return self.conn.execute(
            """WITH occ AS (
                   SELECT run_id, count(*) AS n, sum(hash(json_path, start_offset, end_offset, node_checksum)) AS h
                   FROM occurrences WHERE topic_id = ? GROUP BY run_id),
               per_run AS (
                   SELECT run_id, max(CASE WHEN is_latest THEN version_id END) AS latest, min(ingest_seq) AS seq,
                          bool_or(status = 'CLOSED') OR run_id IN (SELECT run_id FROM run_closures) AS closed
                   FROM runs WHERE run_id IN (SELECT run_id FROM occ) GROUP BY run_id)
               SELECT sha256(? ||
                   coalesce((SELECT definition_json || '|' || state FROM topics WHERE topic_id = ?), '') || '#' ||
                   coalesce(string_agg(concat_ws(':', o.run_id, o.n, o.h, r.latest, r.seq, r.closed), '|' ORDER BY o.run_id), ''))
               FROM occ o LEFT JOIN per_run r USING (run_id)""",
            [topic_id, RESOLUTION_RULES, topic_id],
        ).fetchone()[0]

    def last_inputs_digest(self, topic_id: str) -> str | None:
        row = self.conn.execute(
            "SELECT inputs_digest FROM syncs WHERE topic_id = ? AND status = 'ok' ORDER BY finished_at DESC LIMIT 1", [topic_id]
        ).fetchone()
        return row[0] if row else None

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

    def ingestion_seq(self) -> dict[str, int]:
        return dict(self.conn.execute("SELECT run_id, min(ingest_seq) FROM runs GROUP BY run_id").fetchall())

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
        from nexus_assets.core.formats.dispatch import parse_document  # the readers: only when raw JSON is read

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
        rows = self.conn.execute(
            "SELECT run_id, source_file, version_id FROM runs WHERE is_latest AND run_id IN (SELECT unnest(?))",
            [list(run_ids)],
        ).fetchall()
        return {r: (f, v) for r, f, v in rows}

    # Extractions, occurrences, rejections

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

    def occurrences(self, topic_id: str) -> Iterator[tuple[Occurrence, str]]:
        """Every occurrence ever validated for the topic, with the run version it was seen in.
        Streamed in batches, so the raw rows of a large topic are never all held at once; consume
        it before the next query on this vault."""
        cursor = self.conn.execute(
            """SELECT o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum, o.content, o.fingerprint, o.ts,
                      o.position, o.version_id, o.node_type, o.branch, r.version_seq
               FROM occurrences o LEFT JOIN (
                   -- Each version's place among its run's versions, oldest first (see `canonical_key`).
                   SELECT run_id, version_id, row_number() OVER (PARTITION BY run_id ORDER BY ingested_at, version_id) AS version_seq
                   FROM runs) r USING (run_id, version_id)
               WHERE o.topic_id = ?""",
            [topic_id],
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

    def occurrence_count(self, topic_id: str) -> int:
        return self.conn.execute("SELECT count(*) FROM occurrences WHERE topic_id = ?", [topic_id]).fetchone()[0]

    def occurrences_not_matching_nodes(self, topic_id: str) -> list[tuple[Occurrence, str, str | None]]:
        """Occurrences whose stored node does not hold their text (invariant 1), with their run
        version and what is wrong; the problem is None where no text node was stored at that path
        (a pointer at another string leaf), which only the run's document can settle."""
        rows = self.conn.execute(
            """SELECT o.run_id, o.json_path, o.start_offset, o.end_offset, o.node_checksum, o.content, o.fingerprint,
                      o.ts, o.position, o.version_id,
                      CASE WHEN n.text IS NULL THEN NULL
                           WHEN n.checksum <> o.node_checksum THEN 'checksum'
                           WHEN length(n.text) < o.end_offset THEN 'short'
                           ELSE 'slice' END AS problem
               FROM occurrences o LEFT JOIN nodes n
                 ON n.run_id = o.run_id AND n.version_id = o.version_id AND n.json_path = o.json_path
               WHERE o.topic_id = ? AND (n.text IS NULL OR n.checksum <> o.node_checksum
                     OR length(n.text) < o.end_offset
                     OR substring(n.text, o.start_offset + 1, o.end_offset - o.start_offset) <> o.content)
               ORDER BY o.run_id, o.version_id, o.json_path, o.start_offset""",
            [topic_id],
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

    def canonical_content_mismatches(self, topic_id: str) -> tuple[int, list[str]]:
        """(bricks checked, ids of bricks whose content is not the text of their canonical occurrence)."""
        total = self.conn.execute("SELECT count(*) FROM bricks WHERE topic_id = ?", [topic_id]).fetchone()[0]
        rows = self.conn.execute(
            """SELECT b.brick_id FROM bricks b
               LEFT JOIN brick_sources s ON s.brick_id = b.brick_id AND s.seq = 0
               LEFT JOIN (SELECT DISTINCT run_id, json_path, start_offset, end_offset, node_checksum, content
                          FROM occurrences WHERE topic_id = ?) o
                 ON o.run_id = s.run_id AND o.json_path = s.json_path AND o.start_offset = s.start_offset
                AND o.end_offset = s.end_offset AND o.node_checksum = s.node_checksum
               WHERE b.topic_id = ? AND (o.content IS NULL OR o.content <> b.content)
               ORDER BY b.brick_id""",
            [topic_id, topic_id],
        ).fetchall()
        return total, [r[0] for r in rows]

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

    # LLM calls: the audit trail and the replay cache (their records: `vault.llm_calls`)

    def llm_call_records(self):
        from nexus_assets.vault.llm_calls import LLMCallRecords

        return LLMCallRecords(self.conn)

    def llm_calls(self, topic_id: str | None = None) -> list[dict]:
        return self.llm_call_records().calls(topic_id)

    # Bricks and manifests

    def bricks(
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

    def resolution_prior(self, topic_id: str) -> dict[str, Brick | PriorState]:
        """The topic's stored bricks as resolution reads them: FINAL ones whole, the rest as state
        and place only, so a large topic is not held twice."""
        prior: dict[str, Brick | PriorState] = {
            b: PriorState(state, order_index)
            for b, state, order_index in self.conn.execute(
                "SELECT brick_id, state, order_index FROM bricks WHERE topic_id = ? AND state <> 'FINAL'", [topic_id]
            ).fetchall()
        }
        prior.update((b.brick_id, b) for b in self.bricks(topic_id, state="FINAL"))
        return prior

    def stage(
        self, topic_id: str, bricks: Iterable[Brick], *, inputs_digest: str | None, slice_size: int | None = None
    ) -> None:
        """Hold a topic's resolved bricks in the vault until `publish_staged`, replacing any earlier
        stage: resolution and publishing hand over through the vault, so a large topic is never
        pickled between steps nor held in memory twice. `bricks` may be lazy: it is read
        `slice_size` (default STAGE_SLICE) at a time, and must not query this vault while it is read."""
        bricks = iter(bricks)
        with self.transaction():
            self._drop_stage(topic_id)
            # In slices: the frames and DuckDB's copy of them stay small beside the bricks themselves.
            while piece := list(islice(bricks, slice_size or STAGE_SLICE)):
                self._stage_slice(topic_id, piece)
                del piece  # let the slice go before the next one is read
            self.conn.execute(
                "INSERT INTO staged_resolutions (topic_id, inputs_digest, staged_at) VALUES (?, ?, ?)",
                [topic_id, inputs_digest, now()],
            )

    def _stage_slice(self, topic_id: str, bricks: Sequence[Brick]) -> None:
        import pandas as pd  # only writers need it; read commands start faster without it

        sources = [(b.brick_id, seq, a) for b in bricks for seq, a in enumerate(b.sources)]
        # Typed: DuckDB reads a column that holds only None (superseded_by, node_type) as DOUBLE.
        text = "string"
        brick_frame = pd.DataFrame(
            {
                "brick_id": pd.array([b.brick_id for b in bricks], dtype=text),
                "content": pd.array([b.content for b in bricks], dtype=text),
                "fingerprint": pd.array([b.fingerprint for b in bricks], dtype=text),
                "state": pd.array([b.state for b in bricks], dtype=text),
                "order_index": pd.array([b.order_index for b in bricks], dtype="Int64"),
                "superseded_by": pd.array([b.superseded_by for b in bricks], dtype=text),
                "stale": pd.array([b.stale for b in bricks], dtype="bool"),
            }
        )
        source_frame = pd.DataFrame(
            {
                "brick_id": pd.array([b for b, _, _ in sources], dtype=text),
                "seq": pd.array([seq for _, seq, _ in sources], dtype="int64"),
                "run_id": pd.array([a.run_id for _, _, a in sources], dtype=text),
                "json_path": pd.array([a.json_path for _, _, a in sources], dtype=text),
                "start_offset": pd.array([a.start for _, _, a in sources], dtype="int64"),
                "end_offset": pd.array([a.end for _, _, a in sources], dtype="int64"),
                "node_checksum": pd.array([a.node_checksum for _, _, a in sources], dtype=text),
                "node_type": pd.array([a.node_type for _, _, a in sources], dtype=text),
                "branch": pd.array([a.branch for _, _, a in sources], dtype=text),
            }
        )
        del sources
        with self._registered(_bricks=brick_frame, _sources=source_frame):
            self.conn.execute(
                """INSERT INTO staged_bricks (topic_id, brick_id, content, fingerprint, state, order_index, superseded_by, stale)
                   SELECT ?, brick_id, content, fingerprint, state, order_index, superseded_by, stale FROM _bricks""",
                [topic_id],
            )
            self.conn.execute(
                """INSERT INTO staged_brick_sources (topic_id, brick_id, seq, run_id, json_path, start_offset, end_offset,
                                                     node_checksum, node_type, branch)
                   SELECT ?, brick_id, seq, run_id, json_path, start_offset, end_offset, node_checksum, node_type, branch
                   FROM _sources""",
                [topic_id],
            )

    def _drop_stage(self, topic_id: str) -> None:
        for table in STAGE_TABLES:
            self.conn.execute(f"DELETE FROM {table} WHERE topic_id = ?", [topic_id])

    def staged(self, topic_id: str, inputs_digest: str | None) -> bool:
        """Whether a stage of exactly this resolution waits to be published."""
        return bool(
            self.conn.execute(
                "SELECT count(*) FROM staged_resolutions WHERE topic_id = ? AND inputs_digest IS NOT DISTINCT FROM ?",
                [topic_id, inputs_digest],
            ).fetchone()[0]
        )

    def staged_manifest_entries(self, topic_id: str) -> tuple[ManifestEntry, ...]:
        """The staged visible bricks in manifest order, read as entries only (never as whole bricks)."""
        rows = self.conn.execute(
            """SELECT order_index, brick_id, fingerprint, state FROM staged_bricks
               WHERE topic_id = ? AND state <> 'SUPERSEDED' ORDER BY order_index, brick_id""",
            [topic_id],
        ).fetchall()
        return tuple(trusted(ManifestEntry, order_index=o, brick_id=b, fingerprint=f, state=s) for o, b, f, s in rows)

    def publish(
        self, topic_id: str, bricks: Sequence[Brick], manifest: Manifest | None, *, inputs_digest: str | None = None, **options
    ) -> None:
        """Stage these bricks and publish them at once; `options` as for `publish_staged`."""
        with self.transaction():
            self.stage(topic_id, bricks, inputs_digest=inputs_digest)
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
        final = {b.brick_id: b for b in self.bricks(topic_id, state="FINAL")}
        incoming = self.bricks(topic_id, brick_ids=final, staged=True) if final else []
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
            self._drop_stage(topic_id)
            # A linked source may have become canonical: stale follows the canonical source's status.
            self.refresh_topic_stale(topic_id)
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

    def ingestion_error_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM ingestion_errors").fetchone()[0]

    def ingestion_errors(self) -> list[dict]:
        cur = self.conn.execute(
            "SELECT file, conversation, problem, file_sha256, recorded_at FROM ingestion_errors ORDER BY recorded_at, file"
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    # Extraction quality (DESIGN §9): what `nexus eval` and the `extraction_quality` check read

    def topic_source_file(self, topic_id: str) -> str | None:
        row = self.conn.execute("SELECT source_file FROM topics WHERE topic_id = ?", [topic_id]).fetchone()
        return row[0] if row else None

    def brick_source_spans(self, topic_id: str) -> list[tuple[str, str, int, int]]:
        """(run_id, json_path, start, end) of every source address of every brick of the topic,
        superseded ones included: each is text the extractor found and the gate accepted."""
        return self.conn.execute(
            """SELECT DISTINCT s.run_id, s.json_path, s.start_offset, s.end_offset
               FROM brick_sources s JOIN bricks b USING (brick_id)
               WHERE b.topic_id = ? ORDER BY ALL""",
            [topic_id],
        ).fetchall()

    def pointer_verdict_counts(self, topic_id: str) -> tuple[int, int]:
        """(accepted, rejected) pointers of the topic, from the stored occurrences and rejections."""
        return self.conn.execute(
            """SELECT (SELECT count(*) FROM occurrences WHERE topic_id = ?),
                      (SELECT count(*) FROM rejections WHERE topic_id = ?)""",
            [topic_id, topic_id],
        ).fetchone()

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

    def latest_raw_json(self, run_id: str) -> str | None:
        """The latest version's raw JSON (for gold paths not written in normalized form)."""
        row = self.conn.execute("SELECT raw_json FROM runs WHERE run_id = ? AND is_latest", [run_id]).fetchone()
        return row[0] if row else None

    def extractor_identities(self, topic_id: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT DISTINCT extractor FROM extractions WHERE topic_id = ? ORDER BY extractor", [topic_id]
        ).fetchall()
        return [r[0] for r in rows]

    def kept_extractions(self, topic_id: str, extractor: str) -> list[tuple[RunVersion, list]]:
        """The pointers one extractor identity returned for the topic: for each run, its answer for
        the newest run version that identity was asked about (the latest answer, if asked twice)."""
        rows = self.conn.execute(
            """SELECT e.run_id, e.version_id, e.pointers_json FROM extractions e
               JOIN runs r ON r.run_id = e.run_id AND r.version_id = e.version_id
               WHERE e.topic_id = ? AND e.extractor = ?
               QUALIFY row_number() OVER (PARTITION BY e.run_id ORDER BY r.ingest_seq DESC, e.created_at DESC,
                                          e.extraction_key) = 1
               ORDER BY e.run_id""",
            [topic_id, extractor],
        ).fetchall()
        return [(RunVersion(r, v), json.loads(p)) for r, v, p in rows]


def _with(run: Run, **changes) -> Run:
    return replace(run, **changes)
