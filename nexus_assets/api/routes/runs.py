"""Runs pushed live (docs/agents.md, issue 42): what an agent says is written as a run file under the
runs folder first (`ingest/push.py`), so the files stay the source of truth, and its compile into
the topics that read it is queued on the same worker as `POST /v1/sync/initiate` (services/sync_worker.py):
done in this process in about a second (services/compile_push.py), in turn with syncs, never lost or doubled."""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path
from fastapi.responses import JSONResponse

from nexus_assets.api.deps import ConfigDep, JobsDep
from nexus_assets.schemas import Problem, RunMessages, RunPushed
from nexus_assets.services.pushing import RUN_ID_RULE, PushResult, append_messages, close_run, put_run

router = APIRouter(tags=["runs"])
RunId = Annotated[str, Path(
    min_length=1, description=f"the run's id (a pushed run's file is named after it): {RUN_ID_RULE}, else 422 naming the rule"
)]
REFUSED = {
    404: {"model": Problem, "description": "no such pushed run"},
    409: {"model": Problem, "description": "the run is CLOSED, or a message id it holds came again with other content"},
    413: {"model": Problem, "description": "the run file would outgrow the reader's limit"},
    422: {"model": Problem, "description": "not a run the reader would take whole"},
}


def _answer(pushed: PushResult, sync_job_id: str | None, status: int = 200) -> JSONResponse:
    body = RunPushed(run_id=pushed.run_id, status=pushed.status, messages=pushed.messages, added=pushed.added,
                     sync_job_id=sync_job_id)
    return JSONResponse(body.model_dump(), status_code=status)


@router.put("/v1/runs/{run_id}", response_model=RunPushed, status_code=200,
            responses={201: {"model": RunPushed, "description": "the run was created"}, **REFUSED})
def put(run_id: RunId, config: ConfigDep, jobs: JobsDep,
        run: Annotated[dict[str, Any], Body(description="a run in the Nexus format: {run_id?, status, started_at?, messages}")]):
    """Write a whole run (201 when new, 200 when replaced or the same); a CLOSED run never changes (409)."""
    pushed = put_run(FilePath(config.runs_dir), run_id, run, max_bytes=config.max_run_bytes)
    return _answer(pushed, jobs.push_run(pushed) if pushed.added or pushed.created else None,
                   201 if pushed.created else 200)


@router.post("/v1/runs/{run_id}/messages", response_model=RunPushed, responses=REFUSED)
def messages(run_id: RunId, body: RunMessages, config: ConfigDep, jobs: JobsDep):
    """Append messages to an OPEN run (created OPEN if new); a message id the run holds adds nothing."""
    pushed = append_messages(
        FilePath(config.runs_dir), run_id, [m.model_dump(exclude_none=True) for m in body.messages], max_bytes=config.max_run_bytes
    )
    return _answer(pushed, jobs.push_run(pushed) if pushed.added else None)


@router.post("/v1/runs/{run_id}/close", response_model=RunPushed, responses=REFUSED)
def close(run_id: RunId, config: ConfigDep, jobs: JobsDep):
    """The run becomes CLOSED (one-way), so its bricks may reach FORMING and, once sealed, FINAL."""
    before = close_run(FilePath(config.runs_dir), run_id)
    return _answer(before, jobs.push_run(before))
