"""`nexus sync`: compile topics through the same Dagster asset graph the UI runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dagster import DagsterInstance

from nexus_assets.cli.common import COMPILED_STATES, UsageError, emit, open_vault
from nexus_assets.core.order import normalize_timestamp
from nexus_assets.definitions import build_defs
from nexus_assets.lifecycle import TopicFileError, record_topic_files
from nexus_assets.topicfiles import read_topic_files


def cmd_sync(args: argparse.Namespace) -> int:
    topics_dir, runs_dir = Path(args.topics_dir), Path(args.runs_dir)
    if not topics_dir.is_dir():
        raise UsageError(f"topics folder {topics_dir} does not exist; pass --topics-dir")
    if not runs_dir.is_dir():
        raise UsageError(f"runs folder {runs_dir} does not exist; pass --runs-dir")
    if args.open_after:
        if normalize_timestamp(args.open_after) is None:
            raise UsageError(f"--open-after {args.open_after!r} is not an ISO time such as 2026-11-01T00:00:00Z")
    files = read_topic_files(topics_dir)
    for tf in files:
        if tf.problem:
            print(f"warning: {tf.problem}", file=sys.stderr)
    defined = {tf.topic.topic_id: tf.topic for tf in files if tf.topic is not None}
    if args.topic:
        for t in args.topic:
            if t not in defined:
                raise UsageError(f"unknown topic {t!r}; topic files in {topics_dir} define: {', '.join(sorted(defined)) or 'none'}")
            if defined[t].state not in COMPILED_STATES and defined[t].state != "LOCKED":
                raise UsageError(f"topic {t!r} is {defined[t].state}; activate it first (`nexus activate {t}`)")
        selected = list(dict.fromkeys(args.topic))
    else:
        selected = sorted(t for t, topic in defined.items() if topic.state in COMPILED_STATES)
        skipped = sorted(t for t, topic in defined.items() if topic.state not in COMPILED_STATES)
        if skipped:
            print(f"not compiled (not ACTIVE): {', '.join(skipped)}", file=sys.stderr)
    if not selected:
        raise UsageError(f"no ACTIVE topics in {topics_dir}; nothing to sync")

    # Every topic file is recorded, so `nexus topics` shows DRAFT ones too; only compiled ones sync.
    with open_vault(args, write=True) as vault:
        try:
            record_topic_files(vault, files)
        except TopicFileError as exc:
            raise UsageError(f"{exc}. Nothing was compiled.") from None

    defs = build_defs(
        db_path=args.db,
        runs_dir=str(runs_dir),
        topics_dir=str(topics_dir),
        extractor=args.extractor,
        replay_only=args.replay_only,
        open_after=args.open_after,
        progress=not args.json,
    )
    job = defs.resolve_job_def("compile_topic")
    instance = DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()
    known = set(instance.get_dynamic_partitions("topics"))
    missing = [t for t in selected if t not in known]
    if missing:
        instance.add_dynamic_partitions("topics", missing)
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}

    results, failed = [], False
    # Run files are ingested once for every topic; each topic then compiles from the vault.
    if not args.json:
        print(f"ingesting {runs_dir}", file=sys.stderr, flush=True)
    ingested = defs.resolve_job_def("ingest_run_files").execute_in_process(instance=instance, raise_on_error=False, run_config=quiet)
    ingest_errors = step_errors(ingested)
    for n, topic_id in enumerate(selected, 1):
        if not ingested.success:
            results.append({"topic_id": topic_id, "success": False, "dagster_run_id": ingested.run_id, "checks": {}, "errors": ingest_errors})
            failed = True
            continue
        if not args.json:
            print(f"[{n}/{len(selected)}] syncing {topic_id}", file=sys.stderr, flush=True)
        result = job.execute_in_process(partition_key=topic_id, instance=instance, raise_on_error=False, run_config=quiet)
        checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
        errors = step_errors(result)
        ok = result.success and all(checks.values())
        failed |= not ok
        results.append({"topic_id": topic_id, "success": result.success, "dagster_run_id": result.run_id, "checks": checks, "errors": errors})
        for err in errors:
            print(f"error: {topic_id}: {err}", file=sys.stderr)
        for name, passed in checks.items():
            if not passed:
                print(f"check failed: {topic_id}: {name}", file=sys.stderr)

    # Read-write: DuckDB refuses a read-only handle in a process that just wrote the same file.
    with open_vault(args, write=True) as vault:
        counts = vault.brick_counts()
        for r in results:
            m = vault.latest_manifest(r["topic_id"])
            r["manifest_hash"] = m.manifest_hash if m else None
            r["bricks"] = counts.get(r["topic_id"], {})
        errors_total = vault.ingestion_error_count()
    lines = []
    for r in results:
        status = "ok" if r["success"] and all(r["checks"].values()) else "FAILED"
        by_state = ", ".join(f"{k} {v}" for k, v in sorted(r["bricks"].items())) or "no bricks"
        lines.append(f"{r['topic_id']}: {status}; {by_state}; manifest {(r['manifest_hash'] or '-')[:16]}")
    if not ingested.success:
        lines.append("nothing was compiled: ingesting the run files failed")
        for err in ingest_errors:
            print(f"error: {err}", file=sys.stderr)
    if errors_total:
        lines.append(f"{errors_total} ingestion errors recorded; see `nexus errors`")
    emit(args, results, "\n".join(lines))
    return 1 if failed else 0


def step_errors(result) -> list[str]:
    return [
        f"{e.step_key}: {e.event_specific_data.error.message.strip()}"
        for e in result.all_events
        if e.is_step_failure and e.event_specific_data and e.event_specific_data.error
    ]
