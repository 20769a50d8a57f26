"""Ingestion: run files on disk into the vault, once per distinct file content."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from nexus_assets.core.collector import collector_paused
from nexus_assets.core.fingerprint import sha256_hex
from nexus_assets.core.models import IngestionError, Run
from nexus_assets.ingest.formats.limits import max_errors_per_file
from nexus_assets.ingest.runfiles import (
    Limits,
    RetryableError,
    escaped,
    file_sha256,
    file_stat,
    iter_run_file,
    scan_runs_dir,
    source_problem,
)
from nexus_assets.vault.store import Vault

BATCH = 500


@dataclass
class IngestReport:
    files_scanned: int = 0
    files_unchanged: int = 0
    files_new: int = 0
    runs_new: int = 0
    versions_new: int = 0
    errors: list[IngestionError] = field(default_factory=list)
    changed_runs: list[str] = field(default_factory=list)
    side_files: list[str] = field(default_factory=list)
    # One line per forgotten source met again (invariant 15): it is skipped, never brought back.
    forgotten: list[str] = field(default_factory=list)
    # One line per run file found under another path (renamed or moved, same bytes).
    moved: list[str] = field(default_factory=list)

    @property
    def side_files_note(self) -> str | None:
        """The one info line about skipped export side files (user.json, chat.html, ...)."""
        if not self.side_files:
            return None
        names = sorted({Path(f).name for f in self.side_files})
        return f"skipped {len(self.side_files)} export side file(s) with no conversations: {', '.join(names)}"


def display_name(path: Path) -> str:
    """The path as a person typed it: relative to the working directory when it is below it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return escaped(str(path.resolve()))
    return escaped(str(path.resolve()) if relative.startswith("..") else relative)


@collector_paused
def ingest_runs(
    vault: Vault,
    runs_dir: Path,
    *,
    limits: Limits | None = None,
    open_after: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> IngestReport:
    """Ingest every run file whose content the vault has not seen.

    A file whose size, times and inode are as they were when it was last read is skipped without
    being read or hashed; only a file whose stat moved is hashed, and only new bytes are parsed.
    Small files are committed together, up to BATCH runs a transaction; a file's runs and its
    `run_files` row always commit together, so an interrupted sync re-reads exactly what was lost.
    """
    report = IngestReport()
    scan = scan_runs_dir(runs_dir)
    files = scan.files
    report.side_files = [escaped(str(p)) for p in scan.side_files]
    report.files_scanned = len(files)
    if scan.skipped:
        # Named at every sync (they are never read), recorded once in `nexus errors`.
        skipped = [IngestionError(display_name(path), problem) for path, problem in scan.skipped]
        report.errors.extend(skipped)
        with vault.transaction():
            vault.runs.record_errors_once(skipped)
        if progress:
            for e in skipped:
                progress(f"skipped {e.file}: {e.problem}")
    batch: list[tuple[Run, str, str]] = []
    finished_files: list[tuple[str, str, int, list[IngestionError]]] = []
    # The first of finished_files with each content hash: a batch may hold hundreds of files.
    first_finished: dict[str, tuple[str, str, int, list[IngestionError]]] = {}
    finished_errors: list[IngestionError] = []
    read_stats: list[tuple[str, tuple[int, int, int, int], str]] = []
    known_stats = vault.runs.file_stats()
    forgotten_runs = vault.forgetting.forgotten_runs()
    forgotten_files = vault.forgetting.forgotten_files()
    seen = vault.runs.files_seen()

    claimed: dict[str, tuple[str, str]] = {}
    # What a file whose bytes were read before needs (a restore? a copied verdict?), read once and
    # again only after a write that can change it: one query per sync, not two per file.
    known: tuple[dict[str, frozenset[str]], dict[str, tuple[frozenset[str], bool]]] | None = None

    def flush() -> None:
        nonlocal known
        if batch or finished_files:
            known = None
        duplicates = _refuse_duplicate_run_ids(vault, batch, claimed)
        report.errors.extend(duplicates)
        with vault.transaction():
            fresh, changed = vault.runs.store_runs(batch)
            vault.runs.record_errors([e for *_, errors in finished_files for e in errors] + finished_errors + duplicates)
            vault.runs.record_files([(sha, shown, n, len(errors)) for sha, shown, n, errors in finished_files])
            vault.runs.record_file_stats(read_stats)
        report.runs_new += len(fresh)
        report.versions_new += len(changed)
        report.changed_runs.extend(r.run_id for r in changed)
        seen.update(sha for sha, *_ in finished_files)
        batch.clear()
        finished_files.clear()
        first_finished.clear()
        finished_errors.clear()
        read_stats.clear()

    limits = limits or Limits()
    error_cap = max_errors_per_file()
    step = max(1, len(files) // 10)
    for n, path in enumerate(files, 1):
        source = str(path.resolve())
        stat = file_stat(path)
        if stat is not None and known_stats.get(source) == stat:
            report.files_unchanged += 1
            continue
        shown = display_name(path)
        data, sha, gone = _snapshot(path, limits)
        if gone is not None:
            report.errors.append(gone)
            with vault.transaction():
                vault.runs.record_errors([gone])
            continue
        tombstone = forgotten_files.get(sha)
        if tombstone is not None:
            # Not recorded as read: every sync that meets it again says so.
            report.forgotten.append(f"skipped {shown}: it was forgotten (tombstone {tombstone}); delete it or leave it, it is never read")
            continue
        first = first_finished.get(sha)
        if first is not None:
            # Identical bytes under another name: the same verdict, but this file is named too.
            copies = [IngestionError(shown, e.problem, e.conversation, sha) for e in first[3]]
            finished_files.append((sha, shown, first[2], copies))
            report.errors.extend(copies)
            if stat is not None:
                read_stats.append((source, stat, sha))
            continue
        if sha in seen:
            # Most often only the stat moved (touched, copied back, checked out again): the runs
            # from this path already come from these bytes and their verdict already names it, so
            # nothing is written (a restore and a verdict query per file took 24 s for 10,000).
            if known is None:
                known = vault.runs.latest_sources(), vault.runs.file_verdicts()
            latest_sources, verdicts = known
            if not latest_sources.get(source, frozenset()) <= {sha}:
                with vault.transaction():
                    restored = vault.drift.restore_versions(sha, source)
                if restored:
                    known = None
                    if progress:
                        progress(f"{shown} is back to content read before; its earlier version is current again for {len(restored)} run(s)")
            names, broken = verdicts.get(sha, (frozenset(), True))
            if broken and shown not in names:
                copies = vault.runs.copy_file_verdict(sha, shown)
                if copies:
                    known = None
                report.errors.extend(copies)
            if stat is not None:
                read_stats.append((source, stat, sha))
            continue
        report.files_new += 1
        if progress and (n % step == 0 or len(data or b"") > 16 * 1024 * 1024):
            progress(f"ingesting {shown} ({n}/{len(files)})")
        runs_in_file = 0
        errors: list[IngestionError] = []
        dropped = 0
        retry = False
        for item in iter_run_file(path, shown, sha=sha, limits=limits, open_after=open_after, data=data):
            if isinstance(item, IngestionError):
                retry = retry or isinstance(item, RetryableError)
                if len(errors) < error_cap:
                    errors.append(item)
                else:
                    dropped += 1
                continue
            if item.run_id in forgotten_runs:
                report.forgotten.append(f"skipped run {item.run_id} in {shown}: it was forgotten (tombstone {forgotten_runs[item.run_id]})")
                continue
            runs_in_file += 1
            batch.append((item, source, sha))
            if len(batch) >= BATCH:
                # A large export is committed in parts; its file row comes with the last part.
                flush()
        if dropped:
            errors.append(
                IngestionError(
                    shown,
                    f"{dropped} more problems in this file were not recorded (NEXUS_MAX_ERRORS_PER_FILE={error_cap}); "
                    "fix the ones above and sync again",
                    file_sha256=sha,
                )
            )
        if data is None and not retry:
            # Streamed: make sure the file did not change between hashing and reading.
            try:
                if file_sha256(path) != sha:
                    retry = True
                    errors.append(
                        RetryableError(shown, "changed while the sync was reading it; it will be read again at the next sync", file_sha256=sha)
                    )
            except OSError:
                retry = True
                errors.append(RetryableError(shown, "vanished while the sync was reading it", file_sha256=sha))
        report.errors.extend(errors)
        if retry:
            # Not marked as read: the next sync reads it again.
            finished_errors.extend(errors)
        else:
            finished_files.append((sha, shown, runs_in_file, errors))
            first_finished.setdefault(sha, finished_files[-1])
            if stat is not None:
                read_stats.append((source, stat, sha))
        if len(batch) >= BATCH or len(finished_files) >= BATCH or len(read_stats) >= BATCH:
            flush()
    # read_stats too: a file whose bytes were read before (moved, restored) is not hashed again.
    if batch or finished_files or finished_errors or read_stats:
        flush()
    for old, new, run_ids in follow_moved_files(vault):
        listed = ", ".join(run_ids[:5]) + (", …" if len(run_ids) > 5 else "")
        report.moved.append(f"{display_name(Path(old))} moved to {display_name(Path(new))}: its {len(run_ids)} run(s) ({listed}) are read from there now")
        if progress:
            progress(report.moved[-1])
    if progress and report.side_files_note:
        progress(report.side_files_note)
    return report


def follow_moved_files(vault: Vault) -> list[tuple[str, str, list[str]]]:
    """Runs whose file no longer holds the bytes their latest version was read from, while another
    path read before does (a rename or move, or a copy whose original was removed or changed): they
    are read from that path now, so drift and verify look where the bytes are. Identical bytes make
    no new run version, so nothing else would move them. Only files whose bytes were read under two
    paths are looked at: the cost follows copies, not runs or bricks. Returns (old, new, run ids)."""
    copies = vault.drift.run_file_copies()
    if not copies:
        return []
    records = vault.drift.file_records({p for source, _, others in copies for p in [source, *others]})

    def holds(path: str, sha: str) -> bool:
        # As last read and not touched since: the bytes are still there.
        record = records.get(path)
        return record is not None and record[1] == sha and file_stat(Path(path)) == record[0]

    moves = []
    for source, sha, others in copies:
        if holds(source, sha):
            continue
        new = next((p for p in others if holds(p, sha)), None)
        if new is not None:
            moves.append((source, sha, new))
    if not moves:
        return []
    moved = []
    with vault.transaction():
        for source, sha, new in moves:
            run_ids = vault.drift.move_run_sources(source, sha, new)
            if run_ids:
                moved.append((source, new, run_ids))
    return moved


def _refuse_duplicate_run_ids(vault: Vault, batch: list[tuple[Run, str, str]], claimed: dict[str, tuple[str, str]]) -> list[IngestionError]:
    """Two Nexus run files (not two versions of one file) declaring one run_id with different
    content: an error naming both. The file the vault already holds keeps the run (taking it
    over would leave its bricks stale and fail every later sync); two new files in one sync are
    settled by path. Exports are left out: a newer export rightly supersedes an older one."""
    nexus = [item for item in batch if item[0].format == "nexus"]
    if not nexus:
        return []
    stored = vault.runs.run_sources({run.run_id for run, _, _ in nexus})
    errors: list[IngestionError] = []
    keep: list[tuple[Run, str, str]] = []
    for item in batch:
        run, source, sha = item
        if run.format != "nexus":
            keep.append(item)
            continue
        other = claimed.get(run.run_id) or stored.get(run.run_id)
        rival = other[0] if other and other[0] != source and other[1] != run.version_id and source_problem(Path(other[0])) is None else None
        if rival is None:
            claimed[run.run_id] = (source, run.version_id)
            keep.append(item)
            continue
        names = sorted([display_name(Path(source)), display_name(Path(rival))])
        errors.append(
            IngestionError(
                display_name(Path(source)),
                f"run_id {run.run_id!r} is claimed by two files, {names[0]} and {names[1]}; "
                f"{display_name(Path(rival))} keeps it; give the other file its own run_id or remove it",
                conversation=run.run_id,
                file_sha256=sha,
            )
        )
    batch[:] = keep
    return errors


def _snapshot(path: Path, limits: Limits) -> tuple[bytes | None, str, IngestionError | None]:
    """(bytes, sha256 of those bytes, None), read once. Files too large to hold are hashed here
    and streamed later (bytes None); the hash is checked again after the read."""
    shown = display_name(path)
    try:
        size = path.stat().st_size
        if size <= max(limits.max_file_bytes, 64 * 1024 * 1024):
            data = path.read_bytes()
            return data, sha256_hex(data), None
        return None, file_sha256(path), None
    except FileNotFoundError:
        problem = "vanished between the scan and the read; it will be read if it comes back"
    except OSError as exc:
        problem = f"could not be read: {exc.strerror or exc}; it will be tried again at the next sync"
    return None, "", RetryableError(shown, problem)
