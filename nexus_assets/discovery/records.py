"""Rejected topic proposals: a DRAFT topic whose file a person deleted.

Such a topic leaves `topics` (it was never compiled: no bricks, manifests or partitions to lose)
and its definition moves to `dropped_topics`, so `nexus discover` still knows not to propose it
again. Its state history stays in `topic_transitions`, ending in DROPPED.
"""

from __future__ import annotations

from nexus_assets.core.models import Topic
from nexus_assets.topics.records import topic_of_stored
from nexus_assets.vault.connection import now

DROPPED = "DROPPED"  # the last `to_state` of a dropped topic; never a state a topic file may name


def drop_draft_topic(vault, topic_id: str, *, actor: str) -> bool:
    """Move a DRAFT topic that was never compiled out of `topics`; False when it is not one (any
    more): a concurrent sync dropped it, or it has bricks or manifests after all."""
    conn = vault.conn
    row = conn.execute(
        """SELECT definition_json, source_file FROM topics t
           WHERE topic_id = ? AND state = 'DRAFT'
             AND NOT EXISTS (SELECT 1 FROM bricks b WHERE b.topic_id = t.topic_id)
             AND NOT EXISTS (SELECT 1 FROM manifests m WHERE m.topic_id = t.topic_id)""",
        [topic_id],
    ).fetchone()
    if row is None:
        return False
    stamp = now()
    with vault.transaction():  # all three rows or none
        conn.execute("INSERT INTO dropped_topics VALUES (?, ?, ?, ?, ?)", [topic_id, row[0], row[1], actor, stamp])
        conn.execute("INSERT INTO topic_transitions VALUES (?, 'DRAFT', ?, ?, ?)", [topic_id, DROPPED, actor, stamp])
        conn.execute("DELETE FROM topics WHERE topic_id = ?", [topic_id])
    return True


def dropped_topics(vault) -> list[Topic]:
    """The latest definition of every dropped topic that is not a topic again, by topic_id."""
    rows = vault.conn.execute(
        """SELECT arg_max(definition_json, dropped_at) FROM dropped_topics
           WHERE topic_id NOT IN (SELECT topic_id FROM topics) GROUP BY topic_id ORDER BY topic_id"""
    ).fetchall()
    return [topic_of_stored(d, "DRAFT") for (d,) in rows]

