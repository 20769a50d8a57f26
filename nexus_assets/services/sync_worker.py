"""Sync jobs for a warm server (`nexus api`, `nexus mcp --allow-writes`): the sync service run on the Dagster instance the vault shares, one job
at a time on a worker thread (one DuckDB writer), each of its Dagster runs tagged with the job id.
A job's status is read from Dagster's run records; this process only adds what Dagster cannot
know (a job still waiting its turn, a sync that needed no run because nothing changed).

A push is a job on the same worker (`push`): its file compiled in this process (services/compile_push.py), so
pushes and syncs take turns in arrival order and none is lost or done twice. A push job that has
not started takes in later pushes (it reads the files when it starts, so it compiles their newest
content); once started, the next push queues a job of its own. At start, pushed files the vault
has not read (a server killed after acknowledging a push) are queued the same way."""

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
KEPT_JOBS = 1000  # finished jobs whose status this process keeps


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
    # A push job: the pushed files (in arrival order) to compile into `topics`; None for a sync.
    files: dict | None = None

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
        self._recover()

    def _recover(self) -> None:
        """Queue what a push left undone: acknowledged, then the server was stopped (kill -9 included)."""
        from pathlib import Path

        from nexus_assets.services.compile_push import catch_up
        from nexus_assets.services.sync import SyncInputError

        try:
            files, topics = catch_up(self.db, Path(self.runs_dir), Path(self.topics_dir))
        except SyncInputError:
            return  # a topic folder a sync cannot use: the next sync says why
        except Exception:  # noqa: BLE001 (the next sync reads them anyway)
            log.warning("looking for pushed files not yet compiled failed", exc_info=True)
            return
        if topics:
            self.push_files(files, topics)

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
                # A push queued or compiling is no reason to refuse a sync: they take turns.
                if other.active and other.files is None and wanted & set(other.topics):
                    raise JobRunning(other.job_id)
            running = self._running_in_dagster(wanted)
            if running:
                raise JobRunning(running)
            job = _Job(job_id, list(checked.selected), checked)
            self._add(job)
        self._queue.put(job)
        return job_id

    def push_run(self, pushed) -> str | None:
        """Queue the compile of a pushed run (services/pushing.py) into the ACTIVE topics that read
        it: the job's id, None when no topic reads it. The API's run routes and the MCP `remember`
        tool both end here, so a push compiles the same way whichever shell took it."""
        from nexus_assets.services.pushing import topics_to_sync

        topics = topics_to_sync(self.topics_dir, pushed)
        return self.push(pushed.path, topics) if topics else None

    def run_now(self, checked) -> SyncOutcome:
        """Run a checked sync on the worker, in turn with pushes, and wait for it: a shell that answers
        with the sync's results (the MCP `sync` tool) never writes beside a push compiling."""
        job = _Job(uuid.uuid4().hex, list(checked.selected), checked)
        with self._lock:
            self._add(job)
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise RuntimeError(job.error)
        return job.outcome

    def push(self, path, topics: list[str]) -> str:
        """Queue the compile of a pushed run file into the topics that read it; the job's id. A push
        job not yet started takes it in; none is ever refused."""
        return self.push_files([path], topics)

    def push_files(self, paths: list, topics: list[str]) -> str:
        with self._lock:
            waiting = next((j for j in reversed(self._jobs.values()) if j.files is not None and j.started_at is None), None)
            if waiting is not None:
                waiting.files.update(dict.fromkeys(paths))
                waiting.topics += [t for t in topics if t not in waiting.topics]
                return waiting.job_id
            job = _Job(uuid.uuid4().hex, list(topics), None, files=dict.fromkeys(paths))
            self._add(job)
        self._queue.put(job)
        return job.job_id

    def _add(self, job: _Job) -> None:
        """Keep the job (under the lock); the oldest finished ones beyond KEPT_JOBS are let go, so a
        server taking pushes all day does not grow (a sync job's status is then read from Dagster)."""
        self._jobs[job.job_id] = job
        if len(self._jobs) > KEPT_JOBS:
            for old in [j for j in self._jobs.values() if not j.active][: len(self._jobs) - KEPT_JOBS]:
                del self._jobs[old.job_id]

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
        from nexus_assets.services.compile_push import prepare

        try:
            prepare()  # on this thread, before any job: the first push then costs what the next does
        except Exception:  # noqa: BLE001 (a slower first push, not a broken server)
            log.warning("preparing the compile path failed; the first push loads it", exc_info=True)
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:  # a push arriving now queues a job of its own
                job.started_at = datetime.now(timezone.utc)
                files, topics = (list(job.files), list(job.topics)) if job.files is not None else (None, None)
            try:
                job.outcome = run(job.checked, instance=self._instance) if files is None else self._compile(job, files, topics)
            except Exception as exc:  # noqa: BLE001 (one line in the job's status; the log has the rest)
                log.exception("sync job %s failed", job.job_id)
                job.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            finally:
                job.finished_at = datetime.now(timezone.utc)
                job.done.set()
                from nexus_assets.vault.warm import trim_memory

                trim_memory()  # what the sync allocated goes back to the system, not into the server's size

    def _compile(self, job: _Job, files: list, topics: list[str]) -> SyncOutcome:
        """A push job: the fast path in this process, or a sync of its topics when it does not apply."""
        from pathlib import Path

        from nexus_assets.services.compile_push import NeedsSync, PushCompile, compile_push

        pushed = PushCompile(self.db, Path(self.runs_dir), Path(self.topics_dir), tuple(files), tuple(topics),
                             extractor=self.extractor, no_recall=self.no_recall)
        try:
            return compile_push(pushed, instance=self._instance, tags={SYNC_JOB_TAG: job.job_id})
        except NeedsSync as why:
            log.info("push job %s compiled by a sync: %s", job.job_id, why)
        request = SyncRequest(db=self.db, runs_dir=self.runs_dir, topics_dir=self.topics_dir, topics=tuple(topics),
                              extractor=self.extractor, no_recall=self.no_recall, tags={SYNC_JOB_TAG: job.job_id})
        return run(check(request), instance=self._instance)

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
