"""The `nexus` command (DESIGN §7). Exit codes: 0 done; 1 the work ran but a check failed; 2 bad usage or input.

The parser names each command's handler as `module:function` and imports it only when that
command runs, so `nexus topics` never pays for Dagster or the LLM client.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from pathlib import Path
from typing import Sequence

# Pydantic looks for plugins by scanning every installed distribution's entry points the first time
# a model validates (~15 ms of a 0.4 s `nexus topics`); Nexus uses none. A setting for pydantic,
# not a read of Nexus's configuration (that is nexus_assets/settings.py).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from nexus_assets.cli.common import DEFAULT_DB, UsageError, resolve_dirs
from nexus_assets.core import bounds
from nexus_assets.core.display import visible
from nexus_assets.ingest.formats.limits import node_limit
from nexus_assets.queries import BadQuery, NotFound
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

RUNS_HELP = "default: $NEXUS_RUNS_DIR, else the vault's recorded one, else data/runs"
TOPICS_HELP = "default: $NEXUS_TOPICS_DIR, else the vault's recorded one, else data/topics"
BROKEN_PIPE = 141  # what the shell reports for a command stopped by SIGPIPE (128 + 13), e.g. `cat | head`


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def bounded(low: int, high: int):
    """An argparse type: a whole number from `low` to `high` (core/bounds.py: the API's and the MCP tools' bounds too)."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return whole


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number of at least 0 (argparse exits 2 otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of at least 0, got {text}")
    return value


def _handler(p: argparse.ArgumentParser, target: str) -> None:
    p.set_defaults(handler=target)


def _who_and_when(p: argparse.ArgumentParser) -> None:
    p.add_argument("--speaker", help="only bricks said by this speaker (a name, or a role such as user)")
    p.add_argument("--since", help="only bricks said on or after this day (YYYY-MM-DD)")
    p.add_argument("--until", help="only bricks said on or before this day (YYYY-MM-DD)")

def build_parser(basics: Basics | None = None) -> argparse.ArgumentParser:
    """The parser, its defaults from `basics` (default: the environment now)."""
    basics = Basics.from_env() if basics is None else basics
    parser = argparse.ArgumentParser(prog="nexus", description="Compile conversations into verbatim, traceable bricks.")
    parser.add_argument(
        "--db", default=basics.db, type=parse_address,
        help=f"the vault: a file (default {DEFAULT_DB}), duckdb:///path, or postgresql://user@host:port/db",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--db", default=argparse.SUPPRESS, type=parse_address, help="vault file")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # None: filled by resolve_dirs (the environment, else the vault's recorded directory, else ./data).
    runs_default = None
    topics_default = None
    extractor_default = basics.extractor

    p = sub.add_parser("sync", parents=[common], help="compile topics through the Dagster asset graph")
    p.add_argument("--topic", action="append", help="a topic to sync (repeatable); default every ACTIVE topic")
    p.add_argument("--runs-dir", default=runs_default, help=RUNS_HELP)
    p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
    p.add_argument("--extractor", choices=["embedded", "openai"], default=extractor_default)
    p.add_argument("--replay-only", action="store_true", help="openai: fail on a cache miss instead of calling the model")
    p.add_argument(
        "--no-recall",
        action="store_true",
        default=basics.no_recall,
        help="build no embeddings or vector index this time (default $NEXUS_NO_RECALL); a later sync without it builds what is missing",
    )
    p.add_argument("--batch", action="store_true", help="openai: send through the Batch API (half price on OpenAI; resumes a recorded batch)")
    p.add_argument(
        "--max-cost",
        type=non_negative_float,
        default=None,
        metavar="USD",
        help="openai: stop sending before the estimated spend passes this (default $NEXUS_LLM_MAX_COST); a re-run resumes",
    )
    p.add_argument(
        "--parallel", type=positive_int, default=None, metavar="N",
        help="compile up to N topics at once on a PostgreSQL vault (a DuckDB vault has one writer: one topic at a time)"
    )
    p.add_argument(
        "--reselect", action="store_true",
        help="move the topics to this release's selector: bricks it no longer selects leave the manifest (history kept; FINAL bricks stay)",
    )
    p.add_argument(
        "--open-after",
        default=basics.open_after,
        help="export conversations updated at or after this ISO time are OPEN (default: all CLOSED)",
    )
    _handler(p, "sync:cmd_sync")
    p = sub.add_parser("plan", parents=[common], help="what a sync with the openai extractor would call and cost; sends nothing")
    p.add_argument("--topic", action="append", help="a topic to plan (repeatable); default every ACTIVE topic")
    p.add_argument("--runs-dir", default=runs_default, help=RUNS_HELP)
    p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
    p.add_argument("--token-budget", type=positive_int, default=None, help="source tokens per request (default $NEXUS_LLM_TOKEN_BUDGET, else what $NEXUS_LLM_CONTEXT_TOKENS and $NEXUS_LLM_MAX_OUTPUT_TOKENS allow)")
    p.add_argument("--explain-cache", action="store_true", help="per run and topic: cached or will call, and why")
    _handler(p, "plan:cmd_plan")
    p = sub.add_parser("calls", parents=[common], help="the audit trail of LLM calls")
    p.add_argument("--topic", help="only this topic's calls")
    _handler(p, "read:cmd_calls")

    _handler(sub.add_parser("topics", parents=[common], help="topics with state and brick counts"), "topics:cmd_topics")
    p = sub.add_parser("bricks", parents=[common], help="a topic's visible bricks in order")
    p.add_argument("topic")
    p.add_argument("--all", action="store_true", help="include superseded bricks")
    p.add_argument("--full", action="store_true", help="each brick's whole text, wrapped, with the conversation it came from")
    _handler(p, "read:cmd_bricks")
    p = sub.add_parser("rejections", parents=[common], help="rejected pointers with reason codes")
    p.add_argument("topic")
    _handler(p, "read:cmd_rejections")
    p = sub.add_parser("conflicts", parents=[common], help="related bricks that state different values, side by side with their sources")
    p.add_argument("topic")
    _handler(p, "conflicts:cmd_conflicts")
    p = sub.add_parser("manifest", parents=[common], help="the topic's manifest and its hash")
    p.add_argument("topic")
    _handler(p, "read:cmd_manifest")
    p = sub.add_parser("trace", parents=[common], help="where a brick was said: file, conversation, message, its text marked")
    p.add_argument("brick_id")
    p.add_argument("--full", action="store_true", help="every source (not the first 3), each message whole (not a window around the text)")
    _handler(p, "read:cmd_trace")
    p = sub.add_parser("explain", parents=[common], help="why the selector kept a brick, or why a run's or node's sentences were not kept")
    p.add_argument("brick_id", nargs="?")
    p.add_argument("--run", help="a run id: every sentence of it, kept or not, and why, per compiled topic")
    p.add_argument("--node", help="with --run: one text node (JSON path) only")
    p.add_argument("--topic", action="append", help="with --run: only this topic (repeatable)")
    _handler(p, "explain:cmd_explain")
    _handler(
        sub.add_parser("verify", parents=[common], help="re-check sources against run files, manifest chains and sealed (FINAL) bricks"),
        "verify:cmd_verify",
    )
    _handler(sub.add_parser("errors", parents=[common], help="ingestion errors"), "read:cmd_errors")
    p = sub.add_parser("close", parents=[common], help="close a run (one-way)")
    p.add_argument("run_id")
    _handler(p, "lifecycle:cmd_close")

    p = sub.add_parser("discover", parents=[common], help="propose topics from recent runs as DRAFT topic files")
    p.add_argument("--runs-dir", default=runs_default, help=RUNS_HELP)
    p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
    p.add_argument("--extractor", choices=["embedded", "openai"], default=extractor_default)
    p.add_argument("--recent", type=int, default=200, help="look at this many most recent runs (default 200)")
    p.add_argument("--max", type=int, default=None, help="write at most this many proposals")
    _handler(p, "lifecycle:cmd_discover")
    p = sub.add_parser("activate", parents=[common], help="the human gate: DRAFT → ACTIVE (rewrites the file's state line)")
    p.add_argument("topic")
    p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
    _handler(p, "lifecycle:cmd_activate")
    p = sub.add_parser("seal", parents=[common], help="ACTIVE → LOCKED: every brick FINAL and immutable, once the gates pass")
    p.add_argument("topic")
    p.add_argument("--runs-dir", default=runs_default, help=RUNS_HELP)
    p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
    _handler(p, "lifecycle:cmd_seal")

    p = sub.add_parser("eval", parents=[common], help="extraction quality against a gold file: exact and overlap P/R/F1; read-only")
    p.add_argument("topic")
    p.add_argument("--gold", help="gold spans, JSONL: {topic_id, run_id, json_path, start, end} or {…, quote} per line")
    p.add_argument("--init-gold", metavar="PATH", help="write the topic's current bricks as a starting gold file (never overwrites)")
    p.add_argument("--extractor", help="score this extractor identity from the extractions kept in the vault")
    p.add_argument("--extractors", action="store_true", help="score the bricks and every extractor identity seen for the topic")
    p.add_argument("--min-precision", type=float, default=None, help="exit 1 when overlap precision is below this")
    p.add_argument("--min-recall", type=float, default=None, help="exit 1 when overlap recall is below this")
    _handler(p, "eval:cmd_eval")

    p = sub.add_parser("recall", parents=[common], help="semantic recall over bricks; read-only")
    p.add_argument("query", nargs="?", help="what to recall (or --repl)")
    p.add_argument(
        "--repl", action="store_true", help="read one query per line from standard input and answer each, loading the model once"
    )
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument("--k", type=bounded(*bounds.RECALL_K), default=5, help=f"results, {bounds.RECALL_K[0]} to {bounds.RECALL_K[1]} (default 5)")
    _who_and_when(p)
    _handler(p, "recall:cmd_recall")
    p = sub.add_parser("ask", parents=[common], help="a grounded answer citing bricks; exit 1 when refused")
    p.add_argument("question")
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    _who_and_when(p)
    p.add_argument("--user", help="who asks (default $USER)")
    p.add_argument("--agent", default="nexus-cli", help="through what (default nexus-cli)")
    _handler(p, "recall:cmd_ask")
    _handler(sub.add_parser("audit", parents=[common], help="the append-only audit trail of answers and refusals"), "recall:cmd_audit")

    p = sub.add_parser("lineage", parents=[common], help="a brick's lineage backwards, or a run's or file's forwards")
    p.add_argument("brick_id", nargs="?", help="a brick id or unique prefix (backwards)")
    p.add_argument("--run", help="everything derived from this run (forwards)")
    p.add_argument("--file", help="everything derived from the runs of this run file (forwards)")
    _handler(p, "lineage:cmd_lineage")
    p = sub.add_parser("forget", parents=[common], help="erase a run or file everywhere, with a tombstone (invariant 15)")
    p.add_argument("--run", help="the run to forget")
    p.add_argument("--file", help="the run file to forget (every run read from it)")
    p.add_argument("--reason", required=True, help="why; recorded in the tombstone")
    p.add_argument("--yes", action="store_true", help="do it; without this only the plan is printed and nothing changes")
    p.add_argument("--delete-file", action="store_true", help="also delete the file from the runs folder")
    _handler(p, "forget:cmd_forget")
    for verdict, doc in (("keep", "a person's judgement: the brick's text joins its topic's examples to keep"),
                         ("drop", "a person's judgement: the brick's text joins its topic's examples to drop")):
        p = sub.add_parser(verdict, parents=[common], help=f"{doc} (the topic file is rewritten, comments kept); the next sync selects with it")
        p.add_argument("brick_id", help="a brick id or unique prefix")
        p.add_argument("--reason", help="why; recorded in the vault's audit trail")
        p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
        _handler(p, f"teach:cmd_{verdict}")

    p = sub.add_parser("search", parents=[common], help="ranked full-text search (BM25) over brick text, with highlights")
    p.add_argument("text", help='words, or "a phrase" in quotes')
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument(
        "--limit", type=bounded(*bounds.SEARCH_LIMIT), default=20,
        help=f"at most this many results, {bounds.SEARCH_LIMIT[0]} to {bounds.SEARCH_LIMIT[1]} (default 20)",
    )
    _handler(p, "search:cmd_search")

    p = sub.add_parser("export", help="the manifest's bricks with their sources as JSON lines, Parquet or Markdown; read-only")
    p.add_argument("topic")
    p.add_argument("--format", choices=["jsonl", "parquet", "markdown"], required=True)
    p.add_argument("--out", help="file to write (default: standard output; for parquet TOPIC.parquet)")
    _handler(p, "export:cmd_export")

    p = sub.add_parser("api", help="the HTTP API (loopback unless NEXUS_API_TOKEN is set), with the MCP tools at /mcp")
    p.add_argument("--db", default=argparse.SUPPRESS, type=parse_address, help="vault file")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; another needs NEXUS_API_TOKEN)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--runs-dir", default=runs_default, help=RUNS_HELP)
    p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
    _handler(p, "api:cmd_api")
    p = sub.add_parser("mcp", help="the MCP server over stdio, for desktop and IDE agents; read-only unless --allow-writes")
    p.add_argument("--db", default=argparse.SUPPRESS, type=parse_address, help="vault file")
    p.add_argument("--allow-writes", action="store_true", help="add the sync, forget, keep and drop tools")
    p.add_argument("--runs-dir", default=runs_default, help=RUNS_HELP)
    p.add_argument("--topics-dir", default=topics_default, help=TOPICS_HELP)
    _handler(p, "api:cmd_mcp")

    p = sub.add_parser("serve", help="the read-only trace viewer (a local web app)")
    p.add_argument("--db", default=argparse.SUPPRESS, type=parse_address, help="vault file")
    p.add_argument("--port", type=int, default=8766, help="port (default 8766, beside `nexus api`'s 8765; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1, this machine only)")
    _handler(p, "serve:cmd_serve")

    p = sub.add_parser("vault", help="the vault itself: copy it between backends")
    vault_sub = p.add_subparsers(dest="vault_command", required=True, metavar="VAULT_COMMAND")
    p = vault_sub.add_parser(
        "copy", parents=[common],
        help="copy a vault into a new, empty one (DuckDB ↔ PostgreSQL), checking every manifest hash on arrival",
    )
    p.add_argument("source", metavar="SRC", help="the vault to copy: a path, duckdb:///path or postgresql://…")
    p.add_argument("destination", metavar="DST", help="a new, empty vault: a path, duckdb:///path or postgresql://…")
    _handler(p, "vault:cmd_copy")
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
    # address, the rest in `args.basics` (and `common.config(args)`, made when a command needs it).
    args.db, args.basics = basics.address(args.db), basics
    module, function = args.handler.split(":")
    command = getattr(importlib.import_module(f"nexus_assets.cli.{module}"), function)
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
