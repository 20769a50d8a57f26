"""The Nexus run format: `{"run_id", "status", "started_at"?, "messages": [{"role", "content", "timestamp"?}]}`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from nexus_assets.core.formats import FormatError, document_version
from nexus_assets.core.models import Node, Run
from nexus_assets.core.order import normalize_timestamp
from nexus_assets.core.validation import explain

ROLE_NODE_TYPES = {
    "user": "user_message",
    "human": "user_message",
    "assistant": "assistant_message",
    "system": "system_message",
    "developer": "system_message",
    "tool": "tool_message",
    "function": "tool_message",
}


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: StrictStr
    content: StrictStr
    timestamp: StrictStr | float | int | None = None


class _NexusRun(BaseModel):
    model_config = ConfigDict(extra="allow")

    run_id: StrictStr = Field(min_length=1, max_length=256)
    status: Literal["OPEN", "CLOSED"]
    started_at: StrictStr | float | int | None = None
    messages: list[_Message]


def nexus_run(document: Any) -> Run:
    try:
        parsed = _NexusRun.model_validate(document)
    except ValidationError as exc:
        raise FormatError(f"not a valid Nexus run: {explain(exc, whole='document')}") from None
    if any(ch in parsed.run_id for ch in "\x00\n\r\t"):
        raise FormatError("not a valid Nexus run: run_id contains control characters")
    nodes = tuple(
        Node(
            steps=("messages", i, "content"),
            node_type=ROLE_NODE_TYPES.get(m.role.lower(), "other"),
            timestamp=normalize_timestamp(m.timestamp),
            message_steps=("messages", i),
        )
        for i, m in enumerate(parsed.messages)
    )
    return Run(
        run_id=parsed.run_id,
        status=parsed.status,
        started_at=normalize_timestamp(parsed.started_at),
        format="nexus",
        document=document,
        nodes=nodes,
        version_id=document_version(document),
    )
