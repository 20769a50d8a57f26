"""`nexus export`: a topic's manifest, brick by brick with its sources, as JSON lines, Parquet or
Markdown (docs/cli.md). Read-only on the vault; the shell parses and prints, the rules of where the
file goes and how it is written are here."""

from __future__ import annotations

import os
from pathlib import Path

from nexus_assets.export.step import (
    NoManifest,
    manifest_rows,
    to_jsonl,
    to_markdown,
    write_parquet,
)
from nexus_assets.vault.address import is_postgres


class ExportRefused(ValueError):
    """Nothing to export yet (no manifest), or an --out that is not a file path: exit 2."""


def default_parquet_out(db: str, topic_id: str) -> str:
    # Beside the vault, not wherever the command happens to run.
    beside = Path.cwd() if is_postgres(db) else Path(db).resolve().parent
    return str(beside / "exports" / f"{topic_id}.parquet")


def manifest_of(vault, topic_id: str) -> tuple[dict, list[dict]]:
    """The published manifest's header and its bricks with their sources, in manifest order."""
    try:
        return manifest_rows(vault, topic_id)
    except NoManifest:
        raise ExportRefused(f"topic {topic_id!r} has no manifest yet; run `nexus sync --topic {topic_id}`") from None


def write(fmt: str, header: dict, rows: list[dict], out: Path | None) -> str | None:
    """The export written to `out` (renamed into place, never half-written); with no `out`, its text
    for the shell to print."""
    if out is not None and out.is_dir():
        raise ExportRefused(f"--out {out} is a directory; give a file path")
    if out is not None and out.exists() and not out.is_file():
        # The export is renamed into place, which would replace a device or a pipe with a file.
        raise ExportRefused(f"--out {out} is not a regular file; give a file path (or leave --out out for stdout)")
    if fmt == "parquet":
        write_parquet(rows, out)
        return None
    text = to_jsonl(rows) if fmt == "jsonl" else to_markdown(header, rows)
    if out is None:
        return text
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, out)
    return None
