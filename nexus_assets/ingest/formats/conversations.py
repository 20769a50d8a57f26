"""The rules the ChatGPT and Claude adapters share: conversation labels for error messages, run ids,
the shape check and the OPEN/CLOSED status of one export conversation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from nexus_assets.core.models import RunStatus
from nexus_assets.core.validation import explain
from nexus_assets.ingest.formats import FormatError
from nexus_assets.core.timestamps import normalize_timestamp

_MAX_RUN_ID = 256


class ConversationError(FormatError):
    """One conversation of an export is not readable; `detail` says why without the label."""

    def __init__(self, conversation: str, detail: str):
        super().__init__(f"conversation {conversation}: {detail}")
        self.conversation = conversation
        self.detail = detail


@dataclass(frozen=True)
class ConversationProblem:
    """A conversation in an export that was not imported. `index` is its position in the array."""

    index: int
    conversation: str | None
    problem: str


def conversation_label(conversation: Any, id_keys: tuple[str, ...], index: int | None) -> str:
    """How error messages name a conversation: its id, else its position and title."""
    if isinstance(conversation, dict):
        for key in id_keys:
            value = conversation.get(key)
            if isinstance(value, str) and value.strip():
                return repr(value)
    label = f"#{index}" if index is not None else "(no id)"
    title = (conversation.get("title") or conversation.get("name")) if isinstance(conversation, dict) else None
    if isinstance(title, str) and title.strip():
        label += f" ({title.strip()[:60]!r})"
    return label


def export_run_id(conversation: dict, id_keys: tuple[str, ...], label: str) -> str:
    """The first of `id_keys` holding a usable id; it becomes the run_id, so it must be a clean key."""
    for key in id_keys:
        value = conversation.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            continue
        if len(value) > _MAX_RUN_ID:
            raise ConversationError(label, f"{key!r} is {len(value)} characters, over {_MAX_RUN_ID}")
        if any(ch in value for ch in "\x00\n\r\t"):
            raise ConversationError(label, f"{key!r} contains control characters")
        return value
    wanted = " nor ".join(repr(k) for k in id_keys)
    raise ConversationError(label, f"has no id (neither {wanted} is a non-empty string)")


def normalize_open_after(open_after: str | None) -> str | None:
    if open_after is None:
        return None
    normalized = normalize_timestamp(open_after)
    if normalized is None:
        raise ValueError(f"open_after {open_after!r} is not an ISO 8601 timestamp")
    return normalized


def export_status(last_activity: Any, created: Any, open_after: str | None) -> RunStatus:
    """CLOSED, unless `open_after` is set and the conversation was active at or after it.

    Exports are snapshots of finished chats, hence CLOSED by default; a user who keeps chatting
    sets `open_after` so that recent conversations stay OPEN and their bricks IMPROVISE.
    """
    threshold = normalize_open_after(open_after)
    if threshold is None:
        return "CLOSED"
    # A conversation without a readable update time was last active when it was created.
    active = normalize_timestamp(last_activity) or normalize_timestamp(created)
    return "OPEN" if active is not None and active >= threshold else "CLOSED"


def checked_conversation(conversation: Any, shape: type[BaseModel], id_keys: tuple[str, ...], index: int | None) -> tuple[str, str]:
    """(label, run_id) of a conversation whose shape validates; ConversationError naming it otherwise."""
    label = conversation_label(conversation, id_keys, index)
    if not isinstance(conversation, dict):
        raise ConversationError(label, f"is {type(conversation).__name__}, not an object")
    run_id = export_run_id(conversation, id_keys, label)
    try:
        shape.model_validate(conversation)
    except ValidationError as exc:
        raise ConversationError(label, explain(exc, whole="conversation", limit=3)) from None
    return label, run_id
