"""Ingestion: run files on disk into the vault, once per distinct file content."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from nexus_assets.core.collector import collector_paused
from nexus_assets.core.fingerprint import sha256_hex
from nexus_assets.core.models import IngestionError, Run
from nexus_assets.ingest.formats.registry import one_file_formats
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

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from nexus_assets.drift.records import DriftRecords
    from nexus_assets.forget.records import ForgettingRecords
    from nexus_assets.ingest.records import RunRecords


class IngestStores(Protocol):
    """The stores ingestion uses: run files, runs, nodes and errors out; what was forgotten (never
    read again) and each source's status (a file that moved) in."""

    runs: RunRecords
    drift: DriftRecords
    forgetting: ForgettingRecords

    def transaction(self) -> AbstractContextManager[None]: ...

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
    vault: IngestStores,
    runs_dir: Path,
    *,
    limits: Limits | None = None,
    open_after: str | None = None,
    progress: Callable[[str], None] | None = None,
    only: list[Path] | None = None,
) -> IngestReport:
    """Ingest every run file whose content the vault has not seen (`only`: just these files under
    `runs_dir`, as a push compiled by the server reads the one file it wrote; no folder scan).

    A file whose size, times and inode are as they were when it was last read is skipped without
    being read or hashed; only a file whose stat moved is hashed, and only new bytes are parsed.
    Small files are committed together, up to BATCH runs a transaction; a file's runs and its
    `run_files` row always commit together, so an interrupted sync re-reads exactly what was lost.
    """
    return _Ingestion(vault, limits or Limits(), open_after, progress).run(runs_dir, only)


class _Ingestion:
    """One ingestion pass: each file is unchanged (skipped), a copy of a file in this batch, bytes
    read before (a restore or a verdict to copy, no parse), or new bytes (parsed once). Writes are
    gathered and flushed in batches."""

    def __init__(self, vault: IngestStores, limits: Limits, open_after: str | None, progress: Callable[[str], None] | None):
        self.vault, self.limits, self.open_after, self.progress = vault, limits, open_after, progress
        self.report = IngestReport()
        self.batch: list[tuple[Run, str, str]] = []
        self.finished_files: list[tuple[str, str, int, list[IngestionError]]] = []
        # The first of finished_files with each content hash: a batch may hold hundreds of files.
        self.first_finished: dict[str, tuple[str, str, int, list[IngestionError]]] = {}
        self.finished_errors: list[IngestionError] = []
        self.read_stats: list[tuple[str, tuple[int, int, int, int], str]] = []
        self.known_stats = vault.runs.file_stats()
        self.forgotten_runs = vault.forgetting.forgotten_runs()
        self.forgotten_files = vault.forgetting.forgotten_files()
        self.seen = vault.runs.files_seen()
        self.claimed: dict[str, tuple[str, str]] = {}
        # What a file whose bytes were read before needs (a restore? a copied verdict?), read once and
        # again only after a write that can change it: one query per sync, not two per file.
        self.known: tuple[dict[str, frozenset[str]], dict[str, tuple[frozenset[str], bool]]] | None = None
        self.error_cap = limits.max_errors_per_file

    def run(self, runs_dir: Path, only: list[Path] | None = None) -> IngestReport:
        report = self.report
        if only is None:
            scan = scan_runs_dir(runs_dir)
            files = scan.files
            report.side_files = [escaped(str(p)) for p in scan.side_files]
            if scan.skipped:
                self._skipped(scan.skipped)
        else:
            files = list(only)
        report.files_scanned = len(files)
        step = max(1, len(files) // 10)
        for n, path in enumerate(files, 1):
            source = str(path.resolve())
            stat = file_stat(path)
            if stat is not None and self.known_stats.get(source) == stat:
                report.files_unchanged += 1
                continue
            shown = display_name(path)
            data, sha, gone = _snapshot(path, self.limits)
            if gone is not None:
                report.errors.append(gone)
                with self.vault.transaction():
                    self.vault.runs.record_errors([gone])
                continue
            tombstone = self.forgotten_files.get(sha)
            if tombstone is not None:
                # Not recorded as read: every sync that meets it again says so.
                report.forgotten.append(f"skipped {shown}: it was forgotten (tombstone {tombstone}); delete it or leave it, it is never read")
                continue
            if sha in self.first_finished:
                self._copy_in_batch(sha, shown, source, stat)
                continue
            if sha in self.seen:
                self._read_before(sha, shown, source, stat)
                continue
            report.files_new += 1
            if self.progress and (n % step == 0 or len(data or b"") > 16 * 1024 * 1024):
                self.progress(f"ingesting {shown} ({n}/{len(files)})")
            self._read_new(path, shown, source, stat, sha, data)
            if len(self.batch) >= BATCH or len(self.finished_files) >= BATCH or len(self.read_stats) >= BATCH:
                self._flush()
        # read_stats too: a file whose bytes were read before (moved, restored) is not hashed again.
        if self.batch or self.finished_files or self.finished_errors or self.read_stats:
            self._flush()
        for old, new, run_ids in follow_moved_files(self.vault, runs_dir) if only is None else ():
            listed = ", ".join(run_ids[:5]) + (", …" if len(run_ids) > 5 else "")
            report.moved.append(f"{display_name(Path(old))} moved to {display_name(Path(new))}: its {len(run_ids)} run(s) ({listed}) are read from there now")
            if self.progress:
                self.progress(report.moved[-1])
        if self.progress and report.side_files_note:
            self.progress(report.side_files_note)
        return report

    def _skipped(self, skipped_paths) -> None:
        # Named at every sync (they are never read), recorded once in `nexus errors`.
        skipped = [IngestionError(display_name(path), problem) for path, problem in skipped_paths]
        self.report.errors.extend(skipped)
        with self.vault.transaction():
            self.vault.runs.record_errors_once(skipped)
        if self.progress:
            for e in skipped:
                self.progress(f"skipped {e.file}: {e.problem}")

    def _copy_in_batch(self, sha: str, shown: str, source: str, stat) -> None:
        """Identical bytes under another name in this batch: the same verdict, but this file is named too."""
        first = self.first_finished[sha]
        copies = [IngestionError(shown, e.problem, e.conversation, sha) for e in first[3]]
        self.finished_files.append((sha, shown, first[2], copies))
        self.report.errors.extend(copies)
        if stat is not None:
            self.read_stats.append((source, stat, sha))

    def _read_before(self, sha: str, shown: str, source: str, stat) -> None:
        """Bytes read before. Most often only the stat moved (touched, copied back, checked out
        again): the runs from this path already come from these bytes and their verdict already
        names it, so nothing is written (a restore and a verdict query per file took 24 s for 10,000)."""
        if self.known is None:
            self.known = self.vault.runs.latest_sources(), self.vault.runs.file_verdicts()
        latest_sources, verdicts = self.known
        if not latest_sources.get(source, frozenset()) <= {sha}:
            with self.vault.transaction():
                restored = self.vault.drift.restore_versions(sha, source)
            if restored:
                self.known = None
                if self.progress:
                    self.progress(f"{shown} is back to content read before; its earlier version is current again for {len(restored)} run(s)")
        names, broken = verdicts.get(sha, (frozenset(), True))
        if broken and shown not in names:
            copies = self.vault.runs.copy_file_verdict(sha, shown)
            if copies:
                self.known = None
            self.report.errors.extend(copies)
        if stat is not None:
            self.read_stats.append((source, stat, sha))

    def _read_new(self, path: Path, shown: str, source: str, stat, sha: str, data: bytes | None) -> None:
        """New bytes: parsed once, their runs batched; problems capped per file."""
        report = self.report
        runs_in_file = 0
        errors: list[IngestionError] = []
        dropped = 0
        retry = False
        for item in iter_run_file(path, shown, sha=sha, limits=self.limits, open_after=self.open_after, data=data):
            if isinstance(item, IngestionError):
                retry = retry or isinstance(item, RetryableError)
                if len(errors) < self.error_cap:
                    errors.append(item)
                else:
                    dropped += 1
                continue
            if item.run_id in self.forgotten_runs:
                report.forgotten.append(f"skipped run {item.run_id} in {shown}: it was forgotten (tombstone {self.forgotten_runs[item.run_id]})")
                continue
            runs_in_file += 1
            self.batch.append((item, source, sha))
            if len(self.batch) >= BATCH:
                # A large export is committed in parts; its file row comes with the last part.
                self._flush()
        if dropped:
            errors.append(
                IngestionError(
                    shown,
                    f"{dropped} more problems in this file were not recorded (NEXUS_MAX_ERRORS_PER_FILE={self.error_cap}); "
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
            self.finished_errors.extend(errors)
        else:
            self.finished_files.append((sha, shown, runs_in_file, errors))
            self.first_finished.setdefault(sha, self.finished_files[-1])
            if stat is not None:
                self.read_stats.append((source, stat, sha))

    def _flush(self) -> None:
        if self.batch or self.finished_files:
            self.known = None
        duplicates = _refuse_duplicate_run_ids(self.vault, self.batch, self.claimed)
        self.report.errors.extend(duplicates)
        runs = self.vault.runs
        with self.vault.transaction():
            fresh, changed = runs.store_runs(self.batch)
            runs.record_errors([e for *_, errors in self.finished_files for e in errors] + self.finished_errors + duplicates)
            runs.record_files([(sha, shown, n, len(errors)) for sha, shown, n, errors in self.finished_files])
            runs.record_file_stats(self.read_stats)
        self.report.runs_new += len(fresh)
        self.report.versions_new += len(changed)
        self.report.changed_runs.extend(r.run_id for r in changed)
        self.seen.update(sha for sha, *_ in self.finished_files)
        self.batch.clear()
        self.finished_files.clear()
        self.first_finished.clear()
        self.finished_errors.clear()
        self.read_stats.clear()


def follow_moved_files(vault: IngestStores, runs_dir: Path | None = None) -> list[tuple[str, str, list[str]]]:
    """Runs whose file no longer holds the bytes their latest version was read from, while another
    path read before does (a rename or move, or a copy whose original was removed or changed): they
    are read from that path now, so drift and verify look where the bytes are. Identical bytes make
    no new run version, so nothing else would move them. Only files whose bytes were read under two
    paths are looked at: the cost follows copies, not runs or bricks. Returns (old, new, run ids).

    A run read from outside `runs_dir` (the folder this sync reads) moves to a copy inside it even
    while the original still holds its bytes: a copied vault folder reads its own files, not the
    folder it was copied from."""
    root = str(runs_dir.resolve()) + os.sep if runs_dir is not None else None

    def inside(path: str) -> bool:
        return root is None or path.startswith(root)

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
        kept = holds(source, sha)
        if kept and inside(source):
            continue
        # A copy in this sync's folder first; one elsewhere only when the source lost its bytes.
        candidates = [p for p in others if inside(p)] + ([] if kept else [p for p in others if not inside(p)])
        new = next((p for p in candidates if holds(p, sha)), None)
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


# Formats whose run lives in exactly one file (a session file is one session): a second file
# claiming the run is a copy or a clash, never a newer version.
_ONE_FILE_FORMATS = one_file_formats()


def _refuse_duplicate_run_ids(vault: IngestStores, batch: list[tuple[Run, str, str]], claimed: dict[str, tuple[str, str]]) -> list[IngestionError]:
    """Two Nexus run files or session files (not two versions of one file) declaring one run_id with different
    content: an error naming both. The file the vault already holds keeps the run (taking it
    over would leave its bricks stale and fail every later sync); two new files in one sync are
    settled by path. Exports are left out: a newer export rightly supersedes an older one."""
    nexus = [item for item in batch if item[0].format in _ONE_FILE_FORMATS]
    if not nexus:
        return []
    stored = vault.runs.run_sources({run.run_id for run, _, _ in nexus})
    errors: list[IngestionError] = []
    keep: list[tuple[Run, str, str]] = []
    for item in batch:
        run, source, sha = item
        if run.format not in _ONE_FILE_FORMATS:
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
