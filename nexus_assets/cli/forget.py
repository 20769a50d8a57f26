"""`nexus forget (--run RUN_ID | --file PATH) --reason TEXT [--yes] [--delete-file]`: without --yes
the plan (the forward lineage), with --yes the erasure, its report and the proof that the text is gone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nexus_assets import settings
from nexus_assets.cli.common import UsageError, emit, open_vault
from nexus_assets.forget.step import (
    ForgetError,
    find_target,
    finish_erasure,
    forget,
    pending_erasure,
    plan,
)
from nexus_assets.lifecycle.step import user_actor


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
    if bool(args.run) == bool(args.file):
        raise UsageError("give exactly one of --run RUN_ID or --file PATH")
    if not args.reason or not args.reason.strip():
        raise UsageError("--reason is required: it is recorded in the tombstone")
    with open_vault(args, write=not args.yes) as vault:
        pending = pending_erasure(vault, args.db)
        try:
            target = find_target(vault, run_id=args.run, file=args.file)
        except ForgetError as exc:
            # "Already forgotten" by the forget that was interrupted: this run finishes it.
            if pending is None or not _asks_for(pending, args):
                raise UsageError(str(exc)) from None
            target = None
        planned = plan(vault, target) if target is not None else None
    if pending is not None and not args.yes:
        print(f"nexus: {unfinished_line(pending)}", file=sys.stderr)
        if target is None:
            emit(args, {"pending": _summary(pending), "changed": False}, "nothing was changed; run again with --yes to finish it")
            return 0
    if not args.yes:
        emit(args, {"plan": planned, "changed": False}, "\n".join(["nexus forget would remove:", *_describe_plan(planned),
             "nothing was changed; run again with --yes to forget"]))
        return 0
    if pending is not None:
        report = finish_erasure(args.db, pending)
        if target is None:
            return _report(args, report)
        print(f"finished the interrupted forget {pending['tombstone_id']} first", file=sys.stderr)
    if args.delete_file and args.run and len(target.files) != 1:
        raise UsageError("--delete-file with --run needs the run to come from exactly one file")
    report = forget(args.db, target, reason=args.reason.strip(), actor=user_actor("nexus forget", settings.user()), delete_file=args.delete_file)
    return _report(args, report)


def unfinished_line(pending: dict) -> str:
    """What `verify` and `forget` say of a forget interrupted after its commit."""
    what = ", ".join(pending["run_ids"]) or ", ".join(pending["files"])
    return (
        f"forgetting {what} (tombstone {pending['tombstone_id']}) was interrupted after its commit: its text may still "
        "be in the vault's bytes and indexes; run `nexus forget` for it with --yes again to finish erasing it"
    )


def _summary(pending: dict) -> dict:
    return {k: pending[k] for k in ("tombstone_id", "run_ids", "files", "reason", "forgotten_at")}


def _asks_for(pending: dict, args: argparse.Namespace) -> bool:
    if args.run:
        return args.run in pending["run_ids"]
    return str(Path(args.file).resolve()) in pending["files"]


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
