"""Which runs each topic is about (`topic_record_runs`): a verdict per topic, run version and topic
definition, written by the topic's `raw_runs` step and read by recall (the topic's record)."""

from __future__ import annotations

from typing import Iterable, Sequence

from nexus_assets.extract.about import HIDDEN_ONLY_LIKE, HiddenOnly, hidden_messages
from nexus_assets.vault.connection import now
from nexus_assets.vault.records import Records, RunVersion


class AboutRecords(Records):
    def judged(self, topic_id: str, digest: str, versions: Iterable[RunVersion]) -> set[RunVersion]:
        """The run versions already judged for this topic definition."""
        versions = list(versions)
        if not versions:
            return set()
        rows = self.conn.execute(
            """SELECT run_id, version_id FROM topic_record_runs WHERE topic_id = ? AND definition_sha256 = ?
                 AND run_id IN (SELECT unnest(?))""",
            [topic_id, digest, sorted({v.run_id for v in versions})],
        ).fetchall()
        return {RunVersion(r, v) for r, v in rows} & set(versions)

    def record(self, topic_id: str, digest: str, verdicts: Sequence[tuple[RunVersion, bool, bool, str]]) -> None:
        stamp = now()
        self._insert_df(
            "topic_record_runs",
            [{"topic_id": topic_id, "run_id": rv.run_id, "version_id": rv.version_id, "definition_sha256": digest,
              "about": about, "reads_tools": tools, "why": why, "recorded_at": stamp} for rv, about, tools, why in verdicts],
            conflict=None,
        )

    def record_runs(self, topic_id: str, digest: str, run_ids: Iterable[str] | None = None) -> dict[str, bool]:
        """run_id -> whether the topic reads its tool output too, for every run (of its latest
        version, of these admitted runs) the topic is about under this definition."""
        sql = """SELECT t.run_id, bool_or(t.reads_tools) FROM topic_record_runs t
                 JOIN runs r ON r.run_id = t.run_id AND r.version_id = t.version_id AND r.is_latest
                 WHERE t.topic_id = ? AND t.definition_sha256 = ? AND t.about"""
        params: list = [topic_id, digest]
        if run_ids is not None:
            sql += " AND t.run_id IN (SELECT unnest(?))"
            params.append(sorted(set(run_ids)))
        return dict(self.conn.execute(sql + " GROUP BY t.run_id", params).fetchall())

    def verdicts(self, topic_id: str, digest: str) -> list[tuple[str, bool, bool, str]]:
        """(run_id, about, reads_tools, why) for every run's latest version, as judged."""
        return self.conn.execute(
            """SELECT t.run_id, t.about, t.reads_tools, t.why FROM topic_record_runs t
               JOIN runs r ON r.run_id = t.run_id AND r.version_id = t.version_id AND r.is_latest
               WHERE t.topic_id = ? AND t.definition_sha256 = ? ORDER BY t.run_id""",
            [topic_id, digest],
        ).fetchall()

    def keywords_only_hidden(self, topic_id: str, digest: str) -> HiddenOnly | None:
        """The runs (latest versions) left out under this definition because its keywords occur
        there only in hidden messages, and those messages; None when there are none."""
        rows = self.conn.execute(
            """SELECT t.why FROM topic_record_runs t
               JOIN runs r ON r.run_id = t.run_id AND r.version_id = t.version_id AND r.is_latest
               WHERE t.topic_id = ? AND t.definition_sha256 = ? AND NOT t.about AND t.why LIKE ?""",
            [topic_id, digest, HIDDEN_ONLY_LIKE],
        ).fetchall()
        return HiddenOnly(len(rows), sum(hidden_messages(why) for (why,) in rows)) if rows else None

    def forget_runs(self, run_ids: Iterable[str]) -> None:
        run_ids = sorted(set(run_ids))
        if run_ids:
            self.conn.execute("DELETE FROM topic_record_runs WHERE run_id IN (SELECT unnest(?))", [run_ids])
