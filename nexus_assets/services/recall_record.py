"""The record's side of recall (DESIGN §3.1, §8): which passages a recall reads (the asked topics'
records, or every run's conversation), their two rankings, and a passage as a recall result.

A passage that is a visible brick's text at the same address is the brick: recall lists it once,
as the brick (`bricks_at`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nexus_assets.extract.about import definition_digest
from nexus_assets.ingest.passage_records import passage_source
from nexus_assets.recall.passages import index as passage_index
from nexus_assets.recall.passages.filters import RecordFilter, TopicRecord, admits, record_filter, HIDDEN, OFF_CURRENT
from nexus_assets.recall.passages.segments import day_number
from nexus_assets.embedding.static_embedder import MODEL as PASSAGE_MODEL, embed_static
from nexus_assets.services.query_terms import Filters
from nexus_assets.store import Vault


@dataclass
class RecordRankings:
    """The record's rankings for one query: BM25 (passage and message) and dense (static model)."""

    bm25: list[tuple[str, float, str]]  # (passage id, score, run id)
    dense: list[tuple[str, float, str]]
    filt: RecordFilter
    records: list[TopicRecord]
    speakers: list[str]
    available: bool  # the vault has passages at all


def topic_records(vault: Vault, topic_ids: list[str]) -> list[TopicRecord]:
    """Each topic's record as its last sync judged it (the runs it is about, DESIGN §3.1)."""
    out = []
    for t in topic_ids:
        topic = vault.topics.topic(t)
        if topic is None:
            continue
        runs = vault.remembered(("record_runs", t), lambda: vault.about.record_runs(t, definition_digest(topic)))
        policy = topic.extraction_policy
        out.append(TopicRecord(
            topic_id=t, runs=frozenset(runs), tool_runs=frozenset(r for r, tools in runs.items() if tools),
            target_node_types=frozenset(policy.target_node_types) if policy.target_node_types else None,
            include_hidden=topic.include_hidden, current_only=topic.branches == "current",
        ))
    return out


def _days(given: Filters) -> tuple[int, int] | None:
    if not (given.since or given.until):
        return None
    return (day_number(given.since) if given.since else -10**9, day_number(given.until) if given.until else 10**9)


def record_rankings(vault: Vault, db_path: str | Path, query: str, topics: list[str] | None, wanted: list[str],
                    given: Filters, depth: int) -> RecordRankings:
    """The record's BM25 and dense rankings for `query`; empty when the vault has no passages."""
    records = topic_records(vault, wanted)
    filt = record_filter(records if topics else None)
    index = passage_index.ensure(vault, db_path)
    if index is None or not index.rows:
        return RecordRankings([], [], filt, records, [], False)
    days = _days(given)
    bm25 = passage_index.bm25_ranking(index, query, filt, depth, speaker=given.speaker, days=days)
    dense = passage_index.dense_ranking(index, embed_static([query])[0], filt, depth, speaker=given.speaker, days=days)
    speakers = sorted({s for seg in index.segments for s in seg.speakers if s})
    return RecordRankings(bm25, dense, filt, records, speakers, True)


def holding_topics(records: list[TopicRecord], row) -> list[str]:
    """The asked topics whose record holds this passage."""
    flags = (HIDDEN if row.hidden else 0) | (OFF_CURRENT if row.branch != "current" else 0)
    return [r.topic_id for r in records if any(admits(p, row.run_id, row.node_type, flags) for p in r.parts())]


__all__ = ["PASSAGE_MODEL", "RecordRankings", "holding_topics", "passage_source", "record_rankings", "topic_records"]
