from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from nexus_assets.services import queries
from nexus_assets.api.deps import ConfigDep
from nexus_assets.core import bounds
from nexus_assets.schemas import AnswerOut, AskPreview, Problem, RecallOut

router = APIRouter(tags=["recall"])
Text = Annotated[str, Field(min_length=bounds.QUESTION_CHARS[0], max_length=bounds.QUESTION_CHARS[1])]
Topics = Annotated[list[Annotated[str, Field(max_length=bounds.TOPIC_ID_CHARS)]] | None, Field(max_length=bounds.TOPICS)]
ERRORS = {404: {"model": Problem}, 422: {"model": Problem}}
Speaker = Annotated[str, Field(min_length=1, max_length=200)] | None
Day = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="YYYY-MM-DD, inclusive")] | None


class RecallBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: Text
    topics: Topics = None
    k: Annotated[int, Field(ge=bounds.RECALL_K[0], le=bounds.RECALL_K[1])] = 5
    speaker: Speaker = None
    since: Day = None
    until: Day = None


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: Text
    topics: Topics = None
    user: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    agent: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    speaker: Speaker = None
    since: Day = None
    until: Day = None


@router.post("/v1/recall", response_model=RecallOut, responses=ERRORS)
def recall(body: RecallBody, config: ConfigDep) -> RecallOut:
    """As `nexus recall --json`; reads only. The server keeps the model and indexes warm."""
    return queries.recall(
        config.db, body.query, body.topics, k=body.k, env=config.env, speaker=body.speaker, since=body.since, until=body.until
    )


@router.post("/v1/ask", response_model=AnswerOut, responses=ERRORS)
def ask(body: AskBody, config: ConfigDep) -> AnswerOut:
    """As `nexus ask --json`: an answer whose every sentence cites bricks, or a refusal; always audited."""
    return queries.ask(
        config.db, body.question, body.topics, user=body.user or config.user, agent=body.agent or "nexus-api", env=config.env,
        speaker=body.speaker, since=body.since, until=body.until,
    )


@router.post("/v1/ask/preview", response_model=AskPreview, responses=ERRORS)
def ask_preview(body: AskBody, config: ConfigDep) -> AskPreview:
    """The bricks an answer would rest on; reads only, not audited."""
    return queries.ask_preview(
        config.db, body.question, body.topics, env=config.env, speaker=body.speaker, since=body.since, until=body.until
    )
