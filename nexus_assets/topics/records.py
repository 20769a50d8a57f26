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


# How a topic's `keyword_forms` is stored (core/keywords.py). A definition stored before the field
# existed names none and matched exact words: it reads back as "exact", and while its file does not
# name the field it is stored that way again, so its stored bytes (what resolution compares) stay as
# they were. Every other definition is stored with its rule named.


def kept_exact(topic: Topic, pinned: bool) -> bool:
    """Whether the vault keeps a pinned topic's exact keywords for this definition from its file."""
    return pinned and "keyword_forms" not in topic.model_fields_set


def as_recorded(topic: Topic, pinned: bool) -> Topic:
    """The topic from its file as the vault records it (`pinned`: `TopicRecords.keywords_pinned`)."""
    return topic.model_copy(update={"keyword_forms": "exact"}) if kept_exact(topic, pinned) else topic


def stored_definition(topic: Topic, legacy: bool) -> str:
    data = topic.model_dump(mode="json")
    if legacy:
        data.pop("keyword_forms", None)
    else:
        data["keyword_forms"] = topic.keyword_forms
    return canonical_json(data)


def topic_of_stored(definition_json: str, state: str) -> Topic:
    return Topic.model_validate({"keyword_forms": "exact", **json.loads(definition_json), "state": state})


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

    def record_topic(self, topic: Topic, source_file: str | None, *, actor: str = "topic file", reselect: bool = False) -> Topic:
        """Store a topic definition; returns it with the state the vault holds.

        Sealing is one-way: a LOCKED (or SEALING) topic stays so whatever its file says. A topic
        pinned to exact keywords (`keywords_pinned`) stays so while its file does not name
        `keyword_forms`, unless `reselect` (`nexus sync --reselect`) moves it to this release's rule.
        """
        before = self.vault.topic_state(topic.topic_id)
        state = topic.state
        if before in ("SEALING", "LOCKED"):
            state = before
        pinned = not reselect and self.keywords_pinned(topic.topic_id)
        legacy = kept_exact(topic, pinned)
        stored = as_recorded(topic, pinned).model_copy(update={"state": state})
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
                stored_definition(stored, legacy),
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

    def keywords_pinned(self, topic_id: str) -> bool:
        """Whether the vault holds the topic as compiled with exact keywords before they were
        inflected: its stored definition has keywords, no `keyword_forms`, and it is not a DRAFT
        (never compiled, so nothing of it to keep)."""
        row = self.conn.execute("SELECT definition_json, state FROM topics WHERE topic_id = ?", [topic_id]).fetchone()
        if row is None or row[1] == "DRAFT":
            return False
        raw = json.loads(row[0])
        return "keyword_forms" not in raw and bool((raw.get("extraction_policy") or {}).get("required_keywords"))

    def all(self) -> list[Topic]:
        rows = self.conn.execute("SELECT definition_json, state FROM topics ORDER BY topic_id").fetchall()
        return [topic_of_stored(d, s) for d, s in rows]

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
        return topic_of_stored(row[0], row[1]) if row else None

    # Extraction quality (docs/quality.md): what `nexus eval` and the `extraction_quality` check read

    def topic_source_file(self, topic_id: str) -> str | None:
        row = self.conn.execute("SELECT source_file FROM topics WHERE topic_id = ?", [topic_id]).fetchone()
        return row[0] if row else None
