"""The Nexus run format: `{"run_id", "status", "started_at"?, "messages": [{"role", "content", "name"?, "timestamp"?}]}`.

`name` is who said the message (as in OpenAI chat messages): the source's speaker; without it the
role stands for the speaker.

A message that is not of that shape (`null`, a number, no `role`, non-string `content`) is
skipped with a warning; the rest of the run is kept (invariant 11).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from nexus_assets.core.models import Node, Run
from nexus_assets.core.validation import explain
from nexus_assets.ingest.formats import FormatError, document_version
from nexus_assets.core.timestamps import normalize_timestamp

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
    name: StrictStr | None = None
    timestamp: StrictStr | float | int | None = None


class _NexusRun(BaseModel):
    model_config = ConfigDict(extra="allow")

    run_id: StrictStr = Field(min_length=1, max_length=256)
    status: Literal["OPEN", "CLOSED"]
    started_at: StrictStr | float | int | None = None
    # Checked one by one below: a malformed message costs that message only.
    messages: list[Any]


def nexus_run(document: Any) -> Run:
    try:
        parsed = _NexusRun.model_validate(document)
    except ValidationError as exc:
        raise FormatError(f"not a valid Nexus run: {explain(exc, whole='document')}") from None
    if any(ch in parsed.run_id for ch in "\x00\n\r\t"):
        raise FormatError("not a valid Nexus run: run_id contains control characters")
    nodes: list[Node] = []
    warnings: list[str] = []
    for i, raw in enumerate(parsed.messages):
        try:
            m = _Message.model_validate(raw)
        except ValidationError as exc:
            warnings.append(f"messages[{i}] {_message_problem(raw, exc)}; skipped")
            continue
        nodes.append(
            Node(
                steps=("messages", i, "content"),
                node_type=ROLE_NODE_TYPES.get(m.role.lower(), "other"),
                timestamp=normalize_timestamp(m.timestamp),
                message_steps=("messages", i),
                speaker=m.name.strip() or None if m.name else None,
            )
        )
    return Run(
        run_id=parsed.run_id,
        status=parsed.status,
        started_at=normalize_timestamp(parsed.started_at),
        format="nexus",
        document=document,
        nodes=tuple(nodes),
        version_id=document_version(document),
        warnings=tuple(warnings),
    )


def _message_problem(message: Any, exc: ValidationError) -> str:
    if not isinstance(message, dict):
        return f"is {'null' if message is None else type(message).__name__}, not a message object"
    return f"is not a valid message: {explain(exc, whole='message')}"
