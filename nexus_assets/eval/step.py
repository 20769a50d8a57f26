"""Extraction quality against a gold file (docs/quality.md), for `nexus eval` and the `extraction_quality`
check. Only reads the vault: gold spans are resolved against the stored nodes, and an extractor
identity is re-scored by running the gate over its kept pointers again (no model is called).

Imports neither Dagster nor the LLM client, so the command stays as quick as the other reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nexus_assets.core.paths import (
    PathError,
    format_path,
    parse_normalized,
    resolve_string,
)
from nexus_assets.eval.rules import (
    GoldError,
    GoldLine,
    Span,
    acceptance_rate,
    parse_gold,
    resolve_gold_line,
    score,
)
from nexus_assets.ingest.scope import Scope
from nexus_assets.gate.rules import NeedsDocument, validate_pointers

if TYPE_CHECKING:
    from nexus_assets.extract.records import ExtractionRecords
    from nexus_assets.gate.records import OccurrenceRecords
    from nexus_assets.ingest.records import RunRecords
    from nexus_assets.topics.records import TopicRecords


class EvalStores(Protocol):
    """The stores an evaluation reads: the topic, its extractions, occurrences and the nodes they name."""

    topics: TopicRecords
    runs: RunRecords
    extractions: ExtractionRecords
    occurrences: OccurrenceRecords


def read_gold(path: Path) -> list[GoldLine]:
    if not path.is_file():
        raise GoldError(f"gold file {path} not found; write one, or start from `nexus eval TOPIC --init-gold {path}`")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise GoldError(f"gold file {path}: not valid UTF-8 at byte {exc.start}; save it as UTF-8") from None
    return parse_gold(text, str(path))


def resolve_gold(vault: EvalStores, topic_id: str, path: Path) -> list[Span]:
    """The topic's gold spans (lines naming another topic are skipped; a line without topic_id
    belongs to the topic being evaluated), each resolved against its run's latest stored version."""
    lines = [g for g in read_gold(path) if g.topic_id in (None, topic_id)]
    if not lines:
        raise GoldError(f"gold file {path} has no lines for topic {topic_id!r}; add lines with \"topic_id\": \"{topic_id}\"")
    normalized = {g.line: _normalized(g.json_path) for g in lines}
    texts = vault.runs.latest_node_texts((g.run_id, normalized[g.line]) for g in lines if normalized[g.line])
    documents: dict[str, object] = {}
    spans = []
    for g in lines:
        where = f"gold file {path}, line {g.line}"
        json_path, text = normalized[g.line], texts.get((g.run_id, normalized[g.line] or ""))
        if text is None:
            # Not a stored text node: as the gate does, let the run's document say what the path names.
            if g.run_id not in documents:
                raw = vault.runs.latest_raw_json(g.run_id)
                if raw is None:
                    raise GoldError(f"{where}: run {g.run_id!r} is not in the vault; check the run_id (`nexus bricks` lists sources)")
                documents[g.run_id] = json.loads(raw)
            try:
                steps, text = resolve_string(documents[g.run_id], g.json_path)
            except PathError as exc:
                raise GoldError(f"{where}: {exc.detail} in run {g.run_id!r} ({exc.reason}); use the path `nexus bricks --json` shows") from None
            json_path = format_path(steps)
        spans.append(resolve_gold_line(g, text, json_path, str(path)))
    return spans


def _normalized(json_path: str) -> str | None:
    steps = parse_normalized(json_path)
    return format_path(steps) if steps is not None else None


def predicted_spans(vault: EvalStores, topic_id: str, extractor: str | None = None) -> tuple[list[Span], int, int]:
    """(predicted spans, accepted pointers, rejected pointers). Without `extractor`: every source
    address of the topic's bricks and the stored verdicts. With one: that identity's kept pointers
    through the gate again, against the stored nodes, in memory (nothing is written)."""
    if extractor is None:
        accepted, rejected = vault.occurrences.pointer_verdict_counts(topic_id)
        return [Span(*row) for row in vault.occurrences.brick_source_spans(topic_id)], accepted, rejected
    kept = vault.extractions.kept_extractions(topic_id, extractor)
    topic = vault.topics.topic(topic_id)
    # The sync's gate, scope included, so these verdicts are the ones a sync would give.
    scope = Scope.of(topic.extraction_policy, topic) if topic is not None else None
    runs = vault.runs.load_run_nodes(rv for rv, _ in kept)
    spans: list[Span] = []
    accepted = rejected = 0
    for rv, pointers in kept:
        run = runs[rv]
        try:
            occurrences, rejections = validate_pointers(pointers, topic_id=topic_id, run=run, scope=scope)
        except NeedsDocument:
            run = vault.runs.load_runs([rv])[rv]
            occurrences, rejections = validate_pointers(pointers, topic_id=topic_id, run=run, scope=scope)
        accepted += len(occurrences)
        rejected += len(rejections)
        spans += [Span(o.address.run_id, o.address.json_path, o.address.start, o.address.end) for o in occurrences]
    return spans, accepted, rejected


def evaluate(vault: EvalStores, topic_id: str, gold_path: Path, extractor: str | None = None) -> dict:
    """Every figure `nexus eval --json` prints for one topic and one predictor."""
    gold = resolve_gold(vault, topic_id, gold_path)
    predicted, accepted, rejected = predicted_spans(vault, topic_id, extractor)
    result = score(predicted, gold)
    return {
        "topic_id": topic_id,
        "gold_file": str(gold_path),
        "extractor": extractor or "bricks",
        **result.overall.as_dict(),
        "accepted_pointers": accepted,
        "rejected_pointers": rejected,
        "acceptance_rate": acceptance_rate(accepted, rejected),
        "per_run": [{"run_id": run_id, **f.as_dict()} for run_id, f in result.per_run.items()],
        "misses": [s.as_dict() for s in result.misses],
        "false_positives": [s.as_dict() for s in result.false_positives],
        "overlap_misses": [s.as_dict() for s in result.overlap_misses],
        "overlap_false_positives": [s.as_dict() for s in result.overlap_false_positives],
    }


def gold_lines_for(vault: EvalStores, topic_id: str) -> list[dict]:
    """The topic's current bricks as gold lines (every source address), for a person to edit."""
    spans = vault.occurrences.brick_source_spans(topic_id)
    texts = vault.runs.latest_node_texts((r, p) for r, p, _, _ in spans)
    lines = []
    for r, p, s, e in spans:
        line = {"topic_id": topic_id, "run_id": r, "json_path": p, "start": s, "end": e}
        if (r, p) in texts:
            line["text"] = texts[(r, p)][s:e]  # for the person editing; eval reads only the offsets
        lines.append(line)
    return lines


def quality_gold_path(vault: EvalStores, topic_id: str, gold: str) -> Path:
    """A topic's `quality.gold`, relative paths resolved against the topic file's directory."""
    path = Path(gold).expanduser()
    if path.is_absolute():
        return path
    source = vault.topics.topic_source_file(topic_id)
    return (Path(source).parent if source else Path.cwd()) / path
