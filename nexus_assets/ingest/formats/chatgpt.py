"""ChatGPT exports: one conversation of `conversations.json` becomes one run.

A ChatGPT conversation is a tree (`mapping`): regenerating an answer or editing a prompt adds a
sibling branch, and `current_node` is the leaf the user last saw. Every branch is kept — a brick
may come from an answer the user later regenerated — but the current branch comes first, and
every node says whether it is on it (`current`) or not (`abandoned`).

Which text of a message is a node, and of which type, is decided by one table, `CONTENT_TYPES`
(the README's Inputs section shows the same table). A message addressed to a tool (`recipient`
other than `all`) is a `tool_call`. A mapping node or content type this reader does not know is
skipped with a warning; the rest of the conversation is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, StrictStr

from nexus_assets.core.models import Node, NodeType, Run
from nexus_assets.core.paths import Steps
from nexus_assets.ingest.formats import document_version
from nexus_assets.ingest.formats.conversations import (
    ConversationError,
    checked_conversation,
    conversation_label,
    export_status,
)
from nexus_assets.ingest.formats.nexus import ROLE_NODE_TYPES
from nexus_assets.core.timestamps import normalize_timestamp

ID_KEYS = ("conversation_id", "id")



@dataclass(frozen=True)
class ContentRule:
    """Where a content type's text is and what node type it gets, or why it is skipped."""

    # "parts": the string parts, and the `text` of dict parts (audio transcriptions); any other
    # name is a string field of `content`.
    fields: tuple[str, ...]
    # None: who spoke decides (author role, and `recipient` for tool calls).
    node_type: NodeType | None = None
    skipped: str | None = None


# The one content-type table (README, Inputs). Keep the two in step.
CONTENT_TYPES: dict[str, ContentRule] = {
    "text": ContentRule(("parts",)),
    "multimodal_text": ContentRule(("parts",)),  # images carry no text; audio_transcription parts do
    "code": ContentRule(("text",)),
    "execution_output": ContentRule(("text",), "tool_message"),
    "system_error": ContentRule(("text",), "tool_message"),
    "tether_quote": ContentRule(("text",), "tool_message"),
    "tether_browsing_display": ContentRule(("result", "summary"), "tool_message"),
    "thoughts": ContentRule((), skipped="the model's private reasoning, not said in the conversation"),
    "reasoning_recap": ContentRule((), skipped="a generated label of the reasoning ('Thought for 8s'), not said in the conversation"),
    "user_editable_context": ContentRule((), skipped="the user's custom instructions, copied into every conversation, not said in it"),
}


class _Conversation(BaseModel):
    model_config = ConfigDict(extra="allow")

    # Nodes are checked one by one: a node of an unknown shape costs that node only.
    mapping: dict[str, Any]
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


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _message_texts(content: dict, rule: ContentRule) -> Iterator[Steps]:
    """Steps below the message of every non-blank text the rule reads."""
    for name in rule.fields:
        if name != "parts":
            if _text(content.get(name)):
                yield ("content", name)
            continue
        parts = content.get("parts")
        for i, part in enumerate(parts if isinstance(parts, list) else ()):
            if _text(part):
                yield ("content", "parts", i)
            elif isinstance(part, dict) and _text(part.get("text")):
                yield ("content", "parts", i, "text")


def _message_problem(node: Any) -> str | None:
    """Why a mapping node is not one this reader understands, or None."""
    if not isinstance(node, dict):
        return f"is {'null' if node is None else type(node).__name__}, not an object"
    message = node.get("message")
    if message is None:
        return None
    if not isinstance(message, dict):
        return "'message' is not an object"
    author = message.get("author")
    if not isinstance(author, dict) or not isinstance(author.get("role"), str):
        return "'message.author.role' is missing or not a string"
    if not isinstance(message.get("content"), dict):
        return "'message.content' is missing or not an object"
    return None


def _author_type(message: dict) -> NodeType:
    node_type: NodeType = ROLE_NODE_TYPES.get(message["author"]["role"].lower(), "other")  # type: ignore[assignment]
    recipient = message.get("recipient")
    # An assistant message addressed to a tool (python, file_search, dalle, canmore.*) is a call.
    if node_type == "assistant_message" and isinstance(recipient, str) and recipient != "all":
        return "tool_call"
    return node_type


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
    warnings: list[str] = []
    for node_id in order:
        problem = _message_problem(mapping[node_id])
        if problem is not None:
            warnings.append(f"mapping node {node_id!r} {problem}; skipped")
            continue
        message = mapping[node_id].get("message")
        if message is None:
            continue
        content = message["content"]
        # Old exports have no content_type; their parts are plain text.
        kind = content.get("content_type", "text")
        rule = CONTENT_TYPES.get(kind) if isinstance(kind, str) else None
        if rule is None:
            warnings.append(f"mapping node {node_id!r}: content type {kind!r} is not one this version reads; skipped")
            continue
        node_type = rule.node_type or _author_type(message)
        timestamp = normalize_timestamp(message.get("create_time"))
        metadata = message.get("metadata")
        hidden = isinstance(metadata, dict) and metadata.get("is_visually_hidden_from_conversation") is True
        node_branch = "current" if node_id in on_branch or not branch else "abandoned"
        message_steps: Steps = ("mapping", node_id, "message")
        # The author's name where the export gives one (a tool's, a custom GPT's); else the role speaks.
        name = message["author"].get("name")
        speaker = name.strip() or None if isinstance(name, str) else None
        for below in _message_texts(content, rule):
            nodes.append(Node(message_steps + below, node_type, timestamp, message_steps, node_branch, hidden, speaker=speaker))

    return Run(
        run_id=run_id,
        status=export_status(conversation.get("update_time"), conversation.get("create_time"), open_after),
        started_at=normalize_timestamp(conversation.get("create_time")),
        format="chatgpt",
        document=conversation,
        nodes=tuple(nodes),
        version_id=document_version(conversation),
        warnings=tuple(warnings),
    )
