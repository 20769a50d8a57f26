"""`nexus forget (--run RUN_ID | --file PATH) --reason TEXT [--yes] [--delete-file]`: without --yes
the plan (the forward lineage), with --yes the erasure, its report and the proof that the text is gone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nexus_assets import settings
from nexus_assets.cli.common import UsageError, emit, vault_exists
from nexus_assets.cli.parsing import Commands


def _describe_plan(p: dict) -> list[str]:
    lines = [
        f"runs: {', '.join(p['run_ids']) or '-'}; files: {', '.join(f['file'] for f in p['files']) or '-'}",
        f"  {p['run_versions']} run versions, {p['nodes']} text nodes, {sum(p['occurrences'].values())} occurrences, "
        f"{p['rejections']} rejected quotes, {len(p['llm_calls'])} LLM calls, {p['embeddings']} embeddings, {len(p['answers'])} cited answers",
        f"  bricks it alone backs (removed): {len(p['bricks_alone'])}",
    ]
    lines += [f"    {b['brick_id'][:12]} {b['topic_id']} {b['state']}" for b in p["bricks_alone"]]
    lines.append(f"  bricks it shares (kept with their other sources): {len(p['bricks_shared'])}")
    lines += [f"    {b['brick_id'][:12]} {b['topic_id']} also in {', '.join(b['other_runs'])}" for b in p["bricks_shared"]]
    lines.append(f"  manifests that listed them: {len(p['manifests'])}; topics that get a tombstone: {', '.join(p['topics']) or '-'}")
    return lines


def cmd_forget(args: argparse.Namespace) -> int:
    from nexus_assets.core.actors import user_actor
    from nexus_assets.services.forgetting import ForgetError, forget_source

    if bool(args.run) == bool(args.file):
        raise UsageError("give exactly one of --run RUN_ID or --file PATH")
    if not args.reason or not args.reason.strip():
        raise UsageError("--reason is required: it is recorded in the tombstone")
    if not vault_exists(args.db):
        raise UsageError(f"no vault at {args.db}; run `nexus sync` first, or pass --db PATH")
    try:
        outcome = forget_source(
            args.db, run_id=args.run, file=args.file, reason=args.reason, actor=user_actor("nexus forget", settings.user()),
            confirm=args.yes, delete_file=args.delete_file,
        )
    except ForgetError as exc:
        raise UsageError(str(exc)) from None
    if not args.yes:
        for pending in outcome.pending:
            print(f"nexus: {unfinished_line(pending)}", file=sys.stderr)
        if outcome.planned is None:
            emit(args, {"pending": _summary(outcome.pending[0]), "unfinished": [_summary(p) for p in outcome.pending], "changed": False},
                 "nothing was changed; run again with --yes to finish it")
            return 0
        emit(args, {"plan": outcome.planned, "changed": False}, "\n".join(["nexus forget would remove:", *_describe_plan(outcome.planned),
             "nothing was changed; run again with --yes to forget"]))
        return 0
    if outcome.report is not None:
        for done in outcome.finished:
            print(f"finished the interrupted forget {done['tombstone_id']} first", file=sys.stderr)
    return _report(args, outcome.last_report)


def unfinished_line(pending: dict) -> str:
    """What `verify` and `forget` say of a forget interrupted after its commit."""
    what = ", ".join(pending["run_ids"]) or ", ".join(pending["files"])
    return (
        f"forgetting {what} (tombstone {pending['tombstone_id']}) was interrupted after its commit: its text may still "
        "be in the vault's bytes and indexes; run `nexus forget` for it with --yes again to finish erasing it"
    )


def _summary(pending: dict) -> dict:
    return {k: pending[k] for k in ("tombstone_id", "run_ids", "files", "reason", "forgotten_at")}


def _report(args: argparse.Namespace, report: dict) -> int:
    proof = report["proof"]
    lines = [
        f"{'finished forgetting' if report['resumed'] else 'forgot'} {', '.join(report['run_ids']) or Path(args.file).name} "
        f"(tombstone {report['tombstone_id']}): "
        f"{len(report['bricks_removed'])} bricks removed, {len(report['bricks_kept_with_other_sources'])} kept with other sources",
        "  rows removed: " + ", ".join(f"{t} {n}" for t, n in sorted(report["rows_removed"].items())),
        "  tombstone manifests: " + ", ".join(f"{t} {m['manifest_hash'][:16]}" for t, m in sorted(report["tombstone_manifests"].items())),
        f"  dagster: {report['dagster']['dagster_runs']} runs, {report['dagster']['dagster_files']} stored outputs and "
        f"{report['dagster']['dagster_cached_records']} cached records cleared",
    ]
    if report["files_deleted"]:
        lines.append(f"  deleted {', '.join(report['files_deleted'])}")
    lines.append(
        f"  proof: {proof['pieces_checked']} pieces of the forgotten text searched for in {len(proof['places_checked'])} places: "
        + ("none found" if proof["text_gone"] else f"STILL FOUND in {', '.join(l['file'] for l in proof['leftovers'])}")
    )
    emit(args, report, "\n".join(lines))
    return 0 if proof["text_gone"] else 1


def register(commands: Commands) -> None:
    p = commands.add("forget", cmd_forget, help="erase a run or file everywhere, with a tombstone (invariant 15)")
    p.add_argument("--run", help="the run to forget")
    p.add_argument("--file", help="the run file to forget (every run read from it)")
    p.add_argument("--reason", required=True, help="why; recorded in the tombstone")
    p.add_argument("--yes", action="store_true", help="do it; without this only the plan is printed and nothing changes")
    p.add_argument("--delete-file", action="store_true", help="also delete the file from the runs folder")
