"""`nexus sync`: parse the flags, call the sync service (nexus_assets/services/sync.py), print what it did."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from nexus_assets.cli.common import UsageError, emit, folders_note, shown_path, vault_exists
from nexus_assets.cli.parsing import Commands, non_negative_float, positive_int, runs_dir_flag, topics_dir_flag
from nexus_assets.extract.registry import extractor_names

if TYPE_CHECKING:
    from nexus_assets.services.sync import SyncEvent, SyncOutcome, SyncRequest

INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C


def request_from_args(args: argparse.Namespace) -> SyncRequest:
    from nexus_assets.services.sync import SyncRequest

    return SyncRequest(
        db=args.db,
        runs_dir=args.runs_dir,
        topics_dir=args.topics_dir,
        topics=tuple(args.topic or ()),
        extractor=args.extractor,
        replay_only=args.replay_only,
        open_after=args.open_after,
        no_recall=args.no_recall,
        batch=args.batch,
        max_cost=args.max_cost,
        parallel=args.parallel,
        progress=not args.json,
        reselect=getattr(args, "reselect", False),
        basics=getattr(args, "basics", None),
    )


def cmd_sync(args: argparse.Namespace) -> int:
    from nexus_assets.services.sync import SyncInputError, check, parallel_topics, run

    try:
        checked = check(request_from_args(args))
        for line in checked.selection.warnings:
            print(line, file=sys.stderr)
        if (args.parallel or 1) > 1 and parallel_topics(checked) == 1 and len(checked.selected) > 1:
            print(f"nexus: --parallel {args.parallel}: a DuckDB vault has one writer, so topics compile one at a time "
                  "(a PostgreSQL vault compiles them at once)", file=sys.stderr)
        taken = _Announcements(args)
        outcome = run(checked, on_event=lambda event: _show(args, event, taken))
    except SyncInputError as exc:
        raise UsageError(str(exc)) from None
    if outcome.interrupted:
        return _report_interrupted(outcome)
    for line in outcome.selector_notes:
        print(f"nexus: {line}", file=sys.stderr, flush=True)
    if outcome.unchanged:
        taken.say()
        return _report_broken(checked.selection.problems, _report_unchanged(args, outcome))
    return _report_broken(checked.selection.problems, _report(args, outcome))


class _Announcements:
    """What is said once the vault took the sync (a sync refused at the door says only why): a new
    vault and where (a mistyped --db must not pass for the vault meant), and the folders read when
    no flag named them."""

    def __init__(self, args: argparse.Namespace) -> None:
        db = Path(args.db)
        self.lines = []
        if not vault_exists(args.db):
            folder = "" if db.parent.exists() else f", and the folder {db.parent} for it"
            self.lines.append(f"nexus: created a new vault at {db}{folder}")
        if note := folders_note(args):
            self.lines.append(note)

    def say(self) -> None:
        for line in self.lines:
            print(line, file=sys.stderr, flush=True)
        self.lines = []


def _report_broken(problems: list[str], code: int) -> int:
    """The valid topics compiled; a broken topic file still fails the sync, named in its last lines
    (where a person or cron looks), whatever else happened."""
    from nexus_assets.services.sync import broken_topic_files

    if not problems:
        return code
    sys.stdout.flush()
    print(broken_topic_files(problems), file=sys.stderr, flush=True)
    return max(code, 1)


def _show(args: argparse.Namespace, event: SyncEvent, taken: _Announcements) -> None:
    if event.kind == "ingesting":
        taken.say()
        if not args.json:
            print(f"ingesting {shown_path(event.message)}", file=sys.stderr, flush=True)
    elif event.kind == "compiling":
        if not args.json:
            print(f"[{event.n}/{event.total}] syncing {event.topic_id}", file=sys.stderr, flush=True)
    elif event.kind == "step_error":
        print(f"error: {event.topic_id}: {event.message}", file=sys.stderr)
    elif event.kind == "check_failed":
        print(f"check failed: {event.topic_id}: {event.message}", file=sys.stderr)
    elif event.kind == "check_warning":
        print(f"warning: {event.topic_id}: {event.message}", file=sys.stderr)


def _report_interrupted(outcome: SyncOutcome) -> int:
    done = [r["topic_id"] for r in outcome.results if r["success"]]
    print(
        f"nexus: interrupted; the sync stopped{' after ' + ', '.join(done) if done else ''}. "
        "What was committed is kept; run `nexus sync` again to finish.",
        file=sys.stderr,
    )
    return INTERRUPTED


def _by_state(r: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(r["bricks"].items())) or "no bricks"


def _report(args: argparse.Namespace, outcome: SyncOutcome) -> int:
    """One line per topic (or the --json results)."""
    lines = []
    for r in outcome.results:
        status = "ok" if r["success"] and all(r["checks"].values()) else "FAILED"
        status += " (nothing new for it)" if r.get("unchanged") else ""
        missing = outcome.not_extracted.get(r["topic_id"])
        unasked = f"; {missing} runs not extracted (failed LLM calls, asked again next sync)" if missing else ""
        lines.append(f"{r['topic_id']}: {status}; {_by_state(r)}; manifest {(r['manifest_hash'] or '-')[:16]}{unasked}")
        lines += _notes(r)
    if not outcome.ingest_ok:
        lines.append("nothing was compiled: ingesting the run files failed")
        for err in outcome.ingest_errors:
            print(f"error: {err}", file=sys.stderr)
    if outcome.ingestion_errors_total:
        lines.append(f"{outcome.ingestion_errors_total} ingestion errors recorded; see `nexus errors`")
    if outcome.cost_stop:
        lines.append(
            "stopped sending at the cost ceiling (--max-cost / NEXUS_LLM_MAX_COST); what was answered is kept: "
            "run `nexus sync` again (with a higher ceiling) to continue from there"
        )
    emit(args, outcome.results, "\n".join(lines))
    return 1 if outcome.failed else 0


def _notes(r: dict) -> list[str]:
    """What a topic's result says beside its counts, under its line (the service words it)."""
    hidden = r.get("keywords_only_hidden")
    return [f"  {hidden['note']}"] if hidden else []


def _report_unchanged(args: argparse.Namespace, outcome: SyncOutcome) -> int:
    lines = []
    for r in outcome.results:
        lines.append(f"{r['topic_id']}: ok (unchanged since the last sync); {_by_state(r)}; manifest {(r['manifest_hash'] or '-')[:16]}")
        lines += _notes(r)
    emit(args, outcome.results, "\n".join(lines))
    return 0


def register(commands: Commands) -> None:
    basics = commands.basics
    p = commands.add("sync", cmd_sync, help="compile topics through the Dagster asset graph")
    p.add_argument("--topic", action="append", help="a topic to sync (repeatable); default every ACTIVE topic")
    runs_dir_flag(p)
    topics_dir_flag(p)
    p.add_argument("--extractor", choices=extractor_names(), default=basics.extractor)
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
        help="move the topics to this release's selector and keyword rule (plurals and possessives match): bricks they no longer select leave the manifest (history kept; FINAL bricks stay)",
    )
    p.add_argument(
        "--open-after",
        default=basics.open_after,
        help="export conversations updated at or after this ISO time are OPEN (default: all CLOSED)",
    )
