"""Drift detection against the vault's latest run versions and against the files on disk."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from nexus_assets.core.drift import NodeCache, address_problem, slice_problem
from nexus_assets.core.models import Brick, IngestionError, SourceAddress
from nexus_assets.runfiles import iter_run_file
from nexus_assets.vault import RunVersion, Vault


def verbatim_problems(vault: Vault, topic_id: str, *, runs_per_load: int = 200) -> tuple[int, int, list[str]]:
    """Invariant 1 over the vault: every stored occurrence is the exact slice of its node in the
    run version it was seen in, and every brick's content is its canonical occurrence's text.
    Runs are loaded a few hundred at a time, so a huge export never sits in memory whole.
    Returns (occurrences checked, bricks checked, problems)."""
    by_version: dict[RunVersion, list] = defaultdict(list)
    content_at: dict[SourceAddress, str] = {}
    for occ, version in vault.occurrences(topic_id):
        by_version[RunVersion(occ.address.run_id, version)].append(occ)
        content_at[occ.address] = occ.content
    problems: list[str] = []
    versions = sorted(by_version, key=lambda rv: (rv.run_id, rv.version_id))
    for start in range(0, len(versions), runs_per_load):
        chunk = versions[start : start + runs_per_load]
        runs = vault.load_runs(chunk)
        for rv in chunk:
            run = runs.get(rv)
            cache = NodeCache(run.document) if run else None
            for occ in by_version[rv]:
                a = occ.address
                problem = slice_problem(run.document, a, occ.content, cache) if run else f"run version {rv.version_id[:12]} is missing"
                if problem:
                    problems.append(f"{a.run_id} {a.json_path}[{a.start}:{a.end}]: {problem}")
    bricks = vault.bricks(topic_id)
    for b in bricks:
        if not b.sources or content_at.get(b.sources[0]) != b.content:
            problems.append(f"brick {b.brick_id[:12]}: content is not the text at its canonical source")
    return len(content_at), len(bricks), problems


def stale_addresses(vault: Vault, topic_id: str) -> set[SourceAddress]:
    """Addresses whose run has a newer version in which the node no longer matches."""
    occurrences = vault.occurrences(topic_id)
    latest = vault.latest_versions({o.address.run_id for o, _ in occurrences})
    suspects = [o.address for o, version in occurrences if latest.get(o.address.run_id) not in (None, version)]
    if not suspects:
        return set()
    runs = vault.latest_runs({a.run_id for a in suspects})
    caches = {run_id: NodeCache(run.document) for run_id, run in runs.items()}
    return {a for a in suspects if a.run_id in runs and address_problem(runs[a.run_id].document, a, caches[a.run_id])}


@dataclass(frozen=True)
class Drift:
    brick_id: str
    topic_id: str
    address: SourceAddress
    problem: str


def file_drift(vault: Vault, bricks: list[Brick]) -> list[Drift]:
    """Re-read every source run from the file it was last ingested from and check each address."""
    by_run: dict[str, list[tuple[Brick, SourceAddress]]] = defaultdict(list)
    for b in bricks:
        for a in b.sources:
            by_run[a.run_id].append((b, a))
    sources = vault.run_sources(by_run)
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
        problem = None
        if not Path(file).exists():
            problem = f"source file {file} is gone"
        else:
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
