"""Forgetting a source, provably (invariant 15), and lineage in both directions.

`plan` is the forward lineage of a run or file: everything `forget` removes or changes.
`forget` deletes every row holding the source's text, re-resolves each affected topic and
records a tombstone manifest in its chain (a sealed topic's chain too: the one exception to FINAL
immutability), keeps the source out of later syncs, rewrites the vault file so freed blocks do
not keep the text, clears Dagster's copies (run records, event logs with metadata previews, the
latest materialization each asset key caches, check results, pickled outputs) and the search
index, and ends by searching every byte it cleaned for the text.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from nexus_assets.core.manifest import tombstone_manifest
from nexus_assets.core.models import Tombstone
from nexus_assets.core.sentences import sentences
from nexus_assets.dagster_home import project_dagster_home
from nexus_assets.usecases.compiler import resolve_phase
from nexus_assets.usecases.search import forget_index, index_dir
from nexus_assets.vault.connection import connect, now, writer_intent
from nexus_assets.vault.store import Vault

# Shorter texts (a greeting, "Yes.") are too common to prove anything by their absence.
MIN_PROOF_CHARS = 12


class ForgetError(ValueError):
    """Bad usage: an unknown run or file, nothing to forget."""


@dataclass
class Target:
    run_ids: list[str]
    file_shas: list[str]
    files: list[str] = field(default_factory=list)


def find_target(vault: Vault, *, run_id: str | None = None, file: str | None = None) -> Target:
    if run_id is not None:
        if not vault.runs_known([run_id]):
            if run_id in vault.forgotten_runs():
                raise ForgetError(f"run {run_id!r} was already forgotten (tombstone {vault.forgotten_runs()[run_id]})")
            raise ForgetError(f"no run {run_id!r} in the vault; `nexus lineage --run` lists nothing for it")
        files = vault.run_files_of([run_id])
        return Target([run_id], [], sorted({f["file"] for f in files}))
    assert file is not None
    runs, shas = vault.runs_of_file(file)
    if not runs and not shas:
        raise ForgetError(f"the vault holds nothing read from {file}; give the path a sync read it from (`nexus lineage --file`)")
    if Path(file).is_file():
        shas = sorted(set(shas) | {hashlib.sha256(Path(file).read_bytes()).hexdigest()})
    return Target(runs, shas, [str(Path(file).resolve())])


def plan(vault: Vault, target: Target) -> dict:
    lineage = vault.forward_lineage(target.run_ids)
    return {**lineage, "file_sha256s": target.file_shas, "target_files": target.files}


def _texts(vault: Vault, run_ids: list[str], leaving: list[str]) -> list[str]:
    """The forgotten runs' text, in pieces long enough to prove absence: every text node, line
    and sentence of it that no remaining run or remaining brick also holds."""
    rows = vault.conn.execute(
        "SELECT DISTINCT text FROM nodes WHERE run_id IN (SELECT unnest(?))", [sorted(run_ids)]
    ).fetchall()
    pieces = set()
    for (text,) in rows:
        for piece in [text, *text.splitlines(), *sentences(text)]:
            piece = piece.strip()
            if len(piece) >= MIN_PROOF_CHARS:
                pieces.add(piece)
    if not pieces:
        return []
    kept = vault.conn.execute(
        "SELECT DISTINCT text FROM nodes WHERE run_id NOT IN (SELECT unnest(?))", [sorted(run_ids)]
    ).fetchall()
    remaining = "\n".join(t for (t,) in kept)
    brick_text = "\n".join(
        t for (t,) in vault.conn.execute("SELECT content FROM bricks WHERE brick_id NOT IN (SELECT unnest(?))", [sorted(leaving)]).fetchall()
    )
    # Text another source still holds (a shared brick, a copied message) is not the forgotten run's alone.
    return sorted(p for p in pieces if p not in remaining and p not in brick_text)


def _resolve_after(vault: Vault, topic_id: str, tombstone: Tombstone) -> tuple[str, int]:
    topic = vault.topic(topic_id)
    sealed = topic is not None and topic.state in ("SEALING", "LOCKED")
    bricks = resolve_phase(vault, topic, sealed=sealed) if topic is not None else []
    # A FINAL brick keeps its record, but its text follows its (possibly new) canonical source.
    texts = {occ.address: occ.content for occ, _ in vault.occurrences(topic_id)}
    bricks = [
        b.model_copy(update={"content": texts.get(b.sources[0], b.content)}) if b.sources else b for b in bricks
    ]
    manifest = tombstone_manifest(topic_id, bricks, vault.latest_manifest(topic_id), tombstone)
    vault.publish(topic_id, bricks, manifest, dagster_run_id=None, sealed=sealed, forgetting=True)
    if sealed:
        vault.reseal_bricks(topic_id, bricks, manifest.manifest_hash)
    return manifest.manifest_hash, len(manifest.bricks)


def _compact(db_path: Path) -> None:
    """Rewrite the vault file: DuckDB keeps deleted rows in freed blocks until they are reused."""
    fresh = db_path.with_name(db_path.name + ".compact")
    for leftover in (fresh, Path(str(fresh) + ".wal")):
        leftover.unlink(missing_ok=True)
    with writer_intent(db_path):
        conn = connect(db_path)
        try:
            conn.execute("CHECKPOINT")
            name = conn.execute("SELECT current_database()").fetchone()[0]
            conn.execute(f"ATTACH '{str(fresh).replace(chr(39), chr(39) * 2)}' AS compacted")
            conn.execute(f'COPY FROM DATABASE "{name}" TO compacted')
            conn.execute("DETACH compacted")
        finally:
            conn.close()
        os.replace(fresh, db_path)
        Path(str(db_path) + ".wal").unlink(missing_ok=True)


def _needles(piece: str) -> list[bytes]:
    """A piece as its copies store it: as is, whitespace-collapsed (metadata previews), and as
    Dagster's JSON writes it (non-ASCII as \\u escapes, quotes and newlines escaped)."""
    forms = {piece, " ".join(piece.split())}
    return sorted({v.encode("utf-8") for f in forms for v in (f, json.dumps(f)[1:-1], json.dumps(f, ensure_ascii=False)[1:-1])})


def _runs_quoting(instance, needles: list[list[bytes]], skip: set[str]) -> set[str]:
    """Runs outside the affected topics whose event log still quotes a piece (an ingest run's
    error table, say): they go too."""
    from dagster._serdes import serialize_value

    found: set[str] = set()
    if not needles:
        return found
    for run_id in instance.get_run_ids():
        if run_id in skip:
            continue
        for entry in instance.all_logs(run_id):
            data = serialize_value(entry).encode("utf-8")
            if any(n in data for forms in needles for n in forms):
                found.add(run_id)
                break
    return found


def _forget_cached_events(instance) -> int:
    """Dagster keeps copies of events outside their runs, which `delete_run` leaves behind: each asset
    key caches its latest materialization (metadata previews and all) and status, and check results
    are rows of their own. Recompute the first from the events that remain, drop the status cache
    (rebuilt on read) and the check results of runs that no longer exist."""
    from dagster import AssetRecordsFilter
    from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable, AssetKeyTable
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
    from dagster._core.storage.sqlalchemy_compat import db_select
    from dagster._serdes import serialize_value

    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage):
        return 0

    def gone(run_id: str | None) -> bool:
        # A runless event ("" run id) has no run to lose.
        return bool(run_id) and not instance.has_run(run_id)

    changed = 0
    records = instance.get_asset_records()
    for record in records:
        entry = record.asset_entry
        last = entry.last_materialization_record
        if not gone(last.run_id if last else None) and not gone(entry.last_run_id):
            continue
        kept = instance.fetch_materializations(AssetRecordsFilter(asset_key=entry.asset_key), limit=1).records
        with storage.index_connection() as conn:
            conn.execute(
                AssetKeyTable.update()
                .where(AssetKeyTable.c.asset_key == entry.asset_key.to_string())
                .values(last_materialization=serialize_value(kept[0]) if kept else None, last_run_id=kept[0].run_id if kept else None)
            )
        changed += 1
    instance.wipe_asset_cached_status([r.asset_entry.asset_key for r in records])
    if storage.has_table(AssetCheckExecutionsTable.name):
        with storage.index_connection() as conn:
            run_ids = {r for (r,) in conn.execute(db_select([AssetCheckExecutionsTable.c.run_id]).distinct())}
            orphaned = sorted(r for r in run_ids if gone(r))
            if orphaned:
                changed += conn.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.run_id.in_(orphaned))).rowcount
    return changed


def _clean_dagster(home: Path, topics: list[str], pieces: list[str]) -> dict:
    """Delete the Dagster runs of the affected topics and any other run quoting the text (their event
    logs hold metadata previews and logs), their pickled outputs and compute logs, the copies Dagster
    keeps of their events outside the runs, then vacuum Dagster's SQLite files."""
    removed = {"dagster_runs": 0, "dagster_files": 0, "dagster_cached_records": 0}
    if not (home / "dagster.yaml").exists() and not (home / "history").exists():
        return removed
    from dagster import DagsterInstance, RunsFilter

    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with DagsterInstance.get() as instance:
            runs = {r.run_id for t in topics for r in instance.get_runs(filters=RunsFilter(tags={"dagster/partition": t}))}
            runs |= _runs_quoting(instance, [_needles(p) for p in pieces], skip=runs)
            for run_id in sorted(runs):
                instance.delete_run(run_id)
                for leftover in (home / "storage" / run_id, home / "logs" / run_id):
                    if leftover.exists():
                        shutil.rmtree(leftover, ignore_errors=True)
                        removed["dagster_files"] += 1
            removed["dagster_runs"] = len(runs)
            removed["dagster_cached_records"] = _forget_cached_events(instance)
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


def leftovers(paths: list[Path], pieces: list[str]) -> list[dict]:
    """Every file (below each path) whose bytes still contain a forgotten piece of text, in any of
    the forms its copies store it."""
    needles = [_needles(p) for p in pieces]
    found = []
    for root in paths:
        if not root.exists():
            continue
        for f in [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]:
            try:
                data = f.read_bytes()
            except OSError:
                continue
            hits = [pieces[i] for i, forms in enumerate(needles) if any(n in data for n in forms)]
            if hits:
                found.append({"file": str(f), "pieces": len(hits), "example": hits[0][:40]})
    return found


def forget(
    db_path: str | Path, target: Target, *, reason: str, actor: str, delete_file: bool = False
) -> dict:
    db = Path(db_path)
    at = now()
    with Vault.open(db) as vault:
        before = plan(vault, target)
        alone = [b["brick_id"] for b in before["bricks_alone"]]
        pieces = _texts(vault, target.run_ids, alone)
        fingerprints = [fp for (fp,) in vault.conn.execute(
            "SELECT DISTINCT fingerprint FROM bricks WHERE brick_id IN (SELECT unnest(?))", [alone]).fetchall()]
        # A fingerprint another brick (another topic) still has keeps its embedding.
        kept = {fp for (fp,) in vault.conn.execute(
            "SELECT DISTINCT fingerprint FROM bricks WHERE brick_id NOT IN (SELECT unnest(?))", [alone]).fetchall()}
        tombstone_id = hashlib.sha256(f"{sorted(target.run_ids)}{sorted(target.file_shas)}{at.isoformat()}".encode()).hexdigest()[:16]
        manifests = {}
        with vault.transaction():
            removed = vault.erase_runs(
                target.run_ids, target.file_shas, alone, [f for f in fingerprints if f not in kept], files=target.files
            )
            vault.record_tombstone(
                tombstone_id, run_ids=target.run_ids, file_shas=target.file_shas, brick_ids=alone,
                topic_ids=before["topics"], reason=reason, actor=actor, at=at,
            )
            for topic_id in before["topics"]:
                stone = Tombstone(
                    tombstone_id=tombstone_id,
                    run_ids=tuple(sorted(target.run_ids)),
                    file_sha256s=tuple(sorted(target.file_shas)),
                    brick_ids=tuple(b["brick_id"] for b in before["bricks_alone"] if b["topic_id"] == topic_id),
                    reason=reason,
                    actor=actor,
                    forgotten_at=at.isoformat(),
                )
                manifests[topic_id] = _resolve_after(vault, topic_id, stone)
    _compact(db)
    forget_index(db)
    for topic_id in before["topics"]:
        shutil.rmtree(db.parent / f"{db.stem}.vectors" / topic_id, ignore_errors=True)
    home = project_dagster_home(db)
    dagster = (
        _clean_dagster(home, before["topics"], pieces)
        if home is not None
        else {"dagster_runs": 0, "dagster_files": 0, "dagster_cached_records": 0}
    )
    deleted_files = []
    if delete_file:
        for f in target.files:
            if Path(f).is_file():
                Path(f).unlink()
                deleted_files.append(f)
    checked = [db, Path(str(db) + ".wal"), index_dir(db), db.parent / f"{db.stem}.vectors"] + ([home] if home else [])
    remaining = leftovers(checked, pieces)
    return {
        "tombstone_id": tombstone_id,
        "run_ids": target.run_ids,
        "file_sha256s": target.file_shas,
        "reason": reason,
        "actor": actor,
        "forgotten_at": at.isoformat(),
        "rows_removed": removed,
        "bricks_removed": alone,
        "bricks_kept_with_other_sources": [b["brick_id"] for b in before["bricks_shared"]],
        "tombstone_manifests": {t: {"manifest_hash": h, "bricks": n} for t, (h, n) in manifests.items()},
        "dagster": dagster,
        "files_deleted": deleted_files,
        "proof": {
            "pieces_checked": len(pieces),
            "places_checked": [str(p) for p in checked],
            "leftovers": remaining,
            "text_gone": not remaining,
        },
    }
