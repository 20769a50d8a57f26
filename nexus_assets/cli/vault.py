"""`nexus vault copy SRC DST`: parse, call the copy service (nexus_assets/services/vault_copy.py), say what arrived."""

from __future__ import annotations

import argparse
import sys

from nexus_assets.cli.common import UsageError, emit
from nexus_assets.cli.parsing import Commands
from nexus_assets.vault.transfer import CopyRefused


def cmd_copy(args: argparse.Namespace) -> int:
    from nexus_assets.services.vault_copy import copy_vault

    def progress(table: str, rows: int) -> None:
        if not args.json:
            print(f"  {table}: {rows} rows", file=sys.stderr, flush=True)

    try:
        report = copy_vault(args.basics.address(args.source), args.basics.address(args.destination), on_table=progress)
    except CopyRefused as exc:
        raise UsageError(str(exc)) from None
    text = (
        f"copied {sum(report.rows.values())} rows of {report.source} to {report.destination}; "
        f"{report.manifests_checked} manifests of {report.topics} topics re-hashed there: "
        + ("all match" if report.verified else "MISMATCH, the destination stays marked unusable")
    )
    emit(args, report.as_dict(), text + "".join(f"\n  {p}" for p in report.problems))
    return 0 if report.verified else 1


def register(commands: Commands) -> None:
    p = commands.sub.add_parser("vault", help="the vault itself: copy it between backends")
    vault_sub = p.add_subparsers(dest="vault_command", required=True, metavar="VAULT_COMMAND")
    p = commands.add(
        "copy", cmd_copy, sub=vault_sub,
        help="copy a vault into a new, empty one (DuckDB ↔ PostgreSQL), checking every manifest hash on arrival",
    )
    p.add_argument("source", metavar="SRC", help="the vault to copy: a path, duckdb:///path or postgresql://…")
    p.add_argument("destination", metavar="DST", help="a new, empty vault: a path, duckdb:///path or postgresql://…")
