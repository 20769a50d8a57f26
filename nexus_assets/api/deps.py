"""The typed dependencies every route states in its signature."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from nexus_assets.api.config import ApiConfig
from nexus_assets.services.sync_worker import SyncJobs


def get_config(request: Request) -> ApiConfig:
    return request.app.state.config


def get_jobs(request: Request) -> SyncJobs:
    return request.app.state.jobs


ConfigDep = Annotated[ApiConfig, Depends(get_config)]
JobsDep = Annotated[SyncJobs, Depends(get_jobs)]
