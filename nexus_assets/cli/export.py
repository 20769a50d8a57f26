"""`nexus export TOPIC --format jsonl|parquet|markdown [--out PATH]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from nexus_assets.vault.address import is_postgres
from nexus_assets.cli.common import UsageError, open_vault, require_topic
from nexus_assets.cli.parsing import Commands


def cmd_export(args: argparse.Namespace) -> int:
    from nexus_assets.export.step import NoManifest, manifest_rows, to_jsonl, to_markdown, write_parquet

    if args.format == "parquet" and not args.out:
        # Beside the vault, not wherever the command happens to run.
        beside = Path.cwd() if is_postgres(args.db) else Path(args.db).resolve().parent
        args.out = str(beside / "exports" / f"{args.topic}.parquet")
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        try:
            header, rows = manifest_rows(vault, args.topic)
        except NoManifest:
            raise UsageError(f"topic {args.topic!r} has no manifest yet; run `nexus sync --topic {args.topic}`") from None
    out = Path(args.out) if args.out else None
    if out is not None and out.is_dir():
        raise UsageError(f"--out {out} is a directory; give a file path")
    if out is not None and out.exists() and not out.is_file():
        # The export is renamed into place, which would replace a device or a pipe with a file.
        raise UsageError(f"--out {out} is not a regular file; give a file path (or leave --out out for stdout)")
    if args.format == "parquet":
        write_parquet(rows, out)
    else:
        text = to_jsonl(rows) if args.format == "jsonl" else to_markdown(header, rows)
        if out is None:
            sys.stdout.write(text)
            return 0
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, out)
    print(f"wrote {len(rows)} bricks of {args.topic} (manifest {header['manifest_hash'][:16]}) to {out}", file=sys.stderr)
    return 0


def register(commands: Commands) -> None:
    p = commands.add(
        "export", cmd_export, common=False,
        help="the manifest's bricks with their sources as JSON lines, Parquet or Markdown; read-only",
    )
    p.add_argument("topic")
    p.add_argument("--format", choices=["jsonl", "parquet", "markdown"], required=True)
    p.add_argument("--out", help="file to write (default: standard output; for parquet TOPIC.parquet)")
