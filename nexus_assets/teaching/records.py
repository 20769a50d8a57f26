"""The `teachings` table (who kept or dropped which brick, and why: the audit trail of a person's
judgement) and `topic_selectors` (which selector version selects each topic, and since when).
Both append-only (migration 24)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records


@dataclass(frozen=True)
class Teaching:
    topic_id: str
    brick_id: str
    verdict: str  # keep | drop
    content: str
    reason: str | None
    actor: str
    topic_file: str
    recorded_at: datetime

    def as_json(self) -> dict:
        return {
            "topic_id": self.topic_id, "brick_id": self.brick_id, "verdict": self.verdict, "content": self.content,
            "reason": self.reason, "actor": self.actor, "topic_file": self.topic_file,
            "recorded_at": self.recorded_at.isoformat(),
        }


_COLUMNS = "topic_id, brick_id, verdict, content, reason, actor, topic_file, recorded_at"


class TeachingRecords(Records):
    """A person's keep/drop verdicts and each topic's selector version."""

    def record_teaching(self, *, topic_id: str, brick_id: str, verdict: str, content: str, reason: str | None,
                        actor: str, topic_file: str) -> Teaching:
        stamp = now()
        self.conn.execute(
            f"INSERT INTO teachings ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [topic_id, brick_id, verdict, content, reason, actor, topic_file, stamp],
        )
        return Teaching(topic_id, brick_id, verdict, content, reason, actor, topic_file, stamp)

    def teachings(self, topic_id: str | None = None) -> list[Teaching]:
        where, params = ("WHERE topic_id = ?", [topic_id]) if topic_id is not None else ("", [])
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM teachings {where} ORDER BY recorded_at, brick_id", params
        ).fetchall()
        return [Teaching(*r) for r in rows]

    def drop_reasons(self, topic_id: str) -> dict[str, str]:
        """brick_id -> why a person dropped it (the latest drop), for `nexus bricks --all`."""
        out: dict[str, str] = {}
        for t in self.teachings(topic_id):
            if t.verdict == "drop":
                out[t.brick_id] = f"dropped by {t.actor}" + (f": {t.reason}" if t.reason else "")
        return out

    # Selector versions (issue 49 item 4)

    def selector(self, topic_id: str) -> str | None:
        """The selector version the topic is selected with (None: never recorded)."""
        row = self.conn.execute(
            "SELECT selector FROM topic_selectors WHERE topic_id = ? ORDER BY recorded_at DESC LIMIT 1", [topic_id]
        ).fetchone()
        return row[0] if row else None

    def selectors(self) -> dict[str, str]:
        rows = self.conn.execute(
            """SELECT topic_id, selector FROM (
                   SELECT topic_id, selector, row_number() OVER (PARTITION BY topic_id ORDER BY recorded_at DESC) AS n
                   FROM topic_selectors) s WHERE n = 1"""
        ).fetchall()
        return dict(rows)

    def record_selector(self, topic_id: str, selector: str, why: str) -> None:
        self.conn.execute(
            "INSERT INTO topic_selectors (topic_id, selector, why, recorded_at) VALUES (?, ?, ?, ?)",
            [topic_id, selector, why, now()],
        )
