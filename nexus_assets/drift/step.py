"""Drift detection against the vault's latest run versions and against the files on disk."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nexus_assets.core.models import Brick, IngestionError, SourceAddress
from nexus_assets.drift.rules import NodeCache, address_problem, slice_problem
from nexus_assets.ingest.runfiles import file_stat, iter_run_file, source_problem
from nexus_assets.vault.records import RunVersion

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from nexus_assets.drift.records import DriftRecords
    from nexus_assets.gate.records import OccurrenceRecords
    from nexus_assets.history.records import HistoryQueries
    from nexus_assets.ingest.records import RunRecords
    from nexus_assets.publish.records import BrickRecords


class DriftStores(Protocol):
    """The stores drift reads and records: bricks and their occurrences, the runs and files they
    come from, each source's status and its flips."""

    bricks: BrickRecords
    occurrences: OccurrenceRecords
    runs: RunRecords
    drift: DriftRecords
    history: HistoryQueries

    def transaction(self) -> AbstractContextManager[None]: ...


def verbatim_problems(vault: DriftStores, topic_id: str, runs: set[str] | None = None) -> tuple[int, int, list[str]]:
    """Invariant 1 over the vault: every stored occurrence is the exact slice of its node in the
    run version it was seen in, and every brick's content is its canonical occurrence's text.
    Compared against the stored text nodes in SQL; only an occurrence at a path that is not a text
    node (a pointer at another string leaf) needs its run's document. `runs`: only the occurrences
    of these runs and the bricks with a source in them (what a sync changed).
    Returns (occurrences checked, bricks checked, problems)."""
    problems: list[str] = []
    undecided: dict[RunVersion, list] = defaultdict(list)
    for occ, version, problem in vault.occurrences.occurrences_not_matching_nodes(topic_id, runs):
        a = occ.address
        if problem is None:
            undecided[RunVersion(a.run_id, version)].append(occ)
        else:
            problems.append(f"{a.run_id} {a.json_path}[{a.start}:{a.end}]: {_NODE_PROBLEMS[problem].format(a=a)}")
    documents = vault.runs.load_runs(undecided) if undecided else {}
    for rv, occurrences in sorted(undecided.items(), key=lambda kv: (kv[0].run_id, kv[0].version_id)):
        run = documents.get(rv)
        cache = NodeCache(run.document) if run else None
        for occ in occurrences:
            a = occ.address
            problem = slice_problem(run.document, a, occ.content, cache) if run else f"run version {rv.version_id[:12]} is missing"
            if problem:
                problems.append(f"{a.run_id} {a.json_path}[{a.start}:{a.end}]: {problem}")
    bricks_checked, bad_bricks = vault.occurrences.canonical_content_mismatches(topic_id, runs)
    problems += [f"brick {b[:12]}: content is not the text at its canonical source" for b in bad_bricks]
    return vault.occurrences.occurrence_count(topic_id, runs), bricks_checked, problems


_NODE_PROBLEMS = {
    "checksum": "{a.json_path} changed (checksum {a.node_checksum:.12}… no longer matches)",
    "short": "{a.json_path} is shorter than offset {a.end}",
    "slice": "stored text differs from {a.json_path}[{a.start}:{a.end}]",
}


def stale_addresses(vault: DriftStores, topic_id: str) -> set[SourceAddress]:
    """Addresses whose run has a newer version in which the node no longer matches."""
    changed, unknown = vault.occurrences.addresses_changed_in_latest(topic_id)
    if unknown:
        # No text node at that path in the newer version: the document says whether anything is there.
        runs = vault.runs.latest_runs({a.run_id for a, _ in unknown})
        caches = {run_id: NodeCache(run.document) for run_id, run in runs.items()}
        changed |= {a for a, _ in unknown if a.run_id in runs and address_problem(runs[a.run_id].document, a, caches[a.run_id])}
    return changed


def withdrawn_addresses(vault: DriftStores, topic_id: str) -> set[SourceAddress]:
    """Addresses whose node now reads text the vault knew before them: an edit that was undone.
    Their bricks are history, not stale (invariant 14); see `resolve_lazily`."""
    later = vault.drift.addresses_after_latest(topic_id)
    return later & stale_addresses(vault, topic_id) if later else set()


@dataclass(frozen=True)
class Drift:
    brick_id: str
    topic_id: str
    address: SourceAddress
    problem: str


def file_drift(vault: DriftStores, bricks: list[Brick]) -> list[Drift]:
    """Re-read every source run from the file it was last ingested from and check each address."""
    by_run: dict[str, list[tuple[Brick, SourceAddress]]] = defaultdict(list)
    for b in bricks:
        for a in b.sources:
            by_run[a.run_id].append((b, a))
    sources = vault.runs.run_sources(by_run)
    by_file: dict[str, list[str]] = defaultdict(list)
    for run_id in sorted(by_run):
        if run_id in sources:
            by_file[sources[run_id][0]].append(run_id)
    found: list[Drift] = []
    for run_id in sorted(set(by_run) - set(sources)):
        found += [Drift(b.brick_id, b.topic_id, a, f"run {run_id} is not in the vault") for b, a in by_run[run_id]]
    for file, run_ids in sorted(by_file.items()):
        # Each run is checked as it streams past and then dropped: an export is never held whole.
        checked: set[str] = set()
        # Gone, or unreadable (a folder made private): drift named as such, not a traceback.
        problem = f"source file {file} {unread}" if (unread := source_problem(Path(file))) else None
        if problem is None:
            wanted = set(run_ids)
            for item in iter_run_file(Path(file), file):
                if isinstance(item, IngestionError):
                    if item.conversation is None:
                        problem = f"source file {file} no longer reads: {item.problem}"
                elif item.run_id in wanted and item.run_id not in checked:
                    checked.add(item.run_id)
                    cache = NodeCache(item.document)
                    for b, a in by_run[item.run_id]:
                        issue = address_problem(item.document, a, cache)
                        if issue:
                            found.append(Drift(b.brick_id, b.topic_id, a, f"run {item.run_id}: {issue}"))
        for run_id in run_ids:
            if run_id not in checked:
                missing = problem or f"run {run_id} is no longer in {file}"
                found += [Drift(b.brick_id, b.topic_id, a, missing) for b, a in by_run[run_id]]
    return found


@dataclass(frozen=True)
class DriftCheck:
    """What one drift check looked at and what it found: every address it checked, so a source
    that matches again is recorded as such (invariant 14)."""

    checked: frozenset[SourceAddress]
    drifts: tuple[Drift, ...]

    @property
    def stale_bricks(self) -> list[str]:
        return sorted({d.brick_id for d in self.drifts})


def current_drift(vault: DriftStores, topic_id: str) -> DriftCheck:
    """Drift as the files stand now, re-reading only what moved since the sync read it.

    The sync has just ingested every changed file, so a source whose run has a newer version is
    checked against that version's stored nodes; a source file that is gone is drift; a file
    whose stat moved, or whose bytes as last read are not the ones the run's version came from (it
    no longer reads, say), is re-read, and so is every source recorded as drifted (it may have been
    restored). The full re-read of every file is `full_drift`, run by `nexus verify` and the nightly
    schedule. When nothing moved and nothing is drifted, no brick is loaded: a no-change sync does
    not pay per brick.
    """
    changed = stale_addresses(vault, topic_id)
    drifted_before = set(vault.drift.drifted_addresses(topic_id))
    run_ids = vault.history.brick_source_runs(topic_id)
    sources = vault.runs.run_sources(run_ids)
    recorded = vault.runs.file_stats()
    moved = {
        run_id
        for run_id, (file, _) in sources.items()
        if (stat := file_stat(Path(file))) is None or stat != recorded.get(file)
    }
    # A file the sync read (its new stat is recorded) that gave no newer version of the run: it no
    # longer reads, or holds other runs. Its bytes are not the ones the run came from.
    moved |= vault.drift.runs_off_their_file(run_ids)
    missing = run_ids - set(sources)
    if not changed and not moved and not missing and not drifted_before:
        return DriftCheck(frozenset(), ())
    bricks = vault.bricks.select(topic_id)
    found = [
        Drift(b.brick_id, b.topic_id, a, f"run {a.run_id}: {a.json_path} changed in a newer version of the run")
        for b in bricks
        for a in b.sources
        if a in changed
    ]
    reread = moved | missing
    again = [
        b.model_copy(update={"sources": tuple(a for a in b.sources if a.run_id in reread or (a in drifted_before and a not in changed))})
        for b in bricks
    ]
    flagged = {(d.brick_id, d.address) for d in found}
    found += [d for d in file_drift(vault, [b for b in again if b.sources]) if (d.brick_id, d.address) not in flagged]
    checked = frozenset(
        a for b in bricks for a in b.sources if a in changed or a.run_id in reread or a in drifted_before
    )
    return DriftCheck(checked, tuple(found))


def full_drift(vault: DriftStores, topic_id: str | None = None) -> DriftCheck:
    """Every source address re-read from the file it came from."""
    bricks = vault.bricks.select(topic_id)
    return DriftCheck(frozenset(a for b in bricks for a in b.sources), tuple(file_drift(vault, bricks)))


def record_drift(vault: DriftStores, check: DriftCheck, observed_by: str) -> list[dict]:
    """Store a check's findings as each source's status (drifted or matching again); returns the flips."""
    drifted: dict[SourceAddress, str] = {}
    for d in check.drifts:
        drifted.setdefault(d.address, d.problem)
    with vault.transaction():
        return vault.drift.record_source_status(check.checked, drifted, observed_by=observed_by)
