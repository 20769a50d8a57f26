"""Ingestion: run files on disk into the vault, once per distinct file content."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from nexus_assets.core.models import IngestionError, Run
from nexus_assets.runfiles import Limits, file_sha256, iter_run_file, scan_run_files, scan_side_files
from nexus_assets.vault import Vault

BATCH = 500


@dataclass
class IngestReport:
    files_scanned: int = 0
    files_new: int = 0
    runs_new: int = 0
    versions_new: int = 0
    errors: list[IngestionError] = field(default_factory=list)
    changed_runs: list[str] = field(default_factory=list)
    side_files: list[str] = field(default_factory=list)

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
        return str(path.resolve())
    return str(path.resolve()) if relative.startswith("..") else relative


def ingest_runs(
    vault: Vault,
    runs_dir: Path,
    *,
    limits: Limits | None = None,
    open_after: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> IngestReport:
    """Ingest every run file whose content the vault has not seen.

    Small files are committed together, up to BATCH runs a transaction; a file's runs and its
    `run_files` row always commit together, so an interrupted sync re-reads exactly what was lost.
    """
    report = IngestReport()
    files = scan_run_files(runs_dir)
    report.side_files = [str(p) for p in scan_side_files(runs_dir)]
    report.files_scanned = len(files)
    batch: list[tuple[Run, str, str]] = []
    finished_files: list[tuple[str, str, int, list[IngestionError]]] = []

    def flush() -> None:
        with vault.transaction():
            fresh, changed = vault.store_runs(batch)
            vault.record_errors([e for *_, errors in finished_files for e in errors])
            vault.record_files([(sha, shown, n, len(errors)) for sha, shown, n, errors in finished_files])
        report.runs_new += len(fresh)
        report.versions_new += len(changed)
        report.changed_runs.extend(r.run_id for r in changed)
        batch.clear()
        finished_files.clear()

    step = max(1, len(files) // 10)
    for n, path in enumerate(files, 1):
        sha = file_sha256(path)
        if vault.file_seen(sha) or any(sha == f[0] for f in finished_files):
            continue
        report.files_new += 1
        shown = display_name(path)
        if progress and (n % step == 0 or path.stat().st_size > 16 * 1024 * 1024):
            progress(f"ingesting {shown} ({n}/{len(files)})")
        source = str(path.resolve())
        runs_in_file = 0
        errors: list[IngestionError] = []
        for item in iter_run_file(path, shown, sha=sha, limits=limits, open_after=open_after):
            if isinstance(item, IngestionError):
                errors.append(item)
                continue
            runs_in_file += 1
            batch.append((item, source, sha))
            if len(batch) >= BATCH:
                # A large export is committed in parts; its file row comes with the last part.
                flush()
        finished_files.append((sha, shown, runs_in_file, errors))
        report.errors.extend(errors)
        if len(batch) >= BATCH or len(finished_files) >= BATCH:
            flush()
    if batch or finished_files:
        flush()
    if progress and report.side_files_note:
        progress(report.side_files_note)
    return report
