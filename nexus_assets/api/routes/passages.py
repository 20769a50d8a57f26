from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from nexus_assets.services import queries
from nexus_assets.services.requests import PassageLookup, bounds_of
from nexus_assets.api.deps import ConfigDep
from nexus_assets.schemas import PassageOut, Problem

router = APIRouter(tags=["passages"])
PassageId = Annotated[str, Path(
    pattern=r"^[0-9a-f]+$", **bounds_of(PassageLookup, "passage_id"),
    description="a passage id (as recall and ask give them), or a unique prefix of at least 6 characters",
)]
NOT_FOUND = {404: {"model": Problem, "description": "no vault, or no one passage with this id or prefix"},
             422: {"model": Problem}}


@router.get("/v1/passages/{passage_id}", response_model=PassageOut, responses=NOT_FOUND)
def passage(config: ConfigDep, passage_id: PassageId) -> PassageOut:
    """One passage of the record: its text, its source (address, speaker, time, the conversation's
    title), the passages around it in its message, whether the run file still holds it, and its
    viewer page; as `nexus trace PASSAGE_ID --json` without the whole message."""
    return queries.passage(config.db, PassageLookup(passage_id=passage_id), viewer_url=config.env.get("NEXUS_VIEWER_URL"))
