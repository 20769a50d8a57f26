"""Sync jobs for the API: the sync service run on the Dagster instance the vault shares, one job
at a time on a worker thread (one DuckDB writer), each of its Dagster runs tagged with the job id.
A job's status is read from Dagster's run records; this process only adds what Dagster cannot
know (a job still waiting its turn, a sync that needed no run because nothing changed)."""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from nexus_assets.schemas import SyncInitiate, SyncJob
from nexus_assets.defs.tags import SYNC_JOB_TAG, SYNC_TOPICS_TAG
from nexus_assets.services.sync import (
    SyncOutcome,
    SyncRequest,
    check,
    dagster_instance,
    run,
)

log = logging.getLogger("nexus.api")
SYNC_RUNS_TAG = "nexus/sync_runs"


class JobRunning(Exception):
    """A job for (some of) the same topics is queued or running."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


def _iso(ts: float | datetime | None) -> str | None:
    if ts is None:
        return None
    if isinstance(ts, datetime):
        return ts.astimezone(timezone.utc).isoformat()
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


@dataclass
class _Job:
    job_id: str
    topics: list[str]
    checked: object
    started_at: datetime | None = None
    finished_at: datetime | None = None
    outcome: SyncOutcome | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def active(self) -> bool:
        return not self.done.is_set()


class SyncJobs:
    def __init__(self, db: str, runs_dir: str, topics_dir: str, *, extractor: str = "embedded", no_recall: bool = False) -> None:
        self.db, self.runs_dir, self.topics_dir = db, runs_dir, topics_dir
        self.extractor, self.no_recall = extractor, no_recall
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._instance = None
        self._worker: threading.Thread | None = None

    # Lifecycle: the server's lifespan starts and stops the worker.

    def start(self) -> None:
        # The instance the vault shares (the project's dagster_home/, or $DAGSTER_HOME), else an
        # ephemeral one that lives as long as the server: its run records are what status reads.
        self._instance = dagster_instance(self.db, [])
        self._worker = threading.Thread(target=self._work, name="nexus-sync-worker", daemon=True)
        self._worker.start()

    def stop(self) -> None:
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(timeout=1.0)  # a Dagster run in progress is not waited for
        if self._instance is not None and not self._worker_busy():
            self._instance.dispose()

    def _worker_busy(self) -> bool:
        return any(j.active and j.started_at for j in self._jobs.values())

    # Launching

    def initiate(self, body: SyncInitiate) -> str:
        """Check the inputs now (SyncInputError: nothing queued), then queue the job; JobRunning when
        one for any of the same topics is queued or running."""
        job_id = uuid.uuid4().hex
        tags = {SYNC_JOB_TAG: job_id}
        if body.run_ids:
            tags[SYNC_RUNS_TAG] = ",".join(body.run_ids)[:4000]
        request = SyncRequest(
            db=self.db, runs_dir=self.runs_dir, topics_dir=self.topics_dir, topics=tuple(body.topic_ids or ()),
            extractor=body.extractor or self.extractor, no_recall=self.no_recall, force=body.force_recompile, tags=tags,
        )
        checked = check(request)
        with self._lock:
            wanted = set(checked.selected)
            for other in self._jobs.values():
                if other.active and wanted & set(other.topics):
                    raise JobRunning(other.job_id)
            running = self._running_in_dagster(wanted)
            if running:
                raise JobRunning(running)
            job = _Job(job_id, list(checked.selected), checked)
            self._jobs[job_id] = job
        self._queue.put(job)
        return job_id

    def _running_in_dagster(self, wanted: set[str]) -> str | None:
        """A sync job of another server on the same instance, still running, for any of these topics."""
        import dagster as dg

        if self._instance is None:
            return None
        records = self._instance.get_run_records(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING]),
            limit=100,
        )
        for r in records:
            tags = r.dagster_run.tags
            if SYNC_JOB_TAG in tags and wanted & set(tags.get(SYNC_TOPICS_TAG, "").split(",")):
                return tags[SYNC_JOB_TAG]
        return None

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            job.started_at = datetime.now(timezone.utc)
            try:
                job.outcome = run(job.checked, instance=self._instance)
            except Exception as exc:  # noqa: BLE001 (one line in the job's status; the log has the rest)
                log.exception("sync job %s failed", job.job_id)
                job.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            finally:
                job.finished_at = datetime.now(timezone.utc)
                job.done.set()
                from nexus_assets.vault.warm import trim_memory

                trim_memory()  # what the sync allocated goes back to the system, not into the server's size

    # Status

    def wait(self, job_id: str, timeout: float | None = None) -> bool:
        job = self._jobs.get(job_id)
        return job.done.wait(timeout) if job else True

    def status(self, job_id: str) -> SyncJob | None:
        import dagster as dg

        records = []
        if self._instance is not None:
            records = self._instance.get_run_records(filters=dg.RunsFilter(tags={SYNC_JOB_TAG: job_id}))
        job = self._jobs.get(job_id)
        if job is None and not records:
            return None
        statuses = [r.dagster_run.status for r in records]
        failed_runs = [r for r in records if r.dagster_run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)]
        finished = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
        error = None
        if job is not None and job.active:
            status = "running" if job.started_at else "queued"
        elif job is None and any(s not in finished for s in statuses):
            status = "running"
        else:
            problems = []
            if job is not None:
                if job.error:
                    problems.append(job.error)
                if job.outcome is not None:
                    for r in job.outcome.results:
                        problems += [f"{r['topic_id']}: {e}" for e in r.get("errors", [])]
                        problems += [f"{r['topic_id']}: check failed: {name}" for name, ok in r.get("checks", {}).items() if not ok]
                    if job.outcome.failed and not problems:
                        problems.append("the sync failed")
            problems += [f"Dagster run {r.dagster_run.run_id} {r.dagster_run.status.value}" for r in failed_runs]
            status = "failed" if problems else "succeeded"
            error = "; ".join(dict.fromkeys(problems)) or None
        topics = job.topics if job else sorted({t for r in records for t in r.dagster_run.tags.get(SYNC_TOPICS_TAG, "").split(",") if t})
        starts = [r.start_time for r in records if r.start_time]
        ends = [r.end_time for r in records if r.end_time]
        started_at = _iso(min(starts)) if starts else _iso(job.started_at if job else None)
        finished_at = None
        if status in ("succeeded", "failed"):
            finished_at = _iso(job.finished_at) if job and job.finished_at else (_iso(max(ends)) if ends else None)
        return SyncJob(
            sync_job_id=job_id, status=status, topics=topics, started_at=started_at, finished_at=finished_at, error=error,
            dagster_run_ids=[r.dagster_run.run_id for r in sorted(records, key=lambda r: r.create_timestamp)],
            results=job.outcome.results if job and job.outcome and not job.active else [],
        )
