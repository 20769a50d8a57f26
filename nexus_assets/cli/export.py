"""`nexus export TOPIC --format jsonl|parquet|markdown [--out PATH]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nexus_assets.cli.common import UsageError, open_vault, require_topic
from nexus_assets.cli.parsing import Commands


def cmd_export(args: argparse.Namespace) -> int:
    from nexus_assets.services import exporting

    try:
        if args.format == "parquet" and not args.out:
            args.out = exporting.default_parquet_out(args.db, args.topic)
        with open_vault(args) as vault:
            require_topic(vault, args.topic)
            header, rows = exporting.manifest_of(vault, args.topic)
        out = Path(args.out) if args.out else None
        text = exporting.write(args.format, header, rows, out)
    except exporting.ExportRefused as exc:
        raise UsageError(str(exc)) from None
    if text is not None:
        sys.stdout.write(text)
        return 0
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
