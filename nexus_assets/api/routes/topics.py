from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from nexus_assets.services import queries
from nexus_assets.services.requests import BricksPage, bounds_of
from nexus_assets.api.deps import ConfigDep
from nexus_assets.schemas import BrickOut, Conflict, ManifestOut, MinState, Problem, TopicSummary

router = APIRouter(tags=["topics"])
TopicId = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$", description="a topic id")]
NOT_FOUND = {404: {"model": Problem, "description": "no vault, or no such topic"}}


@router.get("/v1/topics", response_model=list[TopicSummary], responses=NOT_FOUND)
def topics(config: ConfigDep) -> list[TopicSummary]:
    """As `nexus topics --json`."""
    return queries.topics(config.db)


@router.get("/v1/topics/{topic_id}/bricks", response_model=list[BrickOut], responses=NOT_FOUND)
def bricks(
    config: ConfigDep,
    topic_id: TopicId,
    include_superseded: bool = False,
    min_state: MinState = "IMPROVISE",
    limit: Annotated[int | None, Query(**bounds_of(BricksPage, "limit"))] = None,
    offset: Annotated[int, Query(**bounds_of(BricksPage, "offset"))] = 0,
) -> list[BrickOut]:
    """As `nexus bricks TOPIC --json` (`include_superseded`: as `--all`), in manifest order."""
    page = BricksPage(topic_id=topic_id, include_superseded=include_superseded, min_state=min_state, limit=limit, offset=offset)
    return queries.bricks(config.db, page)


@router.get("/v1/topics/{topic_id}/manifest", response_model=ManifestOut, responses=NOT_FOUND)
def manifest(config: ConfigDep, topic_id: TopicId) -> ManifestOut:
    """As `nexus manifest TOPIC --json`."""
    return queries.manifest(config.db, topic_id)


@router.get("/v1/topics/{topic_id}/conflicts", response_model=list[Conflict], responses=NOT_FOUND)
def conflicts(config: ConfigDep, topic_id: TopicId) -> list[Conflict]:
    """As `nexus conflicts TOPIC --json`: related bricks that state different values; a person decides."""
    return queries.conflicts(config.db, topic_id)[0]
