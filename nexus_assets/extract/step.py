"""The extract phase's step: ask the extractor about every run version it has not answered for.
The `pointer_extractions` asset calls it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from nexus_assets.core.collector import collector_paused
from nexus_assets.core.models import COMPILED_STATES, Run, Topic
from nexus_assets.extract.backends import Extraction, Extractor, extraction_key
from nexus_assets.extract.records import ExtractionRecords
from nexus_assets.extract.replay import Growth, bases, growths, merged, replays_nodes
from nexus_assets.ingest.records import RunRecords
from nexus_assets.llm.chunking import RUNS_PER_EXTRACTION
from nexus_assets.topics.records import TopicRecords
from nexus_assets.vault.records import RunVersion

Progress = Callable[[str], None]


class ExtractStores(Protocol):
    """The stores the extract phase uses: runs' text in, the extractor's answers out."""

    topics: TopicRecords
    runs: RunRecords
    extractions: ExtractionRecords


@dataclass
class ExtractReport:
    candidates: int = 0
    extracted: int = 0
    reused: int = 0
    pointers: int = 0
    runs_grown: int = 0  # versions that grew from an answered one: only their new nodes were read
    nodes_replayed: int = 0
    nodes_read: int = 0
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@collector_paused
def extract_phase(
    vault: ExtractStores, topic: Topic, extractor: Extractor, *, progress: Progress | None = None, node_replay: bool = True
) -> ExtractReport:
    """Ask the extractor about every latest run version it has not answered for yet.

    Not one transaction: each answer (and each paid LLM call) is kept as soon as it exists, so a
    failure later in the topic never costs what was already extracted. An extractor that
    `shares_requests` is also given, per run, the other compiled topics that lack an answer for it
    (docs/quality.md): their answers are stored now and replayed by their own steps. A version grown from
    one already answered gives the extractor only its new nodes (`replay.py`; `node_replay` False:
    the whole version, as before).
    """
    report = ExtractReport()
    versions = admitted(vault, topic, [RunVersion(r, v) for r, v in sorted(vault.runs.latest_versions().items())])
    report.candidates = len(versions)
    done = _answered(vault, extractor, topic, versions)
    todo = [rv for rv in versions if rv not in done]
    report.reused = len(versions) - len(todo)
    companions = _companion_topics(vault, topic) if getattr(extractor, "shares_requests", False) else []
    replaying = node_replay and replays_nodes(extractor)
    keys = {rv: extraction_key(extractor, topic, rv.version_id) for rv in todo}
    step = max(25, len(todo) // 10)
    for start in range(0, len(todo), RUNS_PER_EXTRACTION):
        chunk = todo[start : start + RUNS_PER_EXTRACTION]
        grown = growths(vault.extractions, bases(vault.extractions, extractor, topic, chunk)) if replaying else {}
        runs = _load(vault, chunk, grown)
        asked_with = _asked_with(vault, extractor, companions, chunk, grown, replaying)
        asked = [rv for rv in chunk if rv not in grown or grown[rv].new_paths]
        results = extractor.extract_runs(topic, [runs[rv] for rv in asked], asked_with) if asked else {}
        answers = []
        for i, rv in enumerate(chunk, start):
            result = results.get(rv.run_id, Extraction([]))
            if not result.complete:
                report.incomplete.append(rv.run_id)
                report.notes += [f"{rv.run_id}: {n}" for n in result.notes]
                continue
            pointers = result.pointers
            if rv in grown:
                pointers = merged(grown[rv], pointers)
                report.runs_grown += 1
                report.nodes_replayed += grown[rv].unchanged_nodes
                report.nodes_read += len(grown[rv].new_paths)
            answers.append((keys[rv], rv, pointers))
            report.extracted += 1
            report.pointers += len(pointers)
            if progress and (i + 1) % step == 0:
                progress(f"{topic.topic_id}: extracted {i + 1}/{len(todo)} runs")
        vault.extractions.store_extractions(topic.topic_id, extractor.identity, answers)
    return report


def _load(vault: ExtractStores, chunk: list[RunVersion], grown: dict[RunVersion, Growth]) -> dict[RunVersion, Run]:
    """The chunk's run versions from their stored nodes: a grown one with its new nodes only."""
    runs = vault.runs.load_run_nodes([rv for rv in chunk if rv not in grown])
    partial = [rv for rv in chunk if rv in grown and grown[rv].new_paths]
    if partial:
        runs |= vault.runs.load_run_nodes(partial, only={rv: grown[rv].new_paths for rv in partial})
    return runs


def _asked_with(
    vault: ExtractStores, extractor: Extractor, companions: list[Topic], chunk: list[RunVersion],
    grown: dict[RunVersion, Growth], replaying: bool,
) -> dict[str, tuple[Topic, ...]]:
    """Per run, the companion topics asked in the same requests: those lacking an answer for the
    version that would ask for the same nodes (the same earlier answer to grow from, or none), so
    what is stored for them is what their own step asks for."""
    out = {}
    for t in companions:
        answered = _answered(vault, extractor, t, chunk)
        lacking = [rv for rv in chunk if rv not in answered]
        theirs = bases(vault.extractions, extractor, t, lacking) if replaying else {}
        for rv in lacking:
            mine = grown[rv].base.version if rv in grown else None
            if (theirs[rv].version if rv in theirs else None) == mine:
                out.setdefault(rv.run_id, []).append(t)
    return {rv.run_id: tuple(out.get(rv.run_id, ())) for rv in chunk}


def _answered(vault: ExtractStores, extractor: Extractor, topic: Topic, versions: list[RunVersion]) -> set[RunVersion]:
    """The run versions the extractor (under its identity or an earlier one) has answered for the topic."""
    identities = (extractor.identity, *getattr(extractor, "legacy_identities", ()))
    keys = {(identity, rv): extraction_key(identity, topic, rv.version_id) for identity in identities for rv in versions}
    present = vault.extractions.extraction_keys_present(keys.values())
    return {rv for (_, rv), key in keys.items() if key in present}


def _companion_topics(vault: ExtractStores, topic: Topic) -> list[Topic]:
    """The other topics a sync compiles (their answers can ride along with this topic's requests)."""
    return [t for t in vault.topics.all() if t.topic_id != topic.topic_id and t.state in COMPILED_STATES]


def admitted(vault: ExtractStores, topic: Topic, versions: list[RunVersion]) -> list[RunVersion]:
    """The run versions the topic reads: all, or those its `sources` admit (by file, title, id, date).
    A run left out is not extracted for the topic; what earlier syncs compiled from it stays."""
    sources = topic.sources
    if sources is None or not versions:
        return versions
    ids = [rv.run_id for rv in versions]
    files = vault.runs.run_sources(ids)
    names = vault.runs.run_names(ids)
    return [
        rv for rv in versions
        if sources.admits(rv.run_id, files.get(rv.run_id, (None,))[0], names[rv.run_id].title, names[rv.run_id].date)
    ]
