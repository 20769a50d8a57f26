"""The typed requests of the read and answer services: each field carries its bounds, and the
shells take them from here (docs/architecture.md, "A request's bounds").

- The HTTP API's bodies are these models (`RecallBody` subclasses `RecallRequest`); its query
  and path parameters take their constraints with `bounds_of`.
- The MCP tools' arguments take their constraints with `bounds_of`, and each tool builds its
  request before calling the service.
- The CLI builds the request from its arguments (a value out of bounds is one line, exit 2);
  its parser shows and checks the same numbers, read from `core/bounds.py`, because building the
  parser must not load pydantic (`nexus topics` answers without it).

The numbers are in `core/bounds.py`; which field of which request takes which of them is here,
and only here. A test (nexus_assets_tests/services/test_requests.py) checks that every shell
meets the bounds these models declare.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any

import annotated_types
from pydantic import BaseModel, ConfigDict, Field

from nexus_assets.core import bounds
from nexus_assets.schemas import MinState

DAY = r"^\d{4}-\d{2}-\d{2}$"  # since/until as the API and the MCP tools take them (the CLI also takes a timestamp)

Question = Annotated[str, Field(min_length=bounds.QUESTION_CHARS[0], max_length=bounds.QUESTION_CHARS[1])]
TopicIds = Annotated[list[Annotated[str, Field(max_length=bounds.TOPIC_ID_CHARS)]] | None, Field(max_length=bounds.TOPICS)]
Name = Annotated[str, Field(min_length=1, max_length=bounds.NAME_CHARS)] | None  # a speaker, a user, an agent


class RecallRequest(BaseModel):
    """The k bricks that best answer `query` (`queries.recall`)."""

    model_config = ConfigDict(extra="forbid")
    query: Question
    topics: TopicIds = None
    k: Annotated[int, Field(ge=bounds.RECALL_K[0], le=bounds.RECALL_K[1])] = 5
    speaker: Name = None
    # A day, YYYY-MM-DD, inclusive; the service reads it (the CLI's `--since` may be a timestamp).
    since: str | None = None
    until: str | None = None


class AskRequest(BaseModel):
    """A cited answer to `question`, or the bricks it would rest on (`queries.ask`, `ask_preview`).
    `user`, `agent`: who asks and through what, when the caller names them (else the shell's own)."""

    model_config = ConfigDict(extra="forbid")
    question: Question
    topics: TopicIds = None
    user: Name = None
    agent: Name = None
    speaker: Name = None
    since: str | None = None
    until: str | None = None


class SearchRequest(BaseModel):
    """Full-text search for `text` (`queries.search`)."""

    model_config = ConfigDict(extra="forbid")
    text: Annotated[str, Field(min_length=bounds.SEARCH_CHARS[0], max_length=bounds.SEARCH_CHARS[1])]
    topics: Annotated[list[str] | None, Field(max_length=bounds.TOPICS)] = None
    limit: Annotated[int, Field(ge=bounds.SEARCH_LIMIT[0], le=bounds.SEARCH_LIMIT[1])] = 20


class BricksPage(BaseModel):
    """A page of a topic's bricks in manifest order (`queries.bricks`)."""

    model_config = ConfigDict(extra="forbid")
    topic_id: Annotated[str, Field(min_length=1, max_length=bounds.TOPIC_ID_CHARS)]
    include_superseded: bool = False
    min_state: MinState = "IMPROVISE"
    limit: Annotated[int | None, Field(ge=bounds.BRICKS_LIMIT[0], le=bounds.BRICKS_LIMIT[1])] = None
    offset: Annotated[int, Field(ge=bounds.BRICKS_OFFSET[0], le=bounds.BRICKS_OFFSET[1])] = 0


class BrickLookup(BaseModel):
    """One brick by its id or a unique prefix of it (`queries.brick`, `lineage`, `brick_detail`)."""

    model_config = ConfigDict(extra="forbid")
    brick_id: Annotated[str, Field(min_length=bounds.BRICK_ID_CHARS[0], max_length=bounds.BRICK_ID_CHARS[1])]


class PassageLookup(BaseModel):
    """One passage by its id or a unique prefix of it, bounded as a brick id is (`queries.passage`)."""

    model_config = ConfigDict(extra="forbid")
    passage_id: Annotated[str, Field(min_length=bounds.BRICK_ID_CHARS[0], max_length=bounds.BRICK_ID_CHARS[1])]


class StartSync(BaseModel):
    """Which topics a sync compiles (the MCP `sync` tool; the API's `SyncInitiate` takes the same number)."""

    model_config = ConfigDict(extra="forbid")
    topics: Annotated[list[str] | None, Field(max_length=bounds.SYNC_TOPICS)] = None


class RememberRequest(BaseModel):
    """Messages appended to an agent's own OPEN run (`services/pushing.append_messages`)."""

    model_config = ConfigDict(extra="forbid")
    run_id: Annotated[str, Field(min_length=bounds.RUN_ID_CHARS[0], max_length=bounds.RUN_ID_CHARS[1])]
    messages: Annotated[list, Field(min_length=bounds.MESSAGES[0], max_length=bounds.MESSAGES[1])]


class ForgetRequest(BaseModel):
    """A run, or every run read from a file, erased with a tombstone (`services/forgetting.py`)."""

    model_config = ConfigDict(extra="forbid")
    reason: Annotated[str, Field(min_length=1, max_length=bounds.REASON_CHARS)]
    run_id: Annotated[str, Field(min_length=bounds.FORGET_RUN_ID_CHARS[0], max_length=bounds.FORGET_RUN_ID_CHARS[1])] | None = None
    file: Annotated[str, Field(min_length=bounds.FILE_CHARS[0], max_length=bounds.FILE_CHARS[1])] | None = None


class TeachRequest(BaseModel):
    """A person's keep or drop of a brick, and why (`services/teaching.py`)."""

    model_config = ConfigDict(extra="forbid")
    brick_id: Annotated[str, Field(min_length=bounds.BRICK_ID_CHARS[0], max_length=bounds.BRICK_ID_CHARS[1])]
    reason: Annotated[str | None, Field(max_length=bounds.REASON_CHARS)] = None


# The constraints pydantic records for `Field(ge=, le=, min_length=, max_length=)`, by the keyword each came from.
_KEYWORDS = {annotated_types.Ge: "ge", annotated_types.Le: "le", annotated_types.MinLen: "min_length", annotated_types.MaxLen: "max_length"}


def bounds_of(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The bounds of one field of a request as keyword arguments of `Field`, `Query` or `Path`
    (`ge`, `le`, `min_length`, `max_length`): how a shell declares an argument the model bounds.
    A field that may be None (`Name`) has its bounds on the type it takes otherwise."""
    field = model.model_fields[name]
    found = _constraints(field.metadata)
    if not found:
        for member in typing.get_args(field.annotation):
            if typing.get_origin(member) is Annotated:
                found.update(_constraints(member.__metadata__))
    if not found:
        raise KeyError(f"{model.__name__}.{name} declares no bounds")
    return found


def _constraints(metadata) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in metadata:
        for constraint in getattr(item, "metadata", [item]):  # a `Field(...)` inside `Annotated` holds its own
            keyword = _KEYWORDS.get(type(constraint))
            if keyword is not None:
                found[keyword] = getattr(constraint, keyword)
    return found


def limits(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    """(lowest, highest) of a field: a number's range or a text's or a list's length."""
    found = bounds_of(model, name)
    return found.get("ge", found.get("min_length", 0)), found.get("le", found.get("max_length"))
