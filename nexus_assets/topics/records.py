"""Topics as recorded from their files, their transitions, and the folders a sync read (invariant 13)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import (
    Topic,
)
from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records
from nexus_assets.vault.sources import stored_path, vault_folder


class TopicRecords(Records):
    """The `topics`, `topic_transitions` and `vault_sources` tables."""

    # Recorded sources (invariant 13)

    def record_sources(self, **paths: Path | str | None) -> None:
        """Remember the directories a sync read (kind = runs_dir / topics_dir), relative to the
        vault's folder when inside it, so a copy of that folder reads its own."""
        folder = vault_folder(self.conn)
        for kind, path in paths.items():
            if path is not None:
                self.conn.execute(
                    "INSERT INTO vault_sources VALUES (?, ?, ?) ON CONFLICT (kind) DO UPDATE SET path = excluded.path, recorded_at = excluded.recorded_at",
                    [kind, stored_path(path, folder), now()],
                )

    # Topics

    def record_topic(self, topic: Topic, source_file: str | None, *, actor: str = "topic file") -> Topic:
        """Store a topic definition; returns it with the state the vault holds.

        Sealing is one-way: a LOCKED (or SEALING) topic stays so whatever its file says.
        """
        before = self.vault.topic_state(topic.topic_id)
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
        before = self.vault.topic_state(topic_id)
        if before is None:
            raise KeyError(topic_id)
        if before != to_state:
            self.conn.execute("UPDATE topics SET state = ?, updated_at = ? WHERE topic_id = ?", [to_state, now(), topic_id])
            self.conn.execute("INSERT INTO topic_transitions VALUES (?, ?, ?, ?, ?)", [topic_id, before, to_state, actor, now()])

    def all(self) -> list[Topic]:
        rows = self.conn.execute("SELECT definition_json, state FROM topics ORDER BY topic_id").fetchall()
        return [Topic.model_validate({**json.loads(d), "state": s}) for d, s in rows]

    def visible_texts(self, topic_id: str) -> Iterator[tuple[str, str]]:
        """(brick_id, content) of the topic's visible bricks, streamed; consume it before the next query."""
        cursor = self.conn.execute("SELECT brick_id, content FROM bricks WHERE topic_id = ? AND state <> 'SUPERSEDED'", [topic_id])
        while rows := cursor.fetchmany(10_000):
            yield from rows

    def last_brick_update(self, topic_id: str) -> str | None:
        row = self.conn.execute("SELECT max(updated_at)::VARCHAR FROM bricks WHERE topic_id = ?", [topic_id]).fetchone()
        return row[0] if row else None

    def texts_updated_since(self, topic_id: str, mark: str) -> list[tuple[str, str, bool]] | None:
        """(brick_id, content, visible) of the topic's bricks written after `mark` (a
        `last_brick_update`); None when that is most of the topic (re-reading it whole is cheaper)."""
        rows = self.conn.execute(
            """SELECT brick_id, content, state <> 'SUPERSEDED' FROM bricks
               WHERE topic_id = ? AND updated_at > ?::TIMESTAMPTZ""",
            [topic_id, mark],
        ).fetchall()
        total = self.conn.execute("SELECT count(*) FROM bricks WHERE topic_id = ?", [topic_id]).fetchone()[0]
        return None if len(rows) > max(1_000, total // 4) else rows

    def topic(self, topic_id: str) -> Topic | None:
        return self.vault.remembered(("topic", topic_id), lambda: self._topic(topic_id))

    def _topic(self, topic_id: str) -> Topic | None:
        row = self.conn.execute("SELECT definition_json, state FROM topics WHERE topic_id = ?", [topic_id]).fetchone()
        return Topic.model_validate({**json.loads(row[0]), "state": row[1]}) if row else None

    # Extraction quality (docs/quality.md): what `nexus eval` and the `extraction_quality` check read

    def topic_source_file(self, topic_id: str) -> str | None:
        row = self.conn.execute("SELECT source_file FROM topics WHERE topic_id = ?", [topic_id]).fetchone()
        return row[0] if row else None
