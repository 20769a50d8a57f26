"""Trace: for each source address of a brick, the node it was lifted from, with the brick's span;
for a passage of the record, the node it is a sentence of, with its span, who said it and when."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from nexus_assets.core.models import SourceAddress
from nexus_assets.core.paths import parse_normalized, resolve_string
from nexus_assets.ingest.passage_records import passage_source
from nexus_assets.ingest.formats.registry import names as format_names
from nexus_assets.drift.records import node_key
from nexus_assets.vault.records import RunVersion

if TYPE_CHECKING:
    from nexus_assets.drift.records import DriftRecords
    from nexus_assets.history.records import HistoryQueries
    from nexus_assets.ingest.passage_records import PassageRecords
    from nexus_assets.ingest.records import RunRecords
    from nexus_assets.publish.records import BrickRecords


class TraceStores(Protocol):
    """The stores a trace reads: the brick, its sources' nodes and their status, its history."""

    bricks: BrickRecords
    runs: RunRecords
    drift: DriftRecords
    history: HistoryQueries


def trace_brick(vault: TraceStores, brick_id: str) -> dict:
    (brick,) = vault.bricks.select(brick_ids=[brick_id])
    seen_in = vault.history.occurrence_versions(brick.topic_id)
    keys = {}
    for a in brick.sources:
        version = seen_in.get((a.run_id, a.json_path, a.start, a.end, a.node_checksum))
        if version:
            keys[a] = RunVersion(a.run_id, version)
    runs = vault.runs.load_runs(set(keys.values()))
    files = vault.runs.version_files(set(keys.values()))
    status = vault.runs.run_status({a.run_id for a in brick.sources})
    # The recorded status (invariant 14), so trace says what verify, bricks and the check say.
    problems = vault.drift.source_problems(brick.sources)
    names = vault.runs.run_names(a.run_id for a in brick.sources)
    traces = []
    for a in brick.sources:
        run = runs.get(keys.get(a))
        node_text = resolve_string(run.document, a.json_path)[1] if run else ""
        problem = problems.get(node_key(a))
        traces.append(
            {
                **a.model_dump(),
                "version_id": keys[a].version_id if a in keys else None,
                "node_text": node_text,
                "quote": node_text[a.start : a.end],
                "current": problem is None,
                "problem": problem,
                "run_status": status.get(a.run_id),
                # The run file this version was read from.
                "source_file": files.get(keys.get(a)),
                **names[a.run_id].as_json(),
                "run_label": names[a.run_id].label,
                # A session's node is on a line of its file: people open the file at that line.
                **({"line": session_line(a.json_path)} if run is not None and run.format in format_names("session") else {}),
            }
        )
    return {
        "brick_id": brick.brick_id,
        "topic_id": brick.topic_id,
        "content": brick.content,
        "fingerprint": brick.fingerprint,
        "state": brick.state,
        "order_index": brick.order_index,
        "superseded_by": brick.superseded_by,
        "stale": brick.stale,
        "abandoned": brick.abandoned,
        "sources": [s.model_dump() for s in brick.sources],
        "traces": traces,
    }


class PassageTraceStores(Protocol):
    """The stores a passage's trace reads: the record, its run and the status recorded for its node."""

    passages: PassageRecords
    runs: RunRecords
    drift: DriftRecords


def trace_passage(vault: PassageTraceStores, passage_id: str) -> dict | None:
    """A passage where it was said: its address, speaker and time, the conversation's name, the
    node it is a sentence of and the passages around it there, and whether the run file still
    holds it as recorded: the node's recorded drift status (as a brick source's, invariant 14), and
    whether the run's latest version still holds it (a run read again with other text keeps the
    passage of its earlier version, shown drifted). None: no passage has this id."""
    row = vault.passages.last_seen(passage_id)
    if row is None:
        return None
    version = RunVersion(row.run_id, row.version_id)
    run = vault.runs.load_runs([version]).get(version)
    latest = vault.runs.latest_versions([row.run_id]).get(row.run_id)
    address = SourceAddress(run_id=row.run_id, json_path=row.json_path, start=row.start, end=row.end, node_checksum=row.node_checksum)
    problem = vault.drift.source_problems([address]).get(node_key(address))
    if problem is None and latest != row.version_id:
        problem = f"run {row.run_id} was read again and its latest version no longer holds this text at this place"
    name = vault.runs.run_names([row.run_id])[row.run_id]
    return {
        "kind": "passage",
        "passage_id": row.passage_id,
        "content": row.text,
        "speaker": row.speaker,
        "time": row.timestamp,
        **name.as_json(),
        "conversation": name.label,
        "sources": [passage_source(row, name, stale=problem is not None)],
        "around": [{"passage_id": p.passage_id, "content": p.text, "start": p.start, "end": p.end} for p in vault.passages.around(row)],
        "current": problem is None,
        "problem": problem,
        "run_status": vault.runs.run_status([row.run_id]).get(row.run_id),
        "version_id": row.version_id,
        # The run file this version was read from, and a session's line in it.
        "source_file": vault.runs.version_files([version]).get(version),
        "line": session_line(row.json_path) if run is not None and run.format in format_names("session") else None,
        "node_text": resolve_string(run.document, row.json_path)[1] if run is not None else "",
    }


def session_line(json_path: str) -> int | None:
    """The 1-based line of a session file a node's path names (`$['lines'][12]…` is line 13)."""
    steps = parse_normalized(json_path) or ()
    return steps[1] + 1 if len(steps) > 1 and steps[0] == "lines" and isinstance(steps[1], int) else None
