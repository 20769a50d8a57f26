"""The passages step (DESIGN §3.1): every latest run version's nodes split into passages once,
topic-independent. The `passages` asset and a push compiled on a warm server call it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from nexus_assets.core.collector import collector_paused
from nexus_assets.ingest.passages import SPLITTER_VERSION, passage_id, passage_spans
from nexus_assets.vault.records import RunVersion

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from nexus_assets.ingest.passage_records import PassageRecords
    from nexus_assets.ingest.records import RunRecords


class PassageStores(Protocol):
    runs: RunRecords
    passages: PassageRecords

    def transaction(self) -> AbstractContextManager[None]: ...


# Run versions read per chunk: their nodes, then their passages, are held at once.
RUNS_PER_CHUNK = 200
# New passages written at a time within a chunk's transaction.
FLUSH_ROWS = 50_000


@dataclass
class PassageReport:
    versions: int = 0
    nodes_split: int = 0
    nodes_kept: int = 0  # unchanged nodes of a grown run: their passages were built before
    passages: int = 0
    run_ids: list[str] = field(default_factory=list)


@collector_paused
def build_passages(vault: PassageStores, *, only: list[str] | None = None, progress: Callable[[str], None] | None = None) -> PassageReport:
    """Split every latest run version that has no passages yet (`only`: of these runs). A node
    whose (run, path, checksum) was split before (an unchanged node of a grown run) is not split
    again. Each chunk of runs commits on its own, so a stopped build keeps what it did."""
    report = PassageReport()
    todo = vault.passages.unbuilt_versions(SPLITTER_VERSION)
    if only is not None:
        wanted = set(only)
        todo = [rv for rv in todo if rv.run_id in wanted]
    report.versions = len(todo)
    step = max(1, len(todo) // 10)
    for start in range(0, len(todo), RUNS_PER_CHUNK):
        chunk = todo[start : start + RUNS_PER_CHUNK]
        runs = vault.runs.load_run_nodes(chunk)
        done = vault.passages.split_nodes(rv.run_id for rv in chunk)
        rows: list[dict] = []
        built: list[tuple[RunVersion, int]] = []
        with vault.transaction():
            for rv in chunk:
                count = _split_run(vault, rv, runs.get(rv), done, rows, report)
                built.append((rv, count))
                report.passages += count
            vault.passages.store(rows, built, SPLITTER_VERSION)
        report.run_ids.extend(rv.run_id for rv in chunk)
        del runs, rows
        if progress and len(todo) > RUNS_PER_CHUNK and (start // RUNS_PER_CHUNK) % max(1, step // RUNS_PER_CHUNK) == 0:
            progress(f"passages: {min(start + RUNS_PER_CHUNK, len(todo))} of {len(todo)} run versions split")
    return report


def _split_run(vault: PassageStores, rv: RunVersion, run, done: set, rows: list[dict], report: PassageReport) -> int:
    """This run version's new passages appended to `rows`; every FLUSH_ROWS of them are written
    (inside the caller's transaction), so a run of a million messages never holds them all."""
    count = 0
    for node in run.nodes if run is not None else ():
        key = (rv.run_id, node.path, node.checksum)
        if key in done:
            report.nodes_kept += 1
            continue
        done.add(key)
        report.nodes_split += 1
        for span in passage_spans(node.text or "", node.node_type, run.format):
            rows.append({
                "run_id": rv.run_id, "json_path": node.path, "node_checksum": node.checksum,
                "start_offset": span.start, "end_offset": span.end, "kind": span.kind,
                "passage_id": passage_id(rv.run_id, node.path, span.start, span.end),
            })
            count += 1
        if len(rows) >= FLUSH_ROWS:
            vault.passages.store(rows, [], SPLITTER_VERSION)
            rows.clear()
    return count
