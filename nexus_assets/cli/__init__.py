"""The `nexus` command (docs/cli.md). Exit codes: 0 done; 1 the work ran but a check failed; 2 bad usage or input.

Each command module declares its own subcommand (`register`, listed in order in `COMMANDS`) with a
direct reference to its handler; a module imports the phases its handler needs inside the handler,
so building the parser (and `nexus topics`) never pays for Dagster or the LLM client.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

# Pydantic looks for plugins by scanning every installed distribution's entry points the first time
# a model validates (~15 ms of a 0.4 s `nexus topics`); Nexus uses none. A setting for pydantic,
# not a read of Nexus's configuration (that is nexus_assets/settings.py).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from nexus_assets.cli import (
    api,
    conflicts,
    explain,
    export,
    forget,
    lifecycle,
    lineage,
    plan,
    read,
    recall,
    search,
    serve,
    sync,
    teach,
    topics,
    vault,
    verify,
)
from nexus_assets.cli import eval as eval_command  # not the builtin
from nexus_assets.cli.common import DEFAULT_DB, UsageError, resolve_dirs
from nexus_assets.cli.parsing import Commands
from nexus_assets.core.display import visible
from nexus_assets.ingest.formats.limits import node_limit
from nexus_assets.services.queries import BadQuery, NotFound
from nexus_assets.settings import Basics
from nexus_assets.vault.address import parse_address
from nexus_assets.vault.connection import (
    VaultBusy,
    VaultConfigError,
    VaultPathError,
    VaultUnusable,
    storage_problem,
)
from nexus_assets.vault.migrations import VaultTooNew

BROKEN_PIPE = 141  # what the shell reports for a command stopped by SIGPIPE (128 + 13), e.g. `cat | head`

# Every subcommand, in the order `nexus --help` lists them: each entry is the function of a command
# module that declares its parser(s) with a direct reference to the handler (docs/extending.md).
COMMANDS: tuple[Callable[[Commands], None], ...] = (
    sync.register,
    plan.register,
    read.register_calls,
    topics.register,
    read.register_bricks,  # and rejections
    conflicts.register,
    read.register_manifest,  # and trace
    explain.register,
    verify.register,
    read.register_errors,
    lifecycle.register_close,
    lifecycle.register,  # discover, activate, seal
    eval_command.register,
    recall.register,  # recall, ask, audit
    lineage.register,
    forget.register,
    teach.register,  # keep, drop
    search.register,
    export.register,
    api.register,  # api, mcp
    serve.register,
    vault.register,
)


def build_parser(basics: Basics | None = None) -> argparse.ArgumentParser:
    """The parser, its defaults from `basics` (default: the environment now)."""
    basics = Basics.from_env() if basics is None else basics
    parser = argparse.ArgumentParser(prog="nexus", description="Compile conversations into verbatim, traceable bricks.")
    parser.add_argument(
        "--db", default=basics.db, type=parse_address,
        help=f"the vault: a file (default {DEFAULT_DB}), duckdb:///path, or postgresql://user@host:port/db",
    )
    commands = Commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), basics)
    for register in COMMANDS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader went away (`nexus bricks T --json | head -1`): stop quietly, with stdout on
        # devnull so the interpreter's last flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        finally:
            os.close(devnull)
        return BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    basics = Basics.from_env()  # read afresh by every command: nothing is cached between them
    args = build_parser(basics).parse_args(argv)
    # The settings are handed down, never set for the process: the vault's options travel with its
    # address, the rest in `args.basics` (and `common.settings_of(args)`, made when a command needs it).
    args.db, args.basics = basics.address(args.db), basics
    command = args.handler
    try:
        resolve_dirs(args, basics)
        with node_limit(basics.node_limit):  # the extraction scope's node limit, for this command only
            code = command(args)
    except (UsageError, NotFound, BadQuery, VaultBusy, VaultConfigError, VaultPathError, VaultTooNew, VaultUnusable) as exc:
        print(f"nexus: {visible(str(exc))}", file=sys.stderr)  # it may quote a run's text or id
        return 2
    except Exception as exc:
        # The vault's storage failing midway (damaged, read-only, a full disk) is one line, not a traceback.
        problem = storage_problem(args.db, exc) if _about_storage(exc, args.db) else None
        if problem is None:
            raise
        print(f"nexus: {problem}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    return code


def _about_storage(exc: BaseException, db: str) -> bool:
    """Whether an error came from the vault's storage: DuckDB's I/O, or the OS about a file of the
    vault (the file, its log, its indexes beside it); not about a run file or an --out path."""
    import duckdb

    if isinstance(exc, (duckdb.IOException, duckdb.TransactionException, duckdb.FatalException)) or type(exc) is duckdb.Error:
        return True
    vault = Path(db)
    return isinstance(exc, OSError) and str(exc.filename or "").startswith(str(vault.parent / vault.stem))
