"""The vault's queries about history: topic transitions, syncs, seal snapshots, runs since a time.

`vault.history`: the lifecycle, the viewer and the CLI read these through named methods, so
all SQL stays in this package.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Sequence

from nexus_assets.core.models import Brick, Manifest, ManifestEntry, SourceAddress
from nexus_assets.core.listing import entries_sha256
from nexus_assets.vault.records import Records

# Where a pointer prompt's user message turns from the topic to the run's text (llm/prompt.py).
FRAGMENT_MARKER = "Source JSON fragment"


class HistoryQueries(Records):

    def states_seen(self) -> dict[str, list[str]]:
        """Every state each topic has ever been in."""
        return dict(
            self.conn.execute(
                "SELECT topic_id, list(DISTINCT to_state ORDER BY to_state) FROM topic_transitions GROUP BY topic_id"
            ).fetchall()
        )

    def topic_source_files(self) -> dict[str, str | None]:
        return dict(self.conn.execute("SELECT topic_id, source_file FROM topics").fetchall())

    def topic_history(self, topic_id: str) -> list[dict]:
        """Every state change of a topic, oldest first: from_state, to_state, actor, changed_at."""
        cur = self.conn.execute(
            """SELECT from_state, to_state, actor, changed_at FROM topic_transitions
               WHERE topic_id = ? ORDER BY changed_at, rowid""",
            [topic_id],
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def locked_at(self, topic_id: str) -> datetime | None:
        row = self.conn.execute(
            "SELECT max(changed_at) FROM topic_transitions WHERE topic_id = ? AND to_state = 'LOCKED'", [topic_id]
        ).fetchone()
        return row[0] if row else None

    def sealed_snapshot(self, topic_id: str) -> dict[str, Brick]:
        """The FINAL bricks exactly as they were when the topic was sealed."""
        rows = self.conn.execute(
            "SELECT brick_id, order_index, content, fingerprint, sources_json FROM sealed_bricks WHERE topic_id = ?",
            [topic_id],
        ).fetchall()
        return {
            bid: Brick(
                brick_id=bid,
                topic_id=topic_id,
                content=content,
                fingerprint=fp,
                state="FINAL",
                order_index=order,
                sources=tuple(SourceAddress(**s) for s in json.loads(sources)),
            )
            for bid, order, content, fp, sources in rows
        }

    def store_sealed_snapshot(self, topic_id: str, bricks: Sequence[Brick], manifest_hash: str, stamp: datetime) -> None:
        rows = [
            [
                topic_id,
                b.brick_id,
                b.order_index,
                b.content,
                b.fingerprint,
                json.dumps([s.model_dump() for s in b.sources], ensure_ascii=False),
                manifest_hash,
                stamp,
            ]
            for b in bricks
            if b.state == "FINAL"
        ]
        if rows:
            # A seal resumed after a crash finds its snapshot half written: the first rows win.
            self.conn.executemany("INSERT INTO sealed_bricks VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", rows)

    def runs_ingested_after(self, moment: datetime) -> list[str]:
        rows = self.conn.execute("SELECT DISTINCT run_id FROM runs WHERE ingested_at > ? ORDER BY run_id", [moment]).fetchall()
        return [r[0] for r in rows]

    def runs_closed_after(self, moment: datetime) -> list[str]:
        rows = self.conn.execute("SELECT run_id FROM run_closures WHERE closed_at > ? ORDER BY run_id", [moment]).fetchall()
        return [r[0] for r in rows]

    def runs_not_validated_for(self, topic_id: str) -> list[str]:
        """Latest run versions the topic's extractor has not answered for (or not validated) yet."""
        rows = self.conn.execute(
            """SELECT r.run_id FROM runs r WHERE r.is_latest AND NOT EXISTS (
                   SELECT 1 FROM extractions e WHERE e.topic_id = ? AND e.run_id = r.run_id
                   AND e.version_id = r.version_id AND e.validated)
               ORDER BY r.run_id""",
            [topic_id],
        ).fetchall()
        return [r[0] for r in rows]

    def latest_ok_sync(self, topic_id: str) -> datetime | None:
        row = self.conn.execute("SELECT max(finished_at) FROM syncs WHERE topic_id = ? AND status = 'ok'", [topic_id]).fetchone()
        return row[0] if row else None

    def last_syncs(self) -> dict[str, tuple[str, datetime]]:
        """(status, finished_at) of each topic's latest sync."""
        rows = self.conn.execute(
            "SELECT topic_id, arg_max(status, finished_at), max(finished_at) FROM syncs GROUP BY topic_id"
        ).fetchall()
        return {t: (status, at) for t, status, at in rows}

    def stale_counts(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT topic_id, count(*) FROM bricks WHERE stale AND state != 'SUPERSEDED' GROUP BY topic_id"
        ).fetchall()
        return dict(rows)

    def brick_ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        rows = self.conn.execute(
            "SELECT brick_id FROM bricks WHERE brick_id LIKE ? || '%' ORDER BY brick_id LIMIT ?", [prefix, limit]
        ).fetchall()
        return [r[0] for r in rows]

    def occurrence_versions(self, topic_id: str) -> dict[tuple[str, str, int, int, str], str]:
        """(run_id, json_path, start, end, node_checksum) -> the run version each occurrence was seen in."""
        return {
            (r, p, s, e, c): v
            for r, p, s, e, c, v in self.conn.execute(
                """SELECT run_id, json_path, start_offset, end_offset, node_checksum, version_id FROM occurrences
                   WHERE topic_id = ?""",
                [topic_id],
            ).fetchall()
        }

    def holds_vault_tables(self) -> bool:
        return self.conn.execute("SELECT 1 FROM information_schema.tables WHERE table_name = 'syncs'").fetchone() is not None

    def manifest_links(self, topic_id: str) -> list[tuple[str | None, str]]:
        """(previous_hash, manifest_hash) of each of the topic's manifests, oldest first, without their brick lists."""
        return [tuple(r) for r in self.conn.execute(
            "SELECT previous_hash, manifest_hash FROM manifests WHERE topic_id = ? ORDER BY seq", [topic_id]).fetchall()]

    def earlier_manifest_listing(self, topic_id: str, entries: Sequence[ManifestEntry]) -> Manifest | None:
        """The newest manifest of the topic, before its latest and after its last tombstone or seal,
        whose brick list is `entries` (for `next_manifest`: a return to it)."""
        row = self.earlier_manifest_head(topic_id, entries_sha256(entries))
        if row is None:
            return None
        return Manifest(topic_id=topic_id, manifest_hash=row[0], previous_hash=row[1], bricks=tuple(entries))

    def earlier_manifest_head(self, topic_id: str, digest: str) -> tuple[str, str | None] | None:
        """`earlier_manifest_listing` for a list known by its `entries_sha256`: (hash, previous hash).
        Lists are compared by digest (migration 19 gave every stored manifest one), never read."""
        return self.conn.execute(
            """SELECT manifest_hash, previous_hash FROM manifests
               WHERE topic_id = $topic AND NOT sealed AND tombstone_json IS NULL
                 AND entries_sha256 = $digest
                 AND seq > coalesce((SELECT max(seq) FROM manifests WHERE topic_id = $topic
                                     AND (sealed OR tombstone_json IS NOT NULL)), -1)
                 AND seq < (SELECT max(seq) FROM manifests WHERE topic_id = $topic)
               ORDER BY seq DESC LIMIT 1""",
            {"topic": topic_id, "digest": digest},
        ).fetchone()

    def brick_source_runs(self, topic_id: str) -> set[str]:
        """Every run some brick of the topic has a source in."""
        rows = self.conn.execute(
            "SELECT DISTINCT s.run_id FROM brick_sources s JOIN bricks b USING (brick_id) WHERE b.topic_id = ?", [topic_id]
        ).fetchall()
        return {r[0] for r in rows}

    def brick_count(self, topic_id: str, *, state: str | None = None) -> int:
        if state is None:
            return self.conn.execute("SELECT count(*) FROM bricks WHERE topic_id = ?", [topic_id]).fetchone()[0]
        return self.conn.execute("SELECT count(*) FROM bricks WHERE topic_id = ? AND state = ?", [topic_id, state]).fetchone()[0]

    def change_marks(self) -> list[int]:
        """Counters that any command changing what a sync would produce moves (closing a run, a new
        manifest, a topic transition, a new run version, a recorded drift flip)."""
        return list(
            self.conn.execute(
                """SELECT (SELECT count(*) FROM run_closures), (SELECT count(*) FROM manifests),
                          (SELECT count(*) FROM topic_transitions), (SELECT count(*) FROM runs),
                          (SELECT count(*) FROM source_status_history)"""
            ).fetchone()
        )

    def last_clean_sync(self, scope: str = "cli") -> str | None:
        """The fingerprint of the last sync that passed everything: of a whole sync ('cli'), or of
        one topic's run ('topic:T', `lifecycle/idle.py`)."""
        row = self.conn.execute("SELECT fingerprint FROM clean_syncs WHERE scope = ?", [scope]).fetchone()
        return row[0] if row else None

    def topic_history_counts(self, topic_id: str) -> tuple[int, int, int, int, int]:
        """How much the topic's history holds (manifests, transitions, teachings, selector records,
        extractions not yet validated): a sync whose counts moved has something to do (`lifecycle/idle.py`)."""
        return tuple(self.conn.execute(
            """SELECT (SELECT count(*) FROM manifests WHERE topic_id = $t), (SELECT count(*) FROM topic_transitions WHERE topic_id = $t),
                      (SELECT count(*) FROM teachings WHERE topic_id = $t), (SELECT count(*) FROM topic_selectors WHERE topic_id = $t),
                      (SELECT count(*) FROM extractions WHERE topic_id = $t AND NOT validated)""",
            {"t": topic_id},
        ).fetchone())

    def record_clean_sync(self, fingerprint: str, scope: str = "cli") -> None:
        self.conn.execute(
            "INSERT INTO clean_syncs VALUES (?, ?, now()) ON CONFLICT (scope) DO UPDATE "
            "SET fingerprint = excluded.fingerprint, recorded_at = excluded.recorded_at",
            [scope, fingerprint],
        )

    def last_calls(self, topic_id: str) -> dict[str, dict]:
        """Per run, the newest successful LLM call of the topic: model, prompt version, its first
        (system) message and when; what `nexus plan --explain-cache` compares with."""
        rows = self.conn.execute(
            """SELECT run_id, arg_max(model, recorded_at), arg_max(prompt_version, recorded_at),
                      arg_max(request_json, recorded_at), max(recorded_at)
               FROM llm_calls WHERE topic_id = ? AND status = 'ok' GROUP BY run_id""",
            [topic_id],
        ).fetchall()
        out = {}
        for run_id, model, version, request, at in rows:
            try:
                stored = json.loads(request)
                # Since prompt v2 a topic's answer keeps only its own part of the prompt.
                topic_part = stored["topic"] if isinstance(stored, dict) else str(stored[-1].get("content")).split(FRAGMENT_MARKER, 1)[0]
            except (ValueError, IndexError, AttributeError, TypeError, KeyError):
                topic_part = None
            out[run_id] = {"model": model, "prompt_version": version, "topic_part": topic_part, "recorded_at": at}
        return out

    def run_versions_seen(self, run_ids: Sequence[str]) -> dict[str, dict[str, datetime]]:
        """Per run, every version the vault holds and when it was ingested."""
        out: dict[str, dict[str, datetime]] = {}
        for run_id, version_id, at in self.conn.execute(
            "SELECT run_id, version_id, ingested_at FROM runs WHERE run_id IN (SELECT unnest(?))", [sorted(set(run_ids))]
        ).fetchall():
            out.setdefault(run_id, {})[version_id] = at
        return out
