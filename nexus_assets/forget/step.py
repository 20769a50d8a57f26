"""Forgetting a source, provably (invariant 15), and lineage in both directions.

`plan` is the forward lineage of a run or file: everything `forget` removes or changes.
`forget` deletes every row holding the source's text, re-resolves each affected topic and
records a tombstone manifest in its chain (a sealed topic's chain too: the one exception to FINAL
immutability), keeps the source out of later syncs, rewrites the vault file so freed blocks do
not keep the text, clears Dagster's copies through its public API (run records, event logs with
metadata previews, the latest materialization each asset key caches, pickled outputs; check
results quote no text) and the search index, and ends by searching every byte it cleaned for the text.

Everything after the commit is resumable: before it, a journal beside the vault records what the
physical erasure needs (the pieces of text to look for among them); a re-run, or `nexus forget`
for anything, finishes an interrupted one first, and `nexus verify` reports it until then.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nexus_assets.vault.address import is_postgres, parse_address
from nexus_assets import settings
from nexus_assets.core.models import Tombstone
from nexus_assets.dagster_home import project_dagster_home
from nexus_assets.core.sentences import sentences
from nexus_assets.forget.dagster_copies import clean_dagster, stored_forms
from nexus_assets.publish.manifest import tombstone_manifest
from nexus_assets.resolve.step import ResolveStores, resolve_phase
from nexus_assets.search.step import forget_index, index_dir
from nexus_assets.vault.connection import connect, derived_path, now, writer_intent

if TYPE_CHECKING:
    from nexus_assets.forget.records import ForgettingRecords
    from nexus_assets.topics.records import TopicRecords


class ForgetStores(ResolveStores, Protocol):
    """The stores forgetting uses: lineage, erasure and tombstones, the topics to resolve again
    (with everything resolution uses) and the connection the proof reads texts through."""

    conn: Any
    topics: TopicRecords
    forgetting: ForgettingRecords

    def transaction(self) -> AbstractContextManager[None]: ...

# Shorter texts (a greeting, "Yes.") are too common to prove anything by their absence.
MIN_PROOF_CHARS = 12


class ForgetError(ValueError):
    """Bad usage: an unknown run or file, nothing to forget."""


@dataclass
class Target:
    run_ids: list[str]
    file_shas: list[str]
    files: list[str] = field(default_factory=list)


def find_target(vault: ForgetStores, *, run_id: str | None = None, file: str | None = None) -> Target:
    if run_id is not None:
        if not vault.forgetting.runs_known([run_id]):
            if run_id in vault.forgetting.forgotten_runs():
                raise ForgetError(f"run {run_id!r} was already forgotten (tombstone {vault.forgetting.forgotten_runs()[run_id]})")
            raise ForgetError(f"no run {run_id!r} in the vault; `nexus lineage --run` lists nothing for it")
        files = vault.forgetting.run_files_of([run_id])
        return Target([run_id], [], sorted({f["file"] for f in files}))
    assert file is not None
    runs, shas = vault.forgetting.runs_of_file(file)
    if not runs and not shas:
        raise ForgetError(f"the vault holds nothing read from {file}; give the path a sync read it from (`nexus lineage --file`)")
    try:
        if Path(file).is_file():
            shas = sorted(set(shas) | {hashlib.sha256(Path(file).read_bytes()).hexdigest()})
    except OSError:
        pass  # unreadable now (a folder without permission): what the vault recorded of it is enough
    return Target(runs, shas, [str(Path(file).resolve())])


def plan(vault: ForgetStores, target: Target) -> dict:
    lineage = vault.forgetting.forward_lineage(target.run_ids)
    return {**lineage, "file_sha256s": target.file_shas, "target_files": target.files}


def _texts(vault: ForgetStores, run_ids: list[str], leaving: list[str]) -> list[str]:
    """The forgotten runs' text, in pieces long enough to prove absence: every text node, line
    and sentence of it that no remaining run or remaining brick also holds."""
    pieces = set()
    for text in vault.forgetting.run_texts(run_ids):
        for piece in [text, *text.splitlines(), *sentences(text)]:
            piece = piece.strip()
            if len(piece) >= MIN_PROOF_CHARS:
                pieces.add(piece)
    if not pieces:
        return []
    remaining = "\n".join(vault.forgetting.run_texts(run_ids, outside=True))
    brick_text = "\n".join(vault.forgetting.brick_texts(sorted(leaving), outside=True))
    # Text another source still holds (a shared brick, a copied message) is not the forgotten run's alone.
    return sorted(p for p in pieces if p not in remaining and p not in brick_text)


def _resolve_after(vault: ForgetStores, topic_id: str, tombstone: Tombstone) -> tuple[str, int]:
    topic = vault.topics.topic(topic_id)
    sealed = topic is not None and topic.state in ("SEALING", "LOCKED")
    bricks = resolve_phase(vault, topic, sealed=sealed) if topic is not None else []
    # A FINAL brick keeps its record, but its text follows its (possibly new) canonical source.
    texts = {occ.address: occ.content for occ, _ in vault.occurrences.stream(topic_id)}
    bricks = [
        b.model_copy(update={"content": texts.get(b.sources[0], b.content)}) if b.sources else b for b in bricks
    ]
    manifest = tombstone_manifest(topic_id, bricks, vault.bricks.latest_manifest(topic_id), tombstone)
    vault.bricks.publish(topic_id, bricks, manifest, dagster_run_id=None, sealed=sealed, forgetting=True)
    if sealed:
        vault.forgetting.reseal_bricks(topic_id, bricks, manifest.manifest_hash)
    return manifest.manifest_hash, len(manifest.bricks)


def journal_path(db_path: str | Path, tombstone_id: str | None = None) -> Path:
    """The journal of one forget, named by its tombstone: one file per tombstone, so a forget
    never writes over another's unfinished erasure. Without a tombstone id: the single journal
    of earlier releases, still read (and finished) when found."""
    suffix = ".forgetting" + (f".{tombstone_id}" if tombstone_id else "")
    if is_postgres(db_path):
        return derived_path(db_path, suffix)  # no folder of its own: this machine's, kept private
    db = Path(db_path)
    return db.with_name(db.name + suffix)


def _write_journal(db: Path, journal: dict) -> None:
    """Durably, before the commit it describes, and never over another journal (a hard link
    refuses an existing name). It holds the forgotten text (to search for it), so it is readable
    by its owner only and is removed as soon as the erasure is proven."""
    path = journal_path(db, journal["tombstone_id"])
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(journal, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.link(partial, path)  # FileExistsError rather than a lost journal
    finally:
        partial.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _journal_files(db_path: str | Path) -> list[Path]:
    legacy = journal_path(db_path)
    return sorted(p for p in legacy.parent.glob(legacy.name + "*") if not p.name.endswith(".partial") and p.is_file())


def pending_erasures(vault: ForgetStores, db_path: str | Path) -> list[dict]:
    """Every erasure an interrupted `forget` committed but did not finish, oldest first. A journal
    whose tombstone the vault does not hold describes a forget that never committed: it is dropped."""
    committed = {t["tombstone_id"] for t in vault.forgetting.tombstones()}
    found = []
    for path in _journal_files(db_path):
        try:
            journal = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            journal = {}
        if not isinstance(journal, dict) or journal.get("tombstone_id") not in committed:
            if os.access(path.parent, os.W_OK):
                path.unlink(missing_ok=True)
            continue
        found.append({**journal, "journal_file": str(path)})
    return sorted(found, key=lambda j: (j.get("forgotten_at") or "", j["tombstone_id"]))


def pending_erasure(vault: ForgetStores, db_path: str | Path) -> dict | None:
    """The oldest unfinished erasure, or None (see `pending_erasures`)."""
    pending = pending_erasures(vault, db_path)
    return pending[0] if pending else None


def crash_point(name: str) -> None:
    # Tests stop a forget with a real SIGKILL at a named point, to prove a re-run finishes it.
    if settings.kill_forget_at() == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _compact(db_path: Path | str) -> None:
    """Rewrite the vault file: DuckDB keeps deleted rows in freed blocks until they are reused.
    On PostgreSQL, VACUUM FULL rewrites every table without its dead rows."""
    if is_postgres(db_path):
        from nexus_assets.catalog import Catalog

        with Catalog.open(db_path) as vault:
            for (table,) in vault.conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
            ).fetchall():
                vault.conn.execute(f'VACUUM FULL "{table}"')
        crash_point("compacted")
        return
    fresh = Path(db_path).with_name(Path(db_path).name + ".compact")  # db_path: the address, with its options
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
            crash_point("compacted")
        finally:
            conn.close()
        os.replace(fresh, db_path)
        Path(str(db_path) + ".wal").unlink(missing_ok=True)


def leftovers(paths: list[Path], pieces: list[str]) -> list[dict]:
    """Every file (below each path) whose bytes still contain a forgotten piece of text, in any of
    the forms its copies store it."""
    needles = [stored_forms(p) for p in pieces]
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


def postgres_leftovers(url: str, pieces: list[str]) -> list[dict]:
    """Every table and text column of a PostgreSQL vault that still holds a forgotten piece, in
    any of the forms its copies store it (asked of the database: its files are the server's)."""
    from nexus_assets.catalog import Catalog

    forms = sorted({f.decode("utf-8") for p in pieces for f in stored_forms(p)})
    found = []
    if not forms:
        return found
    with Catalog.open(url, read_only=True) as vault:
        columns = vault.conn.execute(
            """SELECT table_name, column_name FROM information_schema.columns
               WHERE table_schema = current_schema() AND data_type = 'text' ORDER BY 1, 2"""
        ).fetchall()
        for table, column in columns:
            hits = vault.conn.execute(
                f'SELECT count(*) FROM "{table}" t, unnest(?) f WHERE strpos(t."{column}", f) > 0', [forms]
            ).fetchone()[0]
            if hits:
                found.append({"file": f"{table}.{column}", "pieces": hits, "example": ""})
    return found


def erase(
    vault: ForgetStores, db_path: str | Path, target: Target, *, reason: str, actor: str, delete_file: bool = False
) -> tuple[dict, dict, dict]:
    """The logical half of a forget, on the vault the service opened for writing: the journal beside
    the vault first, then one transaction (rows, tombstone, tombstone manifests). Returns (journal,
    rows removed, each topic's tombstone manifest) for `finish_erasure`, run once the vault is closed."""
    db = db_path if is_postgres(db_path) else Path(db_path)
    at = now()
    before = plan(vault, target)
    alone = [b["brick_id"] for b in before["bricks_alone"]]
    pieces = _texts(vault, target.run_ids, alone)
    fingerprints = vault.forgetting.brick_fingerprints(alone)
    # A fingerprint another brick (another topic) still has keeps its embedding.
    kept = set(vault.forgetting.brick_fingerprints(alone, outside=True))
    tombstone_id = hashlib.sha256(f"{sorted(target.run_ids)}{sorted(target.file_shas)}{at.isoformat()}".encode()).hexdigest()[:16]
    journal = {
        "tombstone_id": tombstone_id, "run_ids": target.run_ids, "file_sha256s": target.file_shas, "files": target.files,
        "delete_file": delete_file, "topics": before["topics"], "reason": reason, "actor": actor,
        "forgotten_at": at.isoformat(), "bricks_removed": alone,
        "bricks_kept_with_other_sources": [b["brick_id"] for b in before["bricks_shared"]], "pieces": pieces,
    }
    _write_journal(db, journal)
    manifests = {}
    try:
        _erase(vault, target, journal, before, alone, [f for f in fingerprints if f not in kept], manifests)
    except BaseException:
        journal_path(db, tombstone_id).unlink(missing_ok=True)  # nothing was forgotten: the vault rolled back
        raise
    removed = journal.pop("rows_removed")
    return journal, removed, manifests


def tombstone_manifests(vault: ForgetStores, journal: dict) -> dict[str, tuple[str, int]]:
    """Each topic's newest manifest (hash, bricks), for the report of an erasure finished later."""
    return {t: (m.manifest_hash, len(m.bricks)) for t in journal["topics"] if (m := vault.bricks.latest_manifest(t))}


def _erase(vault: ForgetStores, target: Target, journal: dict, before: dict, alone: list[str], fingerprints: list[str], manifests: dict) -> None:
    """The logical half of a forget, one transaction: rows, tombstone, tombstone manifests."""
    tombstone_id, reason, actor, at = journal["tombstone_id"], journal["reason"], journal["actor"], journal["forgotten_at"]
    _forget_examples(vault, before["topics"], alone)
    with vault.transaction():
        journal["rows_removed"] = vault.forgetting.erase_runs(target.run_ids, target.file_shas, alone, fingerprints, files=target.files)
        vault.forgetting.record_tombstone(
            tombstone_id, run_ids=target.run_ids, file_shas=target.file_shas, brick_ids=alone,
            topic_ids=before["topics"], reason=reason, actor=actor, at=datetime.fromisoformat(at),
        )
        for topic_id in before["topics"]:
            stone = Tombstone(
                tombstone_id=tombstone_id,
                run_ids=tuple(sorted(target.run_ids)),
                file_sha256s=tuple(sorted(target.file_shas)),
                brick_ids=tuple(b["brick_id"] for b in before["bricks_alone"] if b["topic_id"] == topic_id),
                reason=reason,
                actor=actor,
                forgotten_at=at,
            )
            manifests[topic_id] = _resolve_after(vault, topic_id, stone)


def _forget_examples(vault: ForgetStores, topic_ids: list[str], alone: list[str]) -> None:
    """A forgotten brick's text that a person made an example (`nexus keep` / `nexus drop`) leaves
    the topic's file and its recorded definition too: no copy of the text stays (invariant 15)."""
    from nexus_assets.teaching.topic_file import TopicFileUnwritable, remove_examples
    from nexus_assets.topics.files import read_topic_file

    texts = vault.forgetting.brick_texts(alone)
    for topic_id in topic_ids:
        topic = vault.topics.topic(topic_id)
        source = vault.topics.topic_source_file(topic_id)
        if topic is None or topic.examples is None or not source or not Path(source).is_file():
            continue
        try:
            if remove_examples(Path(source), texts):
                now_defined = read_topic_file(Path(source)).topic
                if now_defined is not None:
                    vault.topics.record_topic(now_defined, source, actor="nexus forget")
        except TopicFileUnwritable:
            continue  # the proof that follows names the vault or file still holding the text


def finish_erasure(
    db_path: str | Path, journal: dict, *, manifests: dict, removed: dict | None = None, resumed: bool = False
) -> dict:
    """The physical half of a forget, after its commit, with the vault closed: compact the vault
    file, drop the indexes and Dagster's copies, delete the file if asked, and prove the text gone.
    Safe to run again after a kill at any point: each step redoes what it finds undone. `resumed`:
    an erasure an earlier forget committed but did not finish (`pending_erasures`)."""
    db = db_path if is_postgres(db_path) else Path(db_path)
    pieces, topics = journal["pieces"], journal["topics"]
    _compact(db_path)
    forget_index(db)
    for topic_id in topics:
        shutil.rmtree(derived_path(db, ".vectors") / topic_id, ignore_errors=True)
    home = project_dagster_home(db, settings.dagster_home())
    dagster = (
        clean_dagster(home, topics, pieces, journal["tombstone_id"])
        if home is not None
        else {"dagster_runs": 0, "dagster_files": 0, "dagster_cached_records": 0}
    )
    deleted_files = []
    if journal["delete_file"]:
        for f in journal["files"]:
            if Path(f).is_file():
                Path(f).unlink()
                deleted_files.append(f)
    if is_postgres(db):
        checked = [index_dir(db), derived_path(db, ".vectors")] + ([home] if home else [])
        remaining = leftovers(checked, pieces) + postgres_leftovers(db, pieces)
        checked = [f"every text column of {parse_address(db).shown}", *checked]
    else:
        compact_file = db.with_name(db.name + ".compact")
        checked = [db, Path(str(db) + ".wal"), compact_file, index_dir(db), derived_path(db, ".vectors")] + ([home] if home else [])
        remaining = leftovers(checked, pieces)
    if not remaining:
        # It held the text; until the proof passes, a re-run needs it.
        Path(journal.get("journal_file") or journal_path(db, journal["tombstone_id"])).unlink(missing_ok=True)
    return {
        "tombstone_id": journal["tombstone_id"],
        "run_ids": journal["run_ids"],
        "file_sha256s": journal["file_sha256s"],
        "reason": journal["reason"],
        "actor": journal["actor"],
        "forgotten_at": journal["forgotten_at"],
        "resumed": resumed,
        "rows_removed": removed or {},
        "bricks_removed": journal["bricks_removed"],
        "bricks_kept_with_other_sources": journal["bricks_kept_with_other_sources"],
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
