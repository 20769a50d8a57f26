"""Forgetting's reach into Dagster's storage (docs/forgetting.md): the runs of the affected topics
and any other run whose event log quotes a forgotten piece, their pickled outputs and compute logs,
and the copies Dagster keeps of their events outside the runs."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path


def stored_forms(piece: str) -> list[bytes]:
    """A piece as its copies store it: as is, whitespace-collapsed (metadata previews), and as
    Dagster's JSON writes it (non-ASCII as \\u escapes, quotes and newlines escaped)."""
    forms = {piece, " ".join(piece.split())}
    return sorted({v.encode("utf-8") for f in forms for v in (f, json.dumps(f)[1:-1], json.dumps(f, ensure_ascii=False)[1:-1])})


def _runs_quoting(instance, needles: list[list[bytes]], skip: set[str]) -> set[str]:
    """Runs outside the affected topics whose event log still quotes a piece (an ingest run's
    error table, say): they go too."""
    import dagster as dg

    found: set[str] = set()
    if not needles:
        return found
    for run_id in instance.get_run_ids():
        if run_id in skip:
            continue
        for entry in instance.all_logs(run_id):
            data = dg.serialize_value(entry).encode("utf-8")
            if any(n in data for forms in needles for n in forms):
                found.add(run_id)
                break
    return found


def _forget_cached_events(instance, tombstone_id: str) -> int:
    """Dagster keeps copies of events outside their runs, which `delete_run` leaves behind: each asset
    key caches its latest materialization (metadata previews and all) and its partition status.
    Dagster has no public call that recomputes the first, so a key whose cached materialization came
    from a deleted run gets a newer one, runless, for the same partition, that names the tombstone and
    quotes nothing; the status cache is dropped (rebuilt on read). Check results of deleted runs stay
    (no public call deletes them): checks quote ids, paths and counts, never text (defs/checks.py)."""
    import dagster as dg

    replaced = 0
    records = instance.get_asset_records()
    for record in records:
        last = record.asset_entry.last_materialization_record
        # A runless event ("" run id) has no run to lose.
        if last is None or not last.run_id or instance.has_run(last.run_id):
            continue
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                asset_key=record.asset_entry.asset_key,
                partition=last.partition_key,
                description="nexus forget deleted the Dagster runs that materialized this; the vault holds what remains",
                metadata={"forgotten_by_tombstone": tombstone_id},
            )
        )
        replaced += 1
    instance.wipe_asset_cached_status([r.asset_entry.asset_key for r in records])
    return replaced


# Dagster's tags for a run over a range of partitions (a sync's one run over its topics).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def _runs_over_ranges(instance, topics: list[str]) -> set[str]:
    """The runs over a range of topic partitions that holds one of `topics` (a range is contiguous
    in the partitions' order)."""
    order = {key: n for n, key in enumerate(instance.get_dynamic_partitions("topics"))}
    wanted = {order[t] for t in topics if t in order}
    out = set()
    for run in instance.get_runs():
        start, end = run.tags.get(RANGE_START), run.tags.get(RANGE_END)
        if start in order and end in order and any(order[start] <= n <= order[end] for n in wanted):
            out.add(run.run_id)
    return out


def clean_dagster(home: Path, topics: list[str], pieces: list[str], tombstone_id: str) -> dict:
    """Delete the Dagster runs of the affected topics and any other run quoting the text (their event
    logs hold metadata previews and logs), their pickled outputs and compute logs, the copies Dagster
    keeps of their events outside the runs, then vacuum Dagster's SQLite files."""
    removed = {"dagster_runs": 0, "dagster_files": 0, "dagster_cached_records": 0}
    if not (home / "dagster.yaml").exists() and not (home / "history").exists():
        return removed
    from dagster import DagsterInstance, RunsFilter

    # Set for Dagster's DagsterInstance.get() and put back after: a write, not a read of our settings.
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with DagsterInstance.get() as instance:
            runs = {r.run_id for t in topics for r in instance.get_runs(filters=RunsFilter(tags={"dagster/partition": t}))}
            runs |= _runs_over_ranges(instance, topics)
            runs |= _runs_quoting(instance, [stored_forms(p) for p in pieces], skip=runs)
            for run_id in sorted(runs):
                instance.delete_run(run_id)
                for leftover in (home / "storage" / run_id, home / "logs" / run_id):
                    if leftover.exists():
                        shutil.rmtree(leftover, ignore_errors=True)
                        removed["dagster_files"] += 1
            removed["dagster_runs"] = len(runs)
            removed["dagster_cached_records"] = _forget_cached_events(instance, tombstone_id)
    finally:
        if previous is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = previous
    storage = home / "storage"
    if storage.is_dir():
        for asset_dir in storage.iterdir():
            for t in topics:
                pickled = asset_dir / t
                if pickled.exists():
                    pickled.unlink() if pickled.is_file() else shutil.rmtree(pickled)
                    removed["dagster_files"] += 1
    for db in home.rglob("*.db"):
        try:
            con = sqlite3.connect(db)
            con.execute("VACUUM")
            con.close()
        except sqlite3.Error:
            pass
    return removed
