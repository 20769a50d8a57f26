from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import Field

from nexus_assets.services import queries
from nexus_assets.services.requests import DAY, AskRequest, RecallRequest
from nexus_assets.api.deps import ConfigDep
from nexus_assets.schemas import AnswerOut, AskPreview, Problem, RecallOut

router = APIRouter(tags=["recall"])
ERRORS = {404: {"model": Problem}, 422: {"model": Problem}}
# The API takes a day only as YYYY-MM-DD (the CLI also takes a timestamp): its one addition to the requests.
Day = Annotated[str, Field(pattern=DAY, description="YYYY-MM-DD, inclusive")] | None


# The bodies are the services' requests (services/requests.py: every bound is theirs), under the
# component names the OpenAPI document has always had.
class RecallBody(RecallRequest):
    since: Day = None
    until: Day = None


class AskBody(AskRequest):
    since: Day = None
    until: Day = None


@router.post("/v1/recall", response_model=RecallOut, responses=ERRORS)
def recall(body: RecallBody, config: ConfigDep) -> RecallOut:
    """As `nexus recall --json`; reads only. The server keeps the model and indexes warm."""
    return queries.recall(config.db, body, env=config.env)


@router.post("/v1/ask", response_model=AnswerOut, responses=ERRORS)
def ask(body: AskBody, config: ConfigDep) -> AnswerOut:
    """As `nexus ask --json`: an answer whose every sentence cites bricks, or a refusal; always audited."""
    return queries.ask(config.db, body, user=config.user, agent="nexus-api", env=config.env)


@router.post("/v1/ask/preview", response_model=AskPreview, responses=ERRORS)
def ask_preview(body: AskBody, config: ConfigDep) -> AskPreview:
    """The bricks an answer would rest on; reads only, not audited."""
    return queries.ask_preview(config.db, body, env=config.env)
