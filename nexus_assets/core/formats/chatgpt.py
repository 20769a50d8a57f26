"""ChatGPT exports: one conversation of `conversations.json` becomes one run.

A ChatGPT conversation is a tree (`mapping`): regenerating an answer or editing a prompt adds a
sibling branch, and `current_node` is the leaf the user last saw. Every branch is kept — a brick
may come from an answer the user later regenerated — but the current branch comes first.

Text nodes are the string `parts` of a message, a `text` field inside a part (audio
transcriptions), and `content.text` (code, execution_output, tether_quote, system_error ...).
Image and other binary parts carry no text and are skipped, as are hidden custom-instruction
blocks (`user_editable_context`) and reasoning summaries, which are not conversation text.
"""

from __future__ import annotations

from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, StrictStr

from nexus_assets.core.formats import document_version
from nexus_assets.core.formats.exports import (
    checked_conversation,
    ConversationError,
    conversation_label,
    export_status,
)
from nexus_assets.core.formats.nexus import ROLE_NODE_TYPES
from nexus_assets.core.models import Node, Run
from nexus_assets.core.order import normalize_timestamp
from nexus_assets.core.paths import Steps

ID_KEYS = ("conversation_id", "id")


class _Author(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: StrictStr


class _Content(BaseModel):
    model_config = ConfigDict(extra="allow")

    parts: list[Any] | None = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    author: _Author
    content: _Content


class _MappingNode(BaseModel):
    model_config = ConfigDict(extra="allow")

    message: _Message | None = None
    parent: StrictStr | None = None


class _Conversation(BaseModel):
    model_config = ConfigDict(extra="allow")

    mapping: dict[str, _MappingNode]
    current_node: StrictStr | None = None


def _branch(mapping: dict, current: str | None, label: str) -> list[str]:
    if current is None:
        return []
    if current not in mapping:
        raise ConversationError(label, f"current_node {current!r} is not in mapping")
    chain: list[str] = []
    seen: set[str] = set()
    node_id: str | None = current
    while node_id is not None:
        if node_id in seen:
            raise ConversationError(label, f"parent links loop back to node {node_id!r}")
        if node_id not in mapping:
            raise ConversationError(label, f"node {chain[-1]!r} has parent {node_id!r}, which is not in mapping")
        seen.add(node_id)
        chain.append(node_id)
        node = mapping[node_id]
        parent = node.get("parent") if isinstance(node, dict) else None
        node_id = parent if isinstance(parent, str) else None
    chain.reverse()
    return chain


def current_branch(conversation: dict) -> list[str]:
    """Mapping node ids from the root to `current_node`: the branch the user last saw."""
    label = conversation_label(conversation, ID_KEYS, None)
    mapping = conversation.get("mapping") if isinstance(conversation, dict) else None
    if not isinstance(mapping, dict):
        raise ConversationError(label, "'mapping' is missing or not an object")
    current = conversation.get("current_node")
    if current is not None and not isinstance(current, str):
        raise ConversationError(label, "'current_node' is not a string")
    return _branch(mapping, current, label)


def _message_texts(message: dict) -> Iterator[tuple[Steps, str]]:
    """(steps below the message, text) for every non-blank text of one message."""
    content = message["content"]
    parts = content.get("parts")
    if isinstance(parts, list):
        for i, part in enumerate(parts):
            if isinstance(part, str):
                found: tuple[Steps, Any] = (("content", "parts", i), part)
            elif isinstance(part, dict):
                found = (("content", "parts", i, "text"), part.get("text"))
            else:
                continue
            if isinstance(found[1], str) and found[1].strip():
                yield found
    text = content.get("text")
    if isinstance(text, str) and text.strip():
        yield ("content", "text"), text


def chatgpt_run(conversation: dict, *, open_after: str | None = None, index: int | None = None) -> Run:
    """One ChatGPT conversation as a run; `index` (its place in the export) only names it in errors."""
    label, run_id = checked_conversation(conversation, _Conversation, ID_KEYS, index)

    # Validation only checks shape; everything below reads the untouched document, whose
    # paths and bytes are what bricks point at.
    mapping: dict[str, Any] = conversation["mapping"]
    branch = _branch(mapping, conversation.get("current_node"), label)
    on_branch = set(branch)
    order = branch + [node_id for node_id in mapping if node_id not in on_branch]

    nodes: list[Node] = []
    for node_id in order:
        message = mapping[node_id].get("message")
        if message is None:
            continue
        node_type = ROLE_NODE_TYPES.get(message["author"]["role"].lower(), "other")
        timestamp = normalize_timestamp(message.get("create_time"))
        message_steps: Steps = ("mapping", node_id, "message")
        for below, _text in _message_texts(message):
            nodes.append(Node(message_steps + below, node_type, timestamp, message_steps))

    return Run(
        run_id=run_id,
        status=export_status(conversation.get("update_time"), conversation.get("create_time"), open_after),
        started_at=normalize_timestamp(conversation.get("create_time")),
        format="chatgpt",
        document=conversation,
        nodes=tuple(nodes),
        version_id=document_version(conversation),
    )
