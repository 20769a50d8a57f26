"""The stage (a topic's resolution held in the vault until it is published) and the digest of what
resolution read: the rule for "nothing changed, skip"."""

from __future__ import annotations

from itertools import islice
from typing import Iterable, Sequence

from nexus_assets.core.fingerprint import sha256_hex
from nexus_assets.core.models import (
    Brick,
    ManifestEntry,
    SourceAddress,
    trusted,
)
from nexus_assets.resolve.incremental import StoredBrick
from nexus_assets.resolve.rules import Keyed, PriorState
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

    def run_inputs(self, topic_id: str) -> tuple[str, dict[str, str]]:
        """What resolution reads for a topic: a prefix (RESOLUTION_RULES, its definition and state)
        and one line per run holding its occurrences (count and a hash of their addresses) with the
        run's latest version, ingestion place and status. A sync compares the lines with those of
        the last resolution: the runs whose line changed are what it resolves again."""
        prefix = self.conn.execute(
            "SELECT ? || coalesce((SELECT definition_json || '|' || state FROM topics WHERE topic_id = ?), '')",
            [RESOLUTION_RULES, topic_id],
        ).fetchone()[0]
        # The selector version the topic is selected with (migration 24): moving it (`--reselect`)
        # changes what is selected, so it resolves the topic whole again.
        selector = self.vault.teaching.selector(topic_id)
        if selector is not None:
            prefix += "|selector:" + selector
        # Each backend hashes the addresses its own way: the lines are compared within one vault only.
        address_hash = (
            "hashtextextended(json_path || ':' || start_offset || ':' || end_offset || ':' || node_checksum, 0)"
            if self.vault.on_postgres else "hash(json_path, start_offset, end_offset, node_checksum)"
        )
        rows = self.conn.execute(
            f"""WITH occ AS (
                   SELECT run_id, count(*) AS n, sum({address_hash}) AS h
                   FROM occurrences WHERE topic_id = ? GROUP BY run_id),
               per_run AS (
                   SELECT run_id, max(CASE WHEN is_latest THEN version_id END) AS latest, min(ingest_seq) AS seq,
                          bool_or(status = 'CLOSED') OR run_id IN (SELECT run_id FROM run_closures) AS closed
                   FROM runs WHERE run_id IN (SELECT run_id FROM occ) GROUP BY run_id)
               SELECT o.run_id, concat_ws(':', o.run_id, o.n, o.h, r.latest, r.seq, r.closed)
               FROM occ o LEFT JOIN per_run r USING (run_id)""",
            [topic_id],
        ).fetchall()
        return prefix, dict(rows)

    def topic_inputs_digest(self, topic_id: str, inputs: tuple[str, dict[str, str]] | None = None) -> str:
        """A digest of everything resolution reads for a topic (`run_inputs`). RESOLUTION_RULES is
        part of it: a topic resolved under older rules is resolved again once."""
        prefix, lines = inputs if inputs is not None else self.run_inputs(topic_id)
        return sha256_hex(prefix + "#" + "|".join(lines[run_id] for run_id in sorted(lines)))

    def resolved_inputs(self, topic_id: str) -> tuple[str | None, dict[str, str]]:
        """`run_inputs` as the topic's last published resolution read them (prefix None: none recorded)."""
        prefix, lines = None, {}
        for run_id, line in self.conn.execute("SELECT run_id, line FROM resolution_inputs WHERE topic_id = ?", [topic_id]).fetchall():
            if run_id is None:
                prefix = line
            else:
                lines[run_id] = line
        return prefix, lines

    def changed_runs(self, topic_id: str, inputs: tuple[str, dict[str, str]] | None = None) -> set[str] | None:
        """The runs whose line of `run_inputs` differs from what the last published resolution read
        (new, changed or gone); None where that resolution recorded none or read another prefix."""
        prefix, lines = inputs if inputs is not None else self.run_inputs(topic_id)
        last_prefix, last_lines = self.resolved_inputs(topic_id)
        if last_prefix != prefix:
            return None
        return {r for r in lines.keys() | last_lines.keys() if lines.get(r) != last_lines.get(r)}

    def keyed(self, topic_id: str) -> bool:
        """Whether every brick of the topic has its place keys (a resolution since migration 19
        wrote them) and every FINAL brick its place: what ranking the topic in SQL needs."""
        return not self.conn.execute(
            """SELECT count(*) FROM bricks WHERE topic_id = ?
               AND (first_key IS NULL OR (state = 'FINAL' AND order_index IS NULL))""",
            [topic_id],
        ).fetchone()[0]

    def touched_fingerprints(self, topic_id: str, run_ids: Iterable[str], addresses: Iterable[SourceAddress]) -> set[str]:
        """The fingerprints an incremental resolution regroups: every one these runs hold or held,
        every brick with a source at one of these `addresses` (undone edits), and every brick
        such an edit retired."""
        runs = list(run_ids)
        rows = self.conn.execute(
            """SELECT fingerprint FROM occurrences WHERE topic_id = $topic AND run_id IN (SELECT unnest($runs))
               UNION SELECT b.fingerprint FROM bricks b JOIN brick_sources s USING (brick_id)
                     WHERE b.topic_id = $topic AND s.run_id IN (SELECT unnest($runs))
               UNION SELECT fingerprint FROM bricks WHERE topic_id = $topic AND state = 'SUPERSEDED' AND superseded_by IS NULL""",
            {"topic": topic_id, "runs": runs},
        ).fetchall()
        touched = {r[0] for r in rows}
        if held := list({(a.run_id, a.json_path, a.start, a.end, a.node_checksum) for a in addresses}):
            import pandas as pd

            frame = pd.DataFrame(held, columns=["run_id", "json_path", "start_offset", "end_offset", "node_checksum"])
            with self._registered(_held=frame):
                touched |= {
                    r[0]
                    for r in self.conn.execute(
                        """SELECT DISTINCT b.fingerprint FROM bricks b JOIN brick_sources s USING (brick_id)
                           JOIN _held USING (run_id, json_path, start_offset, end_offset, node_checksum)
                           WHERE b.topic_id = ?""",
                        [topic_id],
                    ).fetchall()
                }
        return touched

    def stored(self, topic_id: str, *, fingerprints: Iterable[str] | None = None, brick_ids: Iterable[str] | None = None,
               candidates: bool = False, live: bool = False) -> list[StoredBrick]:
        """The topic's bricks as an incremental resolution reads them: those of these fingerprints
        or ids, the `candidates` for superseding (IMPROVISE, or SUPERSEDED by another), or every
        brick that is not retired (`live`)."""
        where, params = ["topic_id = ?"], [topic_id]
        if fingerprints is not None:
            where.append("fingerprint IN (SELECT unnest(?))")
            params.append(list(fingerprints))
        if brick_ids is not None:
            where.append("brick_id IN (SELECT unnest(?))")
            params.append(list(brick_ids))
        if candidates:
            where.append("(state = 'IMPROVISE' OR (state = 'SUPERSEDED' AND superseded_by IS NOT NULL))")
        if live:
            where.append("NOT (state = 'SUPERSEDED' AND superseded_by IS NULL)")
        rows = self.conn.execute(
            f"SELECT brick_id, fingerprint, content, state, superseded_by, first_key, rank_key FROM bricks WHERE {' AND '.join(where)}", params
        ).fetchall()
        return [StoredBrick(*r) for r in rows]

    def partial(self, topic_id: str) -> bool:
        """Whether the waiting stage holds only the bricks an incremental resolution changed."""
        row = self.conn.execute("SELECT partial FROM staged_resolutions WHERE topic_id = ?", [topic_id]).fetchone()
        return bool(row and row[0])

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
        self,
        topic_id: str,
        bricks: Iterable[Brick | Keyed],
        *,
        inputs_digest: str | None,
        slice_size: int | None = None,
        partial: bool = False,
        inputs: tuple[str, dict[str, str]] | None = None,
    ) -> None:
        """Hold a topic's resolved bricks in the vault until `publish_staged`, replacing any earlier
        stage: resolution and publishing hand over through the vault, so a large topic is never
        pickled between steps nor held in memory twice. `bricks` may be lazy: it is read
        `slice_size` (default STAGE_SLICE) at a time, and must not query this vault while it is read.

        `partial`: only the bricks an incremental resolution changed (publishing re-ranks the
        topic). `inputs`: the `run_inputs` this resolution read, kept with it once published."""
        bricks = iter(bricks)
        with self.transaction():
            self.drop(topic_id)
            # In slices: the frames and DuckDB's copy of them stay small beside the bricks themselves.
            while piece := list(islice(bricks, slice_size or STAGE_SLICE)):
                self._stage_slice(topic_id, piece)
                del piece  # let the slice go before the next one is read
            self.conn.execute(
                "INSERT INTO staged_resolutions (topic_id, inputs_digest, staged_at, partial) VALUES (?, ?, ?, ?)",
                [topic_id, inputs_digest, now(), partial],
            )
            if inputs is not None:
                prefix, lines = inputs
                self.conn.execute(
                    "INSERT INTO staged_resolution_inputs (topic_id, run_id, line) VALUES (?, NULL, ?)", [topic_id, prefix]
                )
                self.conn.execute(
                    "INSERT INTO staged_resolution_inputs (topic_id, run_id, line) SELECT ?, unnest(?), unnest(?)",
                    [topic_id, list(lines), list(lines.values())],
                )

    def _stage_slice(self, topic_id: str, items: Sequence[Brick | Keyed]) -> None:
        import pandas as pd  # only writers need it; read commands start faster without it

        bricks = [i.brick if isinstance(i, Keyed) else i for i in items]
        first_keys = [i.first_key if isinstance(i, Keyed) else None for i in items]
        rank_keys = [i.rank_key if isinstance(i, Keyed) else None for i in items]

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
                "first_key": pd.Series(first_keys, dtype="object"),
                "rank_key": pd.Series(rank_keys, dtype="object"),
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
                """INSERT INTO staged_bricks (topic_id, brick_id, content, fingerprint, state, order_index, superseded_by, stale,
                                             first_key, rank_key)
                   SELECT ?, brick_id, content, fingerprint, state, order_index, superseded_by, stale,
                          first_key::BLOB, rank_key::BLOB FROM _bricks""",
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
        return visible_entries(self.conn, "staged_bricks", topic_id)


def visible_entries(conn, table: str, topic_id: str) -> tuple[ManifestEntry, ...]:
    """A topic's visible bricks in `table` (the stage or the published bricks) in manifest order,
    read as manifest entries only."""
    rows = conn.execute(
        f"""SELECT order_index, brick_id, fingerprint, state FROM {table}
            WHERE topic_id = ? AND state <> 'SUPERSEDED' ORDER BY order_index, brick_id""",
        [topic_id],
    ).fetchall()
    return tuple(trusted(ManifestEntry, order_index=o, brick_id=b, fingerprint=f, state=st) for o, b, f, st in rows)
