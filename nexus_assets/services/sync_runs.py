"""One Dagster run of a sync: the instance the vault shares, the jobs' definitions, the signals
that stop a sync, and what a topic's run reported (its checks, step errors, typed outcome, a
storage failure) as plain values and progress events (services/sync.py launches the runs)."""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from nexus_assets import settings
from nexus_assets.dagster_home import project_dagster_home
from nexus_assets.defs.outcome import NOTHING_NEW, TopicRunOutcome
from nexus_assets.defs.tags import SYNC_TOPICS_TAG, TOPIC_TAG

# Dagster's tags for a run over a range of partitions (a single-run backfill's).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
from nexus_assets.services.sync_models import CheckedSync, SyncEvent, SyncOutcome


def dagster_instance(db: str | Path, topics: list[str], instance=None):
    """The Dagster instance with the topics registered as partitions: `instance` when given (a
    server's), else the one the vault shares (`project_dagster_home`), else an ephemeral one.
    Dagster creates its storage on first use, and several first syncs at once race inside that
    set-up, so it happens under a file lock."""
    from dagster import DagsterInstance  # only when a sync really runs the graph

    if instance is not None:
        missing = [t for t in topics if t not in set(instance.get_dynamic_partitions("topics"))]
        if missing:
            instance.add_dynamic_partitions("topics", missing)
        return instance
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


class SignalLog:
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


def main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()



# Each failed step is reported in one line; Dagster's own log would add its traceback.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def job_defs(checked: CheckedSync, inputs_file: str | None = None):
    """The definitions a sync runs; `inputs_file`: this sync's inputs, for the run to skip a topic
    with nothing new (defs/partitions.py `skipped_topics`)."""
    from nexus_assets.definitions import build_defs  # Dagster is loaded only when the graph runs

    request = checked.request
    return build_defs(
        db_path=request.db,
        runs_dir=str(checked.runs_dir),
        topics_dir=str(checked.topics_dir),
        extractor=request.extractor,
        replay_only=request.replay_only,
        open_after=request.open_after,
        progress=request.progress,
        llm={**checked.llm, **({"reselect": True} if request.reselect else {})},
        basics=request.basics,
        sync_inputs_file=inputs_file,
    )


def run_tags(checked: CheckedSync) -> dict[str, str]:
    return {**checked.request.tags, SYNC_TOPICS_TAG: ",".join(checked.selected)} if checked.request.tags else {}


@dataclass
class TopicReport:
    """What one topic's `compile_topic` run did, as plain values (a worker process sends it back)."""

    result: dict
    failed: bool
    not_extracted: int
    cost_stop: bool
    events: list[SyncEvent]
    stopped: bool
    storage_problem: Exception | None = None


def apply_report(report: TopicReport, outcome: SyncOutcome, tell) -> bool:
    if report.result["dagster_run_id"] not in (None, *outcome.dagster_run_ids):  # one run holds several topics
        outcome.dagster_run_ids.append(report.result["dagster_run_id"])
    if report.storage_problem is not None:
        raise report.storage_problem  # the next topic would fail the same way
    outcome.failed |= report.failed
    if report.not_extracted:
        outcome.not_extracted[report.result["topic_id"]] = report.not_extracted
    outcome.cost_stop |= report.cost_stop
    outcome.results.append(report.result)
    if report.stopped:
        outcome.interrupted = True
        return False
    for event in report.events:
        tell(event)
    return True


def compile_report(checked: CheckedSync, job, instance, topic_id: str, signals) -> TopicReport:
    """One topic's own run (`--parallel`, and each topic again when a run of several failed a step)."""
    return compile_reports(checked, job, instance, [topic_id], signals)[1][topic_id]


def compile_reports(checked: CheckedSync, job, instance, topics: list[str], signals) -> tuple[object, dict[str, TopicReport]]:
    """One run of `job` over the topics (one partition, or a range of them: each asset of the topic
    graph runs once for all, defs/partitions.py), and each topic's report read from it: the checks
    evaluated on its partition, its steps' typed outcome. A failed step is the whole run's: every
    topic's report carries it (the caller then runs each topic on its own)."""
    import dagster as dg

    from nexus_assets.defs.jobs import SHARED, without_recall

    ingests = job.name != "compile_topic"
    # Without recall: the compile graph, and (a run that ingests) the record with its indexes as ever.
    selection = ([dg.AssetKey(a) for a in SHARED] if ingests else []) + without_recall(ingest=False) if checked.request.no_recall else None
    shared = {dg.AssetKey(a) for a in SHARED}
    tags = {**run_tags(checked), TOPIC_TAG: ",".join(topics)}
    if len(topics) == 1:
        where = {"partition_key": topics[0]}
    else:
        where = {}
        tags |= {RANGE_START: topics[0], RANGE_END: topics[-1]}
    result = job.execute_in_process(
        instance=instance, raise_on_error=False, run_config=QUIET, asset_selection=selection, tags=tags, **where,
    )
    # A topic's checks: those of its partition. Not the record's (every topic shares them; a failed
    # blocking one stops the run), nor, in a run of several topics, a check's sum over them (partition None).
    evaluations = [e for e in result.get_asset_check_evaluations()
                   if e.asset_key not in shared and (e.partition is not None or len(topics) == 1)]
    errors = step_errors(result)
    halted = stopped(result, signals)
    problem = storage_failure(checked.request.db, result)
    # A topic the run found with nothing new since its last clean run (defs/partitions.py): as if
    # the sync had skipped it before the run (nothing ran for it, nothing to report but that).
    nothing_new = {m.partition for m in result.asset_materializations_for_node("raw_runs") if NOTHING_NEW in m.metadata}
    reports = {}
    for topic_id in topics:
        if topic_id in nothing_new:
            reports[topic_id] = TopicReport(
                result={"topic_id": topic_id, "success": True, "unchanged": True, "dagster_run_id": None, "checks": {}, "errors": []},
                failed=False, not_extracted=0, cost_stop=False, events=[], stopped=halted, storage_problem=problem,
            )
            continue
        mine = [e for e in evaluations if e.partition in (topic_id, None)]
        # A check of WARN severity that did not pass (open_conflicts) tells a person something; it never fails a sync.
        warnings = {e.check_name: e.description or "" for e in mine if not e.passed and e.severity.value == "WARN"}
        checks = {e.check_name: e.passed or e.check_name in warnings for e in mine}
        # The run's typed outcome (defs/outcome.py): runs whose LLM calls failed are asked again next
        # time (that sync is not a no-op); the cost ceiling; whether the open conflicts changed.
        said = TopicRunOutcome.of(result, topic_id)
        events = [SyncEvent("step_error", err, topic_id) for err in errors]
        events += [SyncEvent("check_failed", name, topic_id) for name, passed in checks.items() if not passed]
        # Open conflicts are said when their set changed (the embeddings step compares it), not at every
        # sync that leaves them as they were; the check and `nexus conflicts` still list them.
        events += [
            SyncEvent("check_warning", f"{name}: {description}", topic_id)
            for name, description in warnings.items()
            if name != "open_conflicts" or said.conflicts_changed
        ]
        reports[topic_id] = TopicReport(
            result={"topic_id": topic_id, "success": result.success, "dagster_run_id": result.run_id, "checks": checks,
                    "errors": errors, **({"warnings": warnings} if warnings else {})},
            failed=not (result.success and all(checks.values())),
            not_extracted=said.runs_incomplete,
            cost_stop=said.llm_stopped_by_cost,
            events=events,
            stopped=halted,
            storage_problem=problem,
        )
    return result, reports


def stopped(result, signals: SignalLog | None) -> bool:
    """Whether Ctrl-C/SIGTERM arrived during the run, noted by the wakeup fd or reported by a step."""
    failures = [e.event_specific_data.error for e in result.all_events if e.is_step_failure and e.event_specific_data and e.event_specific_data.error]
    return bool(signals and signals.stopped()) or any("Interrupt" in (f.cls_name or "") for f in failures)


def step_errors(result) -> list[str]:
    return [
        f"{e.step_key}: {_cause(e.event_specific_data.error)}"
        for e in result.all_events
        if e.is_step_failure and e.event_specific_data and e.event_specific_data.error
    ]


def shared_step_errors(result) -> list[str]:
    """The errors of the steps every topic shares (ingestion, the record, their checks)."""
    from nexus_assets.defs.jobs import SHARED

    return [
        f"{e.step_key}: {_cause(e.event_specific_data.error)}"
        for e in result.all_events
        if e.is_step_failure and e.event_specific_data and e.event_specific_data.error
        and any(e.step_key == name or e.step_key.startswith(f"{name}_") for name in SHARED)
    ]


def _cause(error) -> str:
    """What went wrong in a step: Dagster wraps the step's own exception; its message says it."""
    while error.cause is not None and error.message.startswith("dagster."):
        error = error.cause
    return error.message.strip()


# DuckDB's errors that can be the vault's storage failing under a step (its class names, as
# Dagster records a step's error).
_STORAGE_ERRORS = {"IOException", "TransactionException", "FatalException", "Error"}


def storage_failure(db: str, result) -> Exception | None:
    """The vault's storage problem (damaged, read-only, a full disk) that failed a step of a Dagster
    run, as the one line to exit with; None when no step failed that way."""
    from nexus_assets.vault.connection import storage_problem

    for event in result.all_events:
        error = event.event_specific_data.error if event.is_step_failure and event.event_specific_data else None
        while error is not None:
            if error.cls_name in _STORAGE_ERRORS and (problem := storage_problem(db, error.message)):
                return problem
            error = error.cause
    return None


