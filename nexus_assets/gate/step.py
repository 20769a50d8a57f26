"""The gate phase's step: the hallucination gate over every extraction not yet validated. The
`validated_bricks` asset calls it."""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from nexus_assets.core.collector import collector_paused
from nexus_assets.core.models import Topic
from nexus_assets.extract.records import ExtractionRecords
from nexus_assets.ingest.scope import Scope
from nexus_assets.gate.records import OccurrenceRecords
from nexus_assets.gate.rules import NeedsDocument, named_paths, validate_pointers
from nexus_assets.ingest.records import RunRecords
from nexus_assets.vault.records import RunVersion


class GateStores(Protocol):
    """The stores the gate uses: extractions and the nodes they name in, occurrences and rejections out."""

    runs: RunRecords
    extractions: ExtractionRecords
    occurrences: OccurrenceRecords

    def transaction(self) -> AbstractContextManager[None]: ...


@dataclass
class ValidateReport:
    extractions: int = 0
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)


@collector_paused
def validate_phase(vault: GateStores, topic: Topic, veto=None) -> ValidateReport:
    """Run the hallucination gate over every extraction not yet validated. `veto`: the topic's
    semantic veto (`relate/veto.py`), which may turn a verbatim pointer at a text with nothing new
    into a `semantic_veto` rejection; None (the default) changes nothing."""
    report = ValidateReport()
    scope = Scope.of(topic.extraction_policy, topic)
    pending = vault.extractions.unvalidated_extractions(topic.topic_id)
    for start in range(0, len(pending), 200):
        chunk = pending[start : start + 200]
        # Only the nodes the pointers name: the gate looks at nothing else of a run.
        named: dict[RunVersion, set[str]] = {}
        for _, rv, pointers in chunk:
            named.setdefault(rv, set()).update(named_paths(pointers))
        runs = vault.runs.load_run_nodes(named, only=named)
        results = []
        for key, rv, pointers in chunk:
            try:
                occurrences, rejections = validate_pointers(pointers, topic_id=topic.topic_id, run=runs[rv], scope=scope)
            except NeedsDocument:
                # A pointer at something other than a stored text node: only the document can judge it.
                document_run = vault.runs.load_runs([rv])[rv]
                occurrences, rejections = validate_pointers(pointers, topic_id=topic.topic_id, run=document_run, scope=scope)
            results.append((key, rv, occurrences, rejections))
        if veto is not None:
            results = veto.screen(vault, topic, results)
        for _, _, occurrences, rejections in results:
            report.extractions += 1
            report.accepted += len(occurrences)
            report.rejected.update(r.reason for r in rejections)
        with vault.transaction():
            vault.occurrences.store_validations(results)
    return report
