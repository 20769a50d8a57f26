"""`nexus sync`: compile topics through the same Dagster asset graph the UI runs."""

from __future__ import annotations

import argparse
import fcntl
import importlib.metadata
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from nexus_assets import settings
from nexus_assets.cli.common import (
    COMPILED_STATES,
    UsageError,
    emit,
    folders_note,
    open_vault,
    project_dagster_home,
    require_folder,
    shown_path,
    storage_failure,
)
from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.ingest.runfiles import file_stat, scan_run_files
from nexus_assets.lifecycle.step import TopicFileError, record_topic_files
from nexus_assets.recall import embedder
from nexus_assets.resolve.order import normalize_timestamp
from nexus_assets.topics.files import read_topic_files, topic_id_conflicts
from nexus_assets.vault.migrations import LATEST

INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C


class _SignalLog:
    """Notes SIGINT/SIGTERM arriving while installed, through the interpreter's wakeup fd."""

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(write, False)
        self._write = write
        self._previous = signal.set_wakeup_fd(write)
        self._seen = False

    def stopped(self) -> bool:
        try:
            while data := os.read(self._read, 512):
                self._seen |= any(b in (signal.SIGINT, signal.SIGTERM) for b in data)
        except BlockingIOError:
            pass
        return self._seen

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        os.close(self._read)
        os.close(self._write)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def dagster_instance(db: str | Path, topics: list[str]):
    """The Dagster instance with the topics registered as partitions (see `project_dagster_home`).
    Dagster creates its storage on first use, and several first syncs at once race inside that
    set-up, so it happens under a file lock."""
    from dagster import DagsterInstance  # only when a sync really runs the graph

    home = project_dagster_home(db, settings.dagster_home())
    if home is None:
        instance = DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("topics", topics)
        return instance
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)  # for Dagster's DagsterInstance.get(): a write, not a read of our settings
    with open(home / ".nexus-setup.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            instance = DagsterInstance.get()
            known = set(instance.get_dynamic_partitions("topics"))
            missing = [t for t in topics if t not in known]
            if missing:
                instance.add_dynamic_partitions("topics", missing)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return instance


@dataclass
class _Request:
    """A sync's checked inputs: the folders, the topic files read, and the topics to compile."""

    topics_dir: Path
    runs_dir: Path
    llm: dict
    files: list
    defined: dict
    selected: list[str]
    # One line per topic file that could not be read: its topic is not compiled, and the sync exits 1.
    broken: list[str] = field(default_factory=list)


@dataclass
class _Outcome:
    """What the Dagster runs of one sync leave to report, read from their public results."""

    results: list[dict] = field(default_factory=list)
    ingest_ok: bool = True
    ingest_run_id: str | None = None
    ingest_errors: list[str] = field(default_factory=list)
    failed: bool = False
    interrupted: bool = False
    not_extracted: dict[str, int] = field(default_factory=dict)
    cost_stop: bool = False


def cmd_sync(args: argparse.Namespace) -> int:
    request = _check_inputs(args)
    inputs, unchanged = _record_inputs(args, request)
    # Said once the vault took the sync (a sync refused at the door says only why).
    if note := folders_note(args):
        print(note, file=sys.stderr, flush=True)
    if unchanged:
        return _report_broken(request, _report_unchanged(args, request.selected))
    outcome = _run_jobs(args, request)
    if outcome.interrupted:
        return _report_interrupted(outcome)
    return _report_broken(request, _report(args, outcome, inputs))


def _broken_lines(broken: list[str]) -> str:
    return "\n".join(
        [f"nexus: {len(broken)} topic file{'s' if len(broken) > 1 else ''} could not be read, so {'their topics were' if len(broken) > 1 else 'its topic was'} not compiled; fix and sync again:"]
        + [f"  {' '.join(line.split())}" for line in broken]  # one line per file, whatever YAML said
    )


def _report_broken(request: _Request, code: int) -> int:
    """The valid topics compiled; a broken topic file still fails the sync, named in its last lines
    (where a person or cron looks), whatever else happened."""
    if not request.broken:
        return code
    sys.stdout.flush()
    print(_broken_lines(request.broken), file=sys.stderr, flush=True)
    return max(code, 1)


def _check_inputs(args: argparse.Namespace) -> _Request:
    """The folders, options and topic files, checked before anything is written (exit 2 on a problem)."""
    topics_dir = require_folder(Path(args.topics_dir), "topics", "--topics-dir")
    runs_dir = require_folder(Path(args.runs_dir), "runs", "--runs-dir")
    llm = _llm_options(args)
    if args.open_after:
        if normalize_timestamp(args.open_after) is None:
            raise UsageError(f"--open-after {args.open_after!r} is not an ISO time such as 2026-11-01T00:00:00Z")
    files = read_topic_files(topics_dir)
    if conflicts := topic_id_conflicts(files):  # ambiguous configuration: nothing is touched
        raise UsageError("\n".join(conflicts))
    # A duplicate topic_id was refused above; every other problem is a file to fix.
    broken = [tf.problem for tf in files if tf.problem and tf.duplicate_of is None]
    for problem in broken:
        print(f"warning: {problem}", file=sys.stderr)
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
        raise UsageError(f"no ACTIVE topics in {topics_dir}; nothing to sync" + (f"\n{_broken_lines(broken)}" if broken else ""))
    return _Request(topics_dir, runs_dir, llm, files, defined, selected, broken)


def _record_inputs(args: argparse.Namespace, request: _Request) -> tuple[dict, bool]:
    """Record every topic file (so `nexus topics` shows DRAFT ones too; only compiled ones sync) and
    the sources; return this sync's inputs and whether the last clean sync saw exactly them."""
    with open_vault(args, write=True, create=True) as vault:
        try:
            record_topic_files(vault, request.files)
        except TopicFileError as exc:
            raise UsageError(f"{exc}. Nothing was compiled.") from None
        vault.topics.record_sources(runs_dir=request.runs_dir, topics_dir=request.topics_dir)
        inputs = sync_inputs(args, request.runs_dir, request.defined, request.selected)
        unchanged = vault.history.last_clean_sync() == sha256_hex(canonical_json([inputs, vault.history.change_marks()]))
    return inputs, unchanged


# Each failed step is reported in one line; Dagster's own log would add its traceback.
_QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _run_jobs(args: argparse.Namespace, request: _Request) -> _Outcome:
    """The jobs the UI and the schedule run (defs/jobs.py): `ingest_run_files` once for every topic,
    then `compile_topic` per topic partition, each in process on the project's Dagster instance."""
    from nexus_assets.definitions import (
        build_defs,  # Dagster is loaded only when the graph runs
    )

    defs = build_defs(
        db_path=args.db,
        runs_dir=str(request.runs_dir),
        topics_dir=str(request.topics_dir),
        extractor=args.extractor,
        replay_only=args.replay_only,
        open_after=args.open_after,
        progress=not args.json,
        llm=request.llm,
    )
    ingest_job, compile_job = defs.resolve_job_def("ingest_run_files"), defs.resolve_job_def("compile_topic")
    instance = dagster_instance(args.db, request.selected)
    outcome = _Outcome()
    # Dagster turns Ctrl-C/SIGTERM during a step into a failed step and returns; between steps
    # they raise here. Either way the whole sync stops: the next topic would hang on the same file.
    previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler) if _main_thread() else None
    # Dagster swaps in its own handlers while a job runs, and a step may report the interrupt
    # as any error; the wakeup fd records every signal whatever handler took it.
    signals = _SignalLog() if _main_thread() else None
    try:
        _ingest(args, request, ingest_job, instance, outcome, signals)
        for n, topic_id in enumerate([] if outcome.interrupted else request.selected, 1):
            if not outcome.ingest_ok:
                outcome.results.append(
                    {"topic_id": topic_id, "success": False, "dagster_run_id": outcome.ingest_run_id,
                     "checks": {}, "errors": outcome.ingest_errors}
                )
                outcome.failed = True
                continue
            if not args.json:
                print(f"[{n}/{len(request.selected)}] syncing {topic_id}", file=sys.stderr, flush=True)
            if not _compile_topic(args, compile_job, instance, topic_id, outcome, signals):
                break
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        if signals:
            signals.close()
        # An ephemeral instance (a vault outside the project) owns a temporary directory.
        instance.dispose()
    return outcome


def _ingest(args: argparse.Namespace, request: _Request, job, instance, outcome: _Outcome, signals: _SignalLog | None) -> None:
    """Run files are ingested once for every topic; each topic then compiles from the vault."""
    if not args.json:
        print(f"ingesting {shown_path(request.runs_dir)}", file=sys.stderr, flush=True)
    result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=_QUIET)
    outcome.interrupted = _stopped(result, signals)
    if problem := storage_failure(args.db, result):
        raise problem
    outcome.ingest_ok = result.success
    outcome.ingest_run_id = result.run_id
    outcome.ingest_errors = step_errors(result)


def _compile_topic(args: argparse.Namespace, job, instance, topic_id: str, outcome: _Outcome, signals: _SignalLog | None) -> bool:
    """One topic's `compile_topic` run, added to the outcome; False when the sync was stopped."""
    from nexus_assets.defs.jobs import without_recall

    selection = without_recall(ingest=False) if args.no_recall else None
    result = job.execute_in_process(
        partition_key=topic_id, instance=instance, raise_on_error=False, run_config=_QUIET, asset_selection=selection
    )
    if problem := storage_failure(args.db, result):
        raise problem  # the next topic would fail the same way: one line, exit 2
    evaluations = result.get_asset_check_evaluations()
    # A check of WARN severity that did not pass (open_conflicts) tells a person something; it never fails a sync.
    warnings = {e.check_name: e.description or "" for e in evaluations if not e.passed and e.severity.value == "WARN"}
    checks = {e.check_name: e.passed or e.check_name in warnings for e in evaluations}
    errors = step_errors(result)
    outcome.failed |= not (result.success and all(checks.values()))
    # Runs whose LLM calls failed are asked again next time: that sync is not a no-op.
    extractions = [m.metadata for m in result.asset_materializations_for_node("pointer_extractions")]
    unextracted = sum(m["runs_incomplete"].value for m in extractions if m.get("runs_incomplete") is not None)
    if unextracted:
        outcome.not_extracted[topic_id] = unextracted
    outcome.cost_stop |= any(m.get("llm_stopped_by_cost") is not None and m["llm_stopped_by_cost"].value for m in extractions)
    outcome.results.append(
        {"topic_id": topic_id, "success": result.success, "dagster_run_id": result.run_id, "checks": checks, "errors": errors,
         **({"warnings": warnings} if warnings else {})}
    )
    if _stopped(result, signals):
        outcome.interrupted = True
        return False
    for err in errors:
        print(f"error: {topic_id}: {err}", file=sys.stderr)
    for name, passed in checks.items():
        if not passed:
            print(f"check failed: {topic_id}: {name}", file=sys.stderr)
    # Open conflicts are said when their set changed (the embeddings step compares it), not at
    # every sync that leaves them as they were; `nexus conflicts` and the check still list them.
    related = [m.metadata for m in result.asset_materializations_for_node("brick_embeddings")]
    conflicts_changed = any(m.get("conflicts_changed") is not None and m["conflicts_changed"].value for m in related)
    for name, description in warnings.items():
        if name != "open_conflicts" or conflicts_changed:
            print(f"warning: {topic_id}: {name}: {description}", file=sys.stderr)
    return True


def _stopped(result, signals: _SignalLog | None) -> bool:
    """Whether Ctrl-C/SIGTERM arrived during the run, noted by the wakeup fd or reported by a step."""
    failures = [e.event_specific_data.error for e in result.all_events if e.is_step_failure and e.event_specific_data and e.event_specific_data.error]
    return bool(signals and signals.stopped()) or any("Interrupt" in (f.cls_name or "") for f in failures)


def _report_interrupted(outcome: _Outcome) -> int:
    done = [r["topic_id"] for r in outcome.results if r["success"]]
    print(
        f"nexus: interrupted; the sync stopped{' after ' + ', '.join(done) if done else ''}. "
        "What was committed is kept; run `nexus sync` again to finish.",
        file=sys.stderr,
    )
    return INTERRUPTED


def _report(args: argparse.Namespace, outcome: _Outcome, inputs: dict) -> int:
    """One line per topic (or the --json results), read back from the vault the runs left."""
    results = outcome.results
    # Read-write: DuckDB refuses a read-only handle in a process that just wrote the same file.
    with open_vault(args, write=True) as vault:
        counts = vault.brick_counts()
        hashes = vault.latest_manifest_hashes()
        for r in results:
            r["manifest_hash"] = hashes.get(r["topic_id"])
            r["bricks"] = counts.get(r["topic_id"], {})
        errors_total = vault.runs.ingestion_error_count()
    lines = []
    for r in results:
        status = "ok" if r["success"] and all(r["checks"].values()) else "FAILED"
        by_state = ", ".join(f"{k} {v}" for k, v in sorted(r["bricks"].items())) or "no bricks"
        missing = outcome.not_extracted.get(r["topic_id"])
        unasked = f"; {missing} runs not extracted (failed LLM calls, asked again next sync)" if missing else ""
        lines.append(f"{r['topic_id']}: {status}; {by_state}; manifest {(r['manifest_hash'] or '-')[:16]}{unasked}")
    if not outcome.ingest_ok:
        lines.append("nothing was compiled: ingesting the run files failed")
        for err in outcome.ingest_errors:
            print(f"error: {err}", file=sys.stderr)
    if errors_total:
        lines.append(f"{errors_total} ingestion errors recorded; see `nexus errors`")
    if outcome.cost_stop:
        lines.append(
            "stopped sending at the cost ceiling (--max-cost / NEXUS_LLM_MAX_COST); what was answered is kept: "
            "run `nexus sync` again (with a higher ceiling) to continue from there"
        )
    if not outcome.failed and not outcome.not_extracted:
        # The next sync with exactly these inputs has nothing to do (see `sync_fingerprint`).
        # The inputs as read before this sync (a file changed meanwhile makes the next one run), the
        # vault as this sync left it (any later command that changes it makes the next one run).
        with open_vault(args, write=True) as vault:
            vault.history.record_clean_sync(sha256_hex(canonical_json([inputs, vault.history.change_marks()])))
    emit(args, results, "\n".join(lines))
    return 1 if outcome.failed else 0


def _llm_options(args: argparse.Namespace) -> dict:
    """The LLM options of this sync as extractor resource fields, checked before any step runs:
    a bad setting is a usage error (exit 2), as in `nexus plan`."""
    wanted = {"--batch": args.batch, "--max-cost": args.max_cost is not None, "--parallel": args.parallel is not None}
    if args.extractor != "openai":
        given = [flag for flag, on in wanted.items() if on]
        if given:
            raise UsageError(f"{given[0]} applies to the openai extractor; add --extractor openai")
        return {}
    from datetime import datetime, timezone

    from nexus_assets.llm.chunking import token_budget_from_env
    from nexus_assets.llm.client import LLMConfig

    overrides = {k: v for k, v in {"max_cost_usd": args.max_cost, "concurrency": args.parallel}.items() if v is not None}
    try:
        env = settings.load().as_env()
        token_budget_from_env(env)
        config = LLMConfig.from_env(env, **overrides)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if config.max_cost_usd is not None and (config.price_in_per_mtok is None or config.price_out_per_mtok is None):
        raise UsageError(
            "a cost ceiling (--max-cost or NEXUS_LLM_MAX_COST) needs the model's prices to estimate spend: "
            "set NEXUS_PRICE_IN_PER_MTOK and NEXUS_PRICE_OUT_PER_MTOK (USD per million tokens)"
        )
    return {
        **overrides,
        "batch": bool(args.batch),
        # One ceiling for the whole sync: every topic's step counts what was sent since now.
        "cost_since": datetime.now(timezone.utc).isoformat() if config.max_cost_usd is not None else None,
    }


def _gold_file(topic, topics_dir: Path) -> Path | None:
    """The gold file the topic's extraction_quality check reads (relative to the topics folder)."""
    if topic.quality is None:
        return None
    gold = Path(topic.quality.gold)
    return gold if gold.is_absolute() else topics_dir / gold


def sync_inputs(args: argparse.Namespace, runs_dir: Path, defined: dict, selected: list[str]) -> dict:
    """Everything a sync reads outside the vault, cheaply: each run file's size, times and inode
    (not its bytes), the topic definitions, the extractor and its settings, and this release.
    With the vault's change marks, equal to what the last sync that passed everything saw:
    nothing could come out differently, so nothing runs."""
    try:
        release = importlib.metadata.version("nexus-sync")
    except importlib.metadata.PackageNotFoundError:
        release = "unknown"
    # The folder resolved once, each file named under it (resolving 10k paths one by one costs 0.4 s).
    root = runs_dir.resolve()
    return {
        "runs": [[str(root / p.relative_to(runs_dir)), file_stat(p)] for p in scan_run_files(runs_dir)],
        "topics": {t: defined[t].model_dump(mode="json") for t in sorted(defined)},
        # The extraction_quality check reads each topic's gold file.
        "gold": {t: [str(g), file_stat(g)] for t in sorted(defined) if (g := _gold_file(defined[t], Path(args.topics_dir)))},
        "selected": sorted(selected),
        "extractor": [args.extractor, bool(args.replay_only), args.open_after, bool(args.batch)],
        # A sync without recall is not the one a later sync with it can skip: embeddings are missing.
        "recall": not args.no_recall,
        "settings": settings.prefixed(),
        "release": [release, LATEST],
        # Another embedding model means every brick is embedded again (brick_embeddings): not unchanged.
        "embedding_model": embedder.MODEL,
    }


def _report_unchanged(args: argparse.Namespace, selected: list[str]) -> int:
    with open_vault(args, write=True) as vault:
        counts = vault.brick_counts()
        hashes = vault.latest_manifest_hashes()
    results = [
        {
            "topic_id": t,
            "success": True,
            "unchanged": True,
            "dagster_run_id": None,
            "checks": {},
            "errors": [],
            "manifest_hash": hashes.get(t),
            "bricks": counts.get(t, {}),
        }
        for t in selected
    ]
    lines = [
        f"{r['topic_id']}: ok (unchanged since the last sync); "
        f"{', '.join(f'{k} {v}' for k, v in sorted(r['bricks'].items())) or 'no bricks'}; manifest {(r['manifest_hash'] or '-')[:16]}"
        for r in results
    ]
    emit(args, results, "\n".join(lines))
    return 0


def step_errors(result) -> list[str]:
    return [
        f"{e.step_key}: {e.event_specific_data.error.message.strip()}"
        for e in result.all_events
        if e.is_step_failure and e.event_specific_data and e.event_specific_data.error
    ]
