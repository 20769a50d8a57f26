"""The stage (a topic's resolution held in the vault until it is published) and the digest of what
resolution read: the rule for "nothing changed, skip"."""

from __future__ import annotations

from itertools import islice
from typing import Iterable, Sequence

from nexus_assets.core.models import (
    Brick,
    ManifestEntry,
    trusted,
)
from nexus_assets.resolve.rules import PriorState
from nexus_assets.vault.connection import now
from nexus_assets.vault.migrations import STAGE_TABLES
from nexus_assets.vault.records import Records

# Raised when resolution decides differently from the same inputs (2: the oldest version of a node
# is the canonical source at its place; 3: a brick only an undone edit held is superseded history),
# so each topic is resolved again once; "" is rules 1.
RESOLUTION_RULES = "resolution-3|"

# Bricks staged per insert: a slice of a large topic costs a few MB of frames, not hundreds.
STAGE_SLICE = 20_000


class StageRecords(Records):
    """The `staged_*` tables (a resolution waiting to be published) and the digest of what resolution
    read (the rule for "nothing changed, skip")."""

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

    def resolution_prior(self, topic_id: str) -> dict[str, Brick | PriorState]:
        """The topic's stored bricks as resolution reads them: FINAL ones whole, the rest as state
        and place only, so a large topic is not held twice."""
        prior: dict[str, Brick | PriorState] = {
            b: PriorState(state, order_index)
            for b, state, order_index in self.conn.execute(
                "SELECT brick_id, state, order_index FROM bricks WHERE topic_id = ? AND state <> 'FINAL'", [topic_id]
            ).fetchall()
        }
        prior.update((b.brick_id, b) for b in self.vault.bricks.select(topic_id, state="FINAL"))
        return prior

    def write(
        self, topic_id: str, bricks: Iterable[Brick], *, inputs_digest: str | None, slice_size: int | None = None
    ) -> None:
        """Hold a topic's resolved bricks in the vault until `publish_staged`, replacing any earlier
        stage: resolution and publishing hand over through the vault, so a large topic is never
        pickled between steps nor held in memory twice. `bricks` may be lazy: it is read
        `slice_size` (default STAGE_SLICE) at a time, and must not query this vault while it is read."""
        bricks = iter(bricks)
        with self.transaction():
            self.drop(topic_id)
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

    def drop(self, topic_id: str) -> None:
        for table in STAGE_TABLES:
            self.conn.execute(f"DELETE FROM {table} WHERE topic_id = ?", [topic_id])

    def waiting(self, topic_id: str, inputs_digest: str | None) -> bool:
        """Whether a stage of exactly this resolution waits to be published."""
        return bool(
            self.conn.execute(
                "SELECT count(*) FROM staged_resolutions WHERE topic_id = ? AND inputs_digest IS NOT DISTINCT FROM ?",
                [topic_id, inputs_digest],
            ).fetchone()[0]
        )

    def manifest_entries(self, topic_id: str) -> tuple[ManifestEntry, ...]:
        """The staged visible bricks in manifest order, read as entries only (never as whole bricks)."""
        rows = self.conn.execute(
            """SELECT order_index, brick_id, fingerprint, state FROM staged_bricks
               WHERE topic_id = ? AND state <> 'SUPERSEDED' ORDER BY order_index, brick_id""",
            [topic_id],
        ).fetchall()
        return tuple(trusted(ManifestEntry, order_index=o, brick_id=b, fingerprint=f, state=s) for o, b, f, s in rows)
