"""Ingestion: run files on disk into the vault, once per distinct file content."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from nexus_assets.core.models import IngestionError, Run
from nexus_assets.runfiles import Limits, file_sha256, iter_run_file, scan_run_files
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
    report = IngestReport()
    files = scan_run_files(runs_dir)
    report.files_scanned = len(files)
    for n, path in enumerate(files, 1):
        sha = file_sha256(path)
        if vault.file_seen(sha):
            continue
        report.files_new += 1
        if progress:
            progress(f"ingesting {display_name(path)} ({n}/{len(files)})")
        shown = display_name(path)
        source = str(path.resolve())
        runs_in_file = errors_in_file = 0
        with vault.transaction():
            batch: list[Run] = []
            errors: list[IngestionError] = []

            def flush() -> None:
                fresh, changed = vault.store_runs(batch, source_file=source, file_sha256=sha)
                report.runs_new += len(fresh)
                report.versions_new += len(changed)
                report.changed_runs.extend(r.run_id for r in changed)
                batch.clear()

            for item in iter_run_file(path, shown, sha=sha, limits=limits, open_after=open_after):
                if isinstance(item, IngestionError):
                    errors.append(item)
                    continue
                runs_in_file += 1
                batch.append(item)
                if len(batch) >= BATCH:
                    flush()
            flush()
            errors_in_file = len(errors)
            vault.record_errors(errors)
            vault.record_file(sha, shown, runs_in_file, errors_in_file)
        report.errors.extend(errors)
    return report
