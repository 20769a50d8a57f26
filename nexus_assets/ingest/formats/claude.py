"""Claude exports: one conversation of `conversations.json` becomes one run.

A Claude message carries its text twice: structured `content` blocks and a flattened top-level
`text` (which also holds placeholders for artifacts the export cannot render). The blocks are the
source of truth; `text` is used only when a message has no text block (older exports), so one
sentence never becomes two nodes. Also nodes: tool results that carry text, the body of created
artifacts, and the text Claude extracted from attached files. A `tool_use` block's input is a
`tool_call`, a `tool_result` a `tool_message`. Thinking blocks are the model's private reasoning,
not conversation text, and are skipped. A `null` message or a block of a kind this reader does not
know is skipped with a warning; the rest of the conversation is kept.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict

from nexus_assets.core.models import Node, NodeType, Run
from nexus_assets.core.paths import Steps
from nexus_assets.ingest.formats import document_version
from nexus_assets.ingest.formats.conversations import (
    checked_conversation,
    export_status,
)
from nexus_assets.ingest.formats.nexus import ROLE_NODE_TYPES
from nexus_assets.core.timestamps import normalize_timestamp

ID_KEYS = ("uuid",)


# Block kinds that carry no conversation text, skipped on purpose (no warning).
SKIPPED_BLOCKS = {
    "thinking": "the model's private reasoning",
    "redacted_thinking": "the model's private reasoning, redacted",
    "image": "an image, no text",
    "document": "an attached document; its text is in the attachment's extracted_content",
    "voice_note": "audio; its transcript is in the text block",
    "token_budget": "a limit marker, no text",
}
# Keys of a tool call's input that identify or configure it rather than say something.
_TOOL_INPUT_IDS = {"id", "type", "title", "command", "language", "version_uuid", "uuid", "old_str"}


class _Conversation(BaseModel):
    model_config = ConfigDict(extra="allow")

    # Messages are checked one by one: a null or malformed entry costs that entry only.
    chat_messages: list[Any]


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return f"is {'null' if message is None else type(message).__name__}, not a message object"
    if not isinstance(message.get("sender"), str):
        return "has no 'sender' string"
    for key in ("content", "attachments"):
        if message.get(key) is not None and not isinstance(message[key], list):
            return f"'{key}' is not a list"
    return None


def _message_texts(
    message: dict, sender_type: NodeType, where: str, warnings: list[str]
) -> Iterator[tuple[Steps, NodeType]]:
    """(steps below the message, node type) for every non-blank text of one message."""
    from_blocks: list[tuple[Steps, NodeType]] = []
    has_text_block = False
    for j, block in enumerate(message.get("content") or ()):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if _text(block.get("text")):
                has_text_block = True
                from_blocks.append((("content", j, "text"), sender_type))
        elif kind == "tool_use":
            tool_input = block.get("input")
            for key, value in (tool_input.items() if isinstance(tool_input, dict) else ()):
                if key not in _TOOL_INPUT_IDS and _text(value):
                    from_blocks.append((("content", j, "input", key), "tool_call"))
        elif kind == "tool_result":
            result = block.get("content")
            if _text(result):
                from_blocks.append((("content", j, "content"), "tool_message"))
            elif isinstance(result, list):
                for k, part in enumerate(result):
                    if isinstance(part, dict) and _text(part.get("text")):
                        from_blocks.append((("content", j, "content", k, "text"), "tool_message"))
        elif kind not in SKIPPED_BLOCKS:
            shown = "a null block" if block is None else f"a block of kind {kind!r}" if isinstance(kind, str) else "a block without a kind"
            warnings.append(f"{where}.content[{j}] is {shown}, which this version does not read; skipped")
    # The flattened `text` repeats the text blocks; it is the source only when they are absent.
    if not has_text_block and _text(message.get("text")):
        yield ("text",), sender_type
    yield from from_blocks
    for k, attachment in enumerate(message.get("attachments") or ()):
        if isinstance(attachment, dict) and _text(attachment.get("extracted_content")):
            yield ("attachments", k, "extracted_content"), sender_type


def claude_run(conversation: dict, *, open_after: str | None = None, index: int | None = None) -> Run:
    """One Claude conversation as a run; `index` (its place in the export) only names it in errors."""
    label, run_id = checked_conversation(conversation, _Conversation, ID_KEYS, index)

    nodes: list[Node] = []
    warnings: list[str] = []
    for i, message in enumerate(conversation["chat_messages"]):
        problem = _message_problem(message)
        if problem is not None:
            warnings.append(f"chat_messages[{i}] {problem}; skipped")
            continue
        sender_type: NodeType = ROLE_NODE_TYPES.get(message["sender"].lower(), "other")  # type: ignore[assignment]
        timestamp = normalize_timestamp(message.get("created_at"))
        message_steps: Steps = ("chat_messages", i)
        for below, node_type in _message_texts(message, sender_type, f"chat_messages[{i}]", warnings):
            nodes.append(Node(message_steps + below, node_type, timestamp, message_steps))

    return Run(
        run_id=run_id,
        status=export_status(conversation.get("updated_at"), conversation.get("created_at"), open_after),
        started_at=normalize_timestamp(conversation.get("created_at")),
        format="claude",
        document=conversation,
        nodes=tuple(nodes),
        version_id=document_version(conversation),
        warnings=tuple(warnings),
    )


# Old Claude exports keep the model's private reasoning and its artifacts inline in the message
# text: `<antThinking>…</antThinking>` and `<antArtifact identifier=… type=… title=…>…</antArtifact>`.
# The node stays the whole string (addresses stay exact); these spans inside it are marked instead.
_TAG = re.compile(r"<(antThinking|antArtifact)\b[^>]*>|</(antThinking|antArtifact)\s*>")
THINKING, ARTIFACT = "thinking", "artifact"


def tagged_regions(text: str) -> list[tuple[int, int, str]]:
    """[start, end) of each <antThinking> (THINKING) and <antArtifact> (ARTIFACT) span of a Claude
    message, tags included; an unclosed tag runs to the end of the text, as Claude's own viewer
    shows it. Empty when the text holds no such tag (the common case costs one `find`)."""
    if "<ant" not in text:
        return []
    regions: list[tuple[int, int, str]] = []
    open_at, open_kind = -1, ""
    for m in _TAG.finditer(text):
        opening, closing = m.group(1), m.group(2)
        if opening and open_at < 0:
            open_at, open_kind = m.start(), opening
        elif closing and open_at >= 0 and closing == open_kind:
            regions.append((open_at, m.end(), THINKING if open_kind == "antThinking" else ARTIFACT))
            open_at = -1
    if open_at >= 0:
        regions.append((open_at, len(text), THINKING if open_kind == "antThinking" else ARTIFACT))
    return regions


def region_of(regions: list[tuple[int, int, str]], start: int, end: int) -> str | None:
    """The kind of region [start, end) overlaps (THINKING wins over ARTIFACT), else None."""
    kinds = {kind for s, e, kind in regions if s < end and start < e}
    return THINKING if THINKING in kinds else ARTIFACT if kinds else None
