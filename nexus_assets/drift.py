"""Drift detection against the vault's latest run versions and against the files on disk."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from nexus_assets.core.drift import address_problem
from nexus_assets.core.models import Brick, IngestionError, Run, SourceAddress
from nexus_assets.runfiles import iter_run_file
from nexus_assets.vault import Vault


def stale_addresses(vault: Vault, topic_id: str) -> set[SourceAddress]:
    """Addresses whose run has a newer version in which the node no longer matches."""
    occurrences = vault.occurrences(topic_id)
    latest = vault.latest_versions({o.address.run_id for o, _ in occurrences})
    suspects = [o.address for o, version in occurrences if latest.get(o.address.run_id) not in (None, version)]
    if not suspects:
        return set()
    runs = vault.latest_runs({a.run_id for a in suspects})
    return {a for a in suspects if a.run_id in runs and address_problem(runs[a.run_id].document, a)}


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
        current: dict[str, Run] = {}
        problem = None
        if not Path(file).exists():
            problem = f"source file {file} is gone"
        else:
            wanted = set(run_ids)
            for item in iter_run_file(Path(file), file):
                if isinstance(item, IngestionError):
                    if item.conversation is None:
                        problem = f"source file {file} no longer reads: {item.problem}"
                elif item.run_id in wanted:
                    current[item.run_id] = item
        for run_id in run_ids:
            for b, a in by_run[run_id]:
                if run_id not in current:
                    found.append(Drift(b.brick_id, b.topic_id, a, problem or f"run {run_id} is no longer in {file}"))
                    continue
                issue = address_problem(current[run_id].document, a)
                if issue:
                    found.append(Drift(b.brick_id, b.topic_id, a, f"run {run_id}: {issue}"))
    return found
