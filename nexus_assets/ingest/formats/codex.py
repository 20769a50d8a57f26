"""Codex CLI sessions: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`, one event a line.

Checked against real files (see nexus_assets_tests/fixtures/sessions/PROVENANCE.md): each line is
`{"timestamp", "type", "payload"}` with `type` session_meta (id, cwd, git), response_item (what
the model saw and said), event_msg (the UI's copy of the same turns, plus token counts),
turn_context and compacted. Rollouts older than those wrappers hold the items bare, after a first
line `{"id", "timestamp", "instructions"}`; both are read.

Only response_item lines become nodes, since event_msg repeats them: a `message`'s text blocks
(user → `user_message`, assistant → `assistant_message`, developer/system → `system_message`),
a function or custom tool call's arguments (`tool_call`), its output (`tool_message`), except the
output of `request_user_input`, which holds the person's answers (`user_message`). What Codex
itself puts in the user's turn (`<environment_context>`, AGENTS.md instructions) and developer
messages are hidden `system_message`s (`harness.py`). Reasoning summaries, like Claude's thinking,
are kept hidden; encrypted reasoning has no text. A session is a run (its session_meta id), OPEN; a subagent's rollout is
the `sidechain` branch of its own run.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterator

from nexus_assets.core.models import Node, NodeType, Run
from nexus_assets.core.paths import Steps
from nexus_assets.ingest.formats import FormatError, document_version, first_text
from nexus_assets.ingest.formats.harness import CODEX_PERSON_TOOLS, is_injected
from nexus_assets.core.timestamps import normalize_timestamp

LINE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
QUIET_LINE_TYPES = frozenset({"session_meta", "event_msg", "turn_context"})
ROLE_TYPES: dict[str, NodeType] = {
    "user": "user_message",
    "assistant": "assistant_message",
    "developer": "system_message",
    "system": "system_message",
}
# Item types with no text anyone wrote (a shell call's argv list is the tool's, shown by its output).
QUIET_ITEMS = frozenset({"local_shell_call", "ghost_snapshot", "image_generation_call", "other"})
# Context Codex writes into the user's turn, not the user (a title is never one of these).
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<permissions instructions>", "<user_shell_command>")
_OLD_ITEM_TYPES = frozenset({"message", "reasoning", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output", "local_shell_call", "web_search_call"})


def is_codex_event(line: Any) -> bool:
    if not isinstance(line, dict):
        return False
    if line.get("type") in LINE_TYPES and isinstance(line.get("payload"), dict):
        return True
    # The first line of an older rollout: the session itself, before the wrappers existed.
    return "type" not in line and isinstance(line.get("id"), str) and isinstance(line.get("timestamp"), str)


def _item(line: dict) -> dict | None:
    """The response item a line holds (wrapped, or bare in older rollouts), else None."""
    if line.get("type") == "response_item":
        payload = line.get("payload")
        return payload if isinstance(payload, dict) else None
    if "payload" not in line and line.get("type") in _OLD_ITEM_TYPES:
        return line
    return None


def codex_header(lines: list[Any]) -> dict[str, Any]:
    session_id = project = branch = started = first_prompt = None
    sidechain = False
    for n, line in enumerate(lines):
        if not isinstance(line, dict):
            continue
        meta = line.get("payload") if line.get("type") == "session_meta" else line if n == 0 and "type" not in line else None
        if isinstance(meta, dict) and session_id is None:
            session_id = meta.get("id") if first_text(meta.get("id")) else None
            project = meta.get("cwd") if first_text(meta.get("cwd")) else None
            git = meta.get("git")
            branch = git.get("branch") if isinstance(git, dict) and first_text(git.get("branch")) else None
            source = meta.get("source")
            sidechain = meta.get("thread_source") == "subagent" or (isinstance(source, dict) and "subagent" in source)
            started = meta.get("timestamp") if isinstance(meta.get("timestamp"), str) else None
        if started is None and isinstance(line.get("timestamp"), str):
            started = line["timestamp"]
        item = _item(line)
        if first_prompt is None and item is not None and item.get("type") == "message" and item.get("role") == "user":
            for block in item.get("content") or ():
                text = block.get("text") if isinstance(block, dict) else None
                if first_text(text) and not text.lstrip().startswith(_INJECTED) and not text.lstrip().startswith("<"):
                    first_prompt = text
                    break
    return {
        "session_id": session_id,
        "title": first_prompt,
        "project": project,
        "git_branch": branch,
        "started_at": started,
        "sidechain": sidechain,
    }


def codex_run(document: dict) -> Run:
    run_id = document.get("session_id")
    if not isinstance(run_id, str) or not run_id.strip():
        raise FormatError("a Codex CLI rollout with no session_meta id; nothing to read yet")
    branch = "sidechain" if document.get("sidechain") else "current"
    nodes: list[Node] = []
    warnings: list[str] = []
    unknown: Counter[str] = Counter()
    asked = _person_calls(document["lines"])
    for i, line in enumerate(document["lines"]):
        if not isinstance(line, dict):
            continue
        at: Steps = ("lines", i)
        stamp = normalize_timestamp(line.get("timestamp"))
        kind = line.get("type")
        if kind == "compacted":
            payload = line.get("payload")
            if isinstance(payload, dict) and first_text(payload.get("message")):
                # The model's summary of the turns before it: kept, hidden like reasoning.
                nodes.append(Node(at + ("payload", "message"), "system_message", stamp, at, branch, True))  # type: ignore[arg-type]
            continue
        item = _item(line)
        if item is None:
            if kind not in QUIET_LINE_TYPES and not (i == 0 and "type" not in line) and "record_type" not in line:
                unknown[str(kind)] += 1
            continue
        below = at + (("payload",) if item is not line else ())
        found = list(_item_texts(item, below, f"line {i + 1}", warnings, unknown, asked))
        nodes.extend(Node(steps, typ, stamp, at, branch, hidden) for steps, typ, hidden in found)  # type: ignore[arg-type]
    if unknown:
        listed = ", ".join(f"{k} ({n})" for k, n in sorted(unknown.items()))
        warnings.append(f"skipped {sum(unknown.values())} line(s) of event types this reader does not know: {listed}")
    return Run(
        run_id=run_id,
        status="OPEN",
        started_at=normalize_timestamp(document.get("started_at")),
        format="codex",
        document=document,
        nodes=tuple(nodes),
        version_id=document_version(document),
        warnings=tuple(warnings),
    )


def _person_calls(lines: list[Any]) -> set[str]:
    """call_ids of the calls that ask the person (`request_user_input`): their output is an answer."""
    calls = set()
    for line in lines:
        item = _item(line) if isinstance(line, dict) else None
        asks = item is not None and item.get("type") in ("function_call", "custom_tool_call") and item.get("name") in CODEX_PERSON_TOOLS
        if asks and isinstance(item.get("call_id"), str):
            calls.add(item["call_id"])
    return calls


def _message_type(node_type: NodeType, text: str) -> tuple[NodeType, bool]:
    """(node type, hidden): developer and system messages, and what Codex writes into the user's
    turn, are Codex's own context, not said in the conversation."""
    if node_type == "system_message":
        return node_type, True
    if node_type == "user_message" and is_injected(text):
        return "system_message", True
    return node_type, False


def _item_texts(
    item: dict, at: Steps, where: str, warnings: list[str], unknown: Counter, asked: set[str] = frozenset()  # type: ignore[assignment]
) -> Iterator[tuple[Steps, NodeType, bool]]:
    kind = item.get("type")
    if kind == "message":
        role = item.get("role")
        node_type = ROLE_TYPES.get(role if isinstance(role, str) else "", "other")
        content = item.get("content")
        if first_text(content):
            yield at + ("content",), *_message_type(node_type, content)
            return
        for j, block in enumerate(content if isinstance(content, list) else ()):
            text = block.get("text") if isinstance(block, dict) else None
            if first_text(text):
                yield at + ("content", j, "text"), *_message_type(node_type, text)
    elif kind == "reasoning":
        for key in ("summary", "content"):
            for j, part in enumerate(item.get(key) if isinstance(item.get(key), list) else ()):
                if isinstance(part, dict) and first_text(part.get("text")):
                    yield at + (key, j, "text"), "assistant_message", True
    elif kind in ("function_call", "custom_tool_call"):
        key = "arguments" if kind == "function_call" else "input"
        if first_text(item.get(key)):
            yield at + (key,), "tool_call", False
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        # The answers to request_user_input are the person's; any other output is the tool's.
        typ: NodeType = "user_message" if item.get("call_id") in asked else "tool_message"
        if first_text(output):
            yield at + ("output",), typ, False
        elif isinstance(output, dict) and first_text(output.get("content")):
            yield at + ("output", "content"), typ, False
        elif isinstance(output, list):
            for j, part in enumerate(output):
                if isinstance(part, dict) and first_text(part.get("text")):
                    yield at + ("output", j, "text"), typ, False
    elif kind == "web_search_call":
        action = item.get("action")
        if isinstance(action, dict) and first_text(action.get("query")):
            yield at + ("action", "query"), "tool_call", False
    elif kind not in QUIET_ITEMS:
        unknown[f"response_item/{kind}"] += 1
