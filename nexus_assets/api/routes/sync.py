from __future__ import annotations

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from nexus_assets.api.deps import JobsDep
from nexus_assets.services.sync_worker import JobRunning
from nexus_assets.api.problems import problem
from nexus_assets.schemas import Problem, SyncAccepted, SyncInitiate, SyncJob

router = APIRouter(tags=["sync"])
JOB_ID = Path(pattern=r"^[0-9a-f]{32}$", description="the id `POST /v1/sync/initiate` answered")


@router.post(
    "/v1/sync/initiate", status_code=202, response_model=SyncAccepted,
    responses={409: {"model": Problem, "description": "a sync of the same topics is running; `sync_job_id` names it"},
               422: {"model": Problem}},
)
def initiate(body: SyncInitiate, jobs: JobsDep, request: Request):
    """Launch the same Dagster jobs as `nexus sync` (they show in the Dagster UI with their logs); answers at once."""
    try:
        job_id = jobs.initiate(body)
    except JobRunning as running:
        return problem(409, f"a sync of the same topics is running: {running.job_id}", sync_job_id=running.job_id)
    url = str(request.url_for("sync_status", sync_job_id=job_id).path)
    return JSONResponse(SyncAccepted(sync_job_id=job_id, status_url=url).model_dump(), status_code=202, headers={"Location": url})


@router.get("/v1/sync/{sync_job_id}", name="sync_status", response_model=SyncJob, responses={404: {"model": Problem}})
def status(jobs: JobsDep, sync_job_id: str = JOB_ID) -> SyncJob:
    """The job's status, read from Dagster's run records."""
    from nexus_assets.services.queries import NotFound

    found = jobs.status(sync_job_id)
    if found is None:
        raise NotFound(f"no sync job {sync_job_id!r}")
    return found
