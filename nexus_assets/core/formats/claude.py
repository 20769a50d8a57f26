"""Claude exports: one conversation of `conversations.json` becomes one run.

A Claude message carries its text twice: structured `content` blocks and a flattened top-level
`text` (which also holds placeholders for artifacts the export cannot render). The blocks are the
source of truth; `text` is used only when a message has no text block (older exports), so one
sentence never becomes two nodes. Also nodes: tool results that carry text, the body of created
artifacts, and the text Claude extracted from attached files. Thinking blocks are the model's
private reasoning, not conversation text, and are skipped.
"""

from __future__ import annotations

from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, StrictStr

from nexus_assets.core.formats import document_version
from nexus_assets.core.formats.exports import (
    checked_conversation,
    export_status,
)
from nexus_assets.core.formats.nexus import ROLE_NODE_TYPES
from nexus_assets.core.models import Node, NodeType, Run
from nexus_assets.core.order import normalize_timestamp
from nexus_assets.core.paths import Steps

ID_KEYS = ("uuid",)


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    sender: StrictStr
    content: list[dict[str, Any]] | None = None
    attachments: list[dict[str, Any]] | None = None


class _Conversation(BaseModel):
    model_config = ConfigDict(extra="allow")

    chat_messages: list[_Message]


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _message_texts(message: dict, sender_type: NodeType) -> Iterator[tuple[Steps, NodeType]]:
    """(steps below the message, node type) for every non-blank text of one message."""
    from_blocks: list[tuple[Steps, NodeType]] = []
    has_text_block = False
    for j, block in enumerate(message.get("content") or ()):
        kind = block.get("type")
        if kind == "text" and _text(block.get("text")):
            has_text_block = True
            from_blocks.append((("content", j, "text"), sender_type))
        elif kind == "tool_use" and block.get("name") == "artifacts":
            tool_input = block.get("input")
            if isinstance(tool_input, dict) and _text(tool_input.get("content")):
                from_blocks.append((("content", j, "input", "content"), sender_type))
        elif kind == "tool_result":
            result = block.get("content")
            if _text(result):
                from_blocks.append((("content", j, "content"), "tool_message"))
            elif isinstance(result, list):
                for k, part in enumerate(result):
                    if isinstance(part, dict) and _text(part.get("text")):
                        from_blocks.append((("content", j, "content", k, "text"), "tool_message"))
    # The flattened `text` repeats the text blocks; it is the source only when they are absent.
    if not has_text_block and _text(message.get("text")):
        yield ("text",), sender_type
    yield from from_blocks
    for k, attachment in enumerate(message.get("attachments") or ()):
        if _text(attachment.get("extracted_content")):
            yield ("attachments", k, "extracted_content"), sender_type


def claude_run(conversation: dict, *, open_after: str | None = None, index: int | None = None) -> Run:
    """One Claude conversation as a run; `index` (its place in the export) only names it in errors."""
    label, run_id = checked_conversation(conversation, _Conversation, ID_KEYS, index)

    nodes: list[Node] = []
    for i, message in enumerate(conversation["chat_messages"]):
        sender_type: NodeType = ROLE_NODE_TYPES.get(message["sender"].lower(), "other")  # type: ignore[assignment]
        timestamp = normalize_timestamp(message.get("created_at"))
        message_steps: Steps = ("chat_messages", i)
        for below, node_type in _message_texts(message, sender_type):
            nodes.append(Node(message_steps + below, node_type, timestamp, message_steps))

    return Run(
        run_id=run_id,
        status=export_status(conversation.get("updated_at"), conversation.get("created_at"), open_after),
        started_at=normalize_timestamp(conversation.get("created_at")),
        format="claude",
        document=conversation,
        nodes=tuple(nodes),
        version_id=document_version(conversation),
    )
