"""What the record's checks read (defs/record.py): passages that are not their node's slice, and
indexes out of step with the passages. Only reads."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Protocol, TYPE_CHECKING

from nexus_assets.ingest.passage_records import PASSAGE_SLICE
from nexus_assets.ingest.passages import passage_id
from nexus_assets.recall.passages.index import load
from nexus_assets.recall.passages.segments import id_of

if TYPE_CHECKING:
    from nexus_assets.ingest.passage_records import PassageRecords
    from nexus_assets.ingest.records import RunRecords


class CheckStores(Protocol):
    runs: RunRecords
    passages: PassageRecords


def slice_problems(vault: CheckStores, run_ids: list[str] | None = None) -> tuple[int, list[tuple[str, str]]]:
    """(passages checked, [(passage id, problem)]) for these runs (default: the runs the newest
    build split)."""
    runs = vault.passages.newest_build_runs() if run_ids is None else run_ids
    problems: list[tuple[str, str]] = []
    checked = 0
    # Rows come in document order, a node's passages one after another: only the last is kept.
    last: tuple[tuple[str, str], int] = (("", ""), 0)
    # A slice of rows at a time, with the texts of their nodes: never a run's passages all at once.
    rows = iter(vault.passages.latest(runs)) if runs else iter(())
    while part := list(islice(rows, PASSAGE_SLICE)):
        texts = vault.runs.latest_node_texts({(r.run_id, r.json_path) for r in part})
        for r in part:
            checked += 1
            node = texts.get((r.run_id, r.json_path))
            if node is None:
                problems.append((r.passage_id, "its node is not in the run's latest version"))
                continue
            if not (0 <= r.start < r.end <= len(node)) or node[r.start : r.end] != r.text:
                problems.append((r.passage_id, f"[{r.start}:{r.end}] is not a slice of its node that equals its text"))
            elif r.text != r.text.strip():
                problems.append((r.passage_id, "its slice begins or ends with whitespace"))
            if r.passage_id != passage_id(r.run_id, r.json_path, r.start, r.end):
                problems.append((r.passage_id, "its id is not sha256(run_id:json_path:start:end)"))
            key = (r.run_id, r.json_path)
            if last[0] == key and last[1] > r.start:
                problems.append((r.passage_id, "it overlaps the passage before it"))
            last = (key, r.end)
        del part, texts
    return checked, problems


def index_problems(vault: CheckStores, db_path: str | Path) -> tuple[int, list[str]]:
    """(passages expected, problems): the indexes hold every latest passage's id once and no other."""
    expected = set(vault.passages.latest_ids())
    index = load(db_path)
    if index is None:
        return len(expected), ["the passages' index is missing or unreadable"] if expected else []
    held: list[str] = []
    for s in index.segments:
        held += [id_of(p) for p, gone in zip(s.ids, s.deleted) if not gone]
    problems = []
    if len(held) != len(set(held)):
        problems.append(f"{len(held) - len(set(held))} passages have more than one dense row")
    if set(held) != expected:
        missing, extra = len(expected - set(held)), len(set(held) - expected)
        problems.append(f"dense rows out of step: {missing} passages missing, {extra} rows of no latest passage")
    index.texts[0].reload()
    docs = index.texts[0].searcher().num_docs
    if docs != len(expected):
        problems.append(f"{docs} full-text documents for {len(expected)} passages")
    return len(expected), problems
