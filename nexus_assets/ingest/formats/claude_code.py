"""Claude Code sessions: `~/.claude/projects/<project>/<session>.jsonl`, one event a line.

Checked against real files (see nexus_assets_tests/fixtures/sessions/PROVENANCE.md): `user` and
`assistant` lines carry `uuid`, `parentUuid`, `sessionId`, `timestamp`, `cwd`, `gitBranch`,
`isSidechain` and a `message` whose `content` is a string or blocks (text, thinking, tool_use,
tool_result, image). One assistant reply is often spread over several lines, one block each.
Other lines (summary, system, queue-operation, file-history-snapshot, attachment, progress,
last-prompt, ...) carry no conversation text.

Nodes, read as a person reads the session (docs/sessions.md, `harness.py`): a user's text is a
`user_message`, the model's text an `assistant_message`, a tool_use's input strings `tool_call`, a
tool_result's text `tool_message`; but what the person says through a tool (the result of
AskUserQuestion or ExitPlanMode, a refused tool use with their comment) is a `user_message`, the
plan ExitPlanMode proposes is an `assistant_message`, and what Claude Code or the IDE writes into
the user's turn (`isMeta` lines, compaction summaries, slash-command wrappers and output,
reminders, IDE context, "[Request interrupted by user]") is a hidden `system_message`. Thinking is
the model's private reasoning: a Claude export drops it; here it is kept (it is in the file) but
hidden, so it is compiled only by a topic that sets `include_hidden: true`.

Lines form a tree (`uuid`, `parentUuid`): a prompt edited or a reply retried forks it, and lines
off the path to the last message are the `abandoned` branch, as in a ChatGPT export.
A session is a run (`sessionId`), OPEN: nothing in the file says it ended. Subagent lines
(`isSidechain`) are the `sidechain` branch; a subagent's own file (every line a sidechain, named
by `agentId`) is a run of its own, `<sessionId>:agent-<agentId>`, since its lines are in another
file than the session's.
"""

from __future__ import annotations

import re

from collections import Counter
from typing import Any, Iterator

from nexus_assets.core.models import Node, NodeType, Run
from nexus_assets.core.paths import Steps
from nexus_assets.ingest.formats import FormatError, document_version, first_text
from nexus_assets.ingest.formats.harness import (
    PERSON_TOOLS,
    PLAN_KEY,
    REFUSED,
    REJECTED_WITH_COMMENT,
    is_injected,
)
from nexus_assets.core.timestamps import normalize_timestamp

# Event types that carry no conversation text, skipped without a word: seen in real files or in
# the readers other tools publish (PROVENANCE.md). Any other type is counted in one warning.
QUIET_TYPES = frozenset(
    {
        "summary",
        "system",
        "file-history-snapshot",
        "queue-operation",
        "attachment",
        "progress",
        "last-prompt",
        "custom-title",
        "ai-title",
        "agent-name",
        "permission-mode",
        "mode",
        "pr-link",
        "tag",
    }
)
MESSAGE_TYPES = {"user": "user_message", "assistant": "assistant_message"}
SKIPPED_BLOCKS = frozenset({"redacted_thinking", "image", "document", "server_tool_use", "web_search_tool_result"})
# Keys of a tool call's input that identify it rather than say something.
_TOOL_INPUT_IDS = frozenset({"id", "type", "tool_use_id"})
_MAX_TOOL_INPUT_LEAVES = 10_000
# A prompt that is a slash command: `/name` (letters, digits, `:` `-` `_` `.`; no second `/`, so a path is a prompt).
_SLASH_COMMAND = re.compile(r"\s*/[A-Za-z][\w:.-]*(?:\s|$)")


def is_claude_code_event(line: Any) -> bool:
    if not isinstance(line, dict):
        return False
    kind = line.get("type")
    if kind in MESSAGE_TYPES:
        return isinstance(line.get("message"), dict) and ("sessionId" in line or "session_id" in line or "uuid" in line)
    return isinstance(kind, str) and kind in QUIET_TYPES and any(k in line for k in ("sessionId", "session_id", "leafUuid", "messageId"))


def _session_of(line: dict) -> str | None:
    # `sessionId` in every file seen; a v2.1.239 line quoted in public notes has `session_id`.
    for key in ("sessionId", "session_id"):
        if first_text(line.get(key)):
            return line[key]
    return None


def claude_code_header(lines: list[Any]) -> dict[str, Any]:
    """Title, project, branch, start and run id of a session, from its lines (stable as it grows:
    everything but the title is taken from the first line that has it)."""
    session_id = agent_id = sidechain_uuid = project = branch = started = None
    first_prompt = summary = custom = None
    for line in lines:
        if not isinstance(line, dict):
            continue
        kind = line.get("type")
        if started is None and isinstance(line.get("timestamp"), str):
            started = line["timestamp"]
        if session_id is None:
            session_id = _session_of(line)
        if project is None and first_text(line.get("cwd")):
            project = line["cwd"]
        if branch is None and first_text(line.get("gitBranch")):
            branch = line["gitBranch"]
        if kind == "summary" and first_text(line.get("summary")):
            summary = line["summary"]
        elif kind == "custom-title" and first_text(line.get("customTitle")):
            custom = line["customTitle"]
        elif kind in MESSAGE_TYPES and agent_id is None and sidechain_uuid is None and first_prompt is None:
            # The first message decides whether this file is a subagent's own transcript.
            if line.get("isSidechain") is True:
                agent_id = line.get("agentId") if first_text(line.get("agentId")) else None
                sidechain_uuid = None if agent_id else (line.get("uuid") if first_text(line.get("uuid")) else "0")
        if first_prompt is None and kind == "user" and not line.get("isMeta") and not line.get("isCompactSummary"):
            first_prompt = _prompt_text(line.get("message"))
    run_id = session_id
    if session_id is not None and agent_id is not None:
        run_id = f"{session_id}:agent-{agent_id}"
    elif session_id is not None and sidechain_uuid is not None:
        run_id = f"{session_id}:sidechain-{sidechain_uuid}"
    return {
        "session_id": run_id,
        "title": custom or summary or first_prompt,
        "project": project,
        "git_branch": branch,
        "started_at": started,
    }


def _prompt_text(message: Any) -> str | None:
    """The first thing the person typed in a message: not a slash command, its output, IDE
    context or another text the harness writes (`harness.is_injected`), which no one would
    recognise as the session's title."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if first_text(content):
        texts = [content]
    elif isinstance(content, list):
        texts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and first_text(b.get("text"))]
    else:
        texts = []
    # Harness text, and slash commands (`/init`, `/review 12`, or wrapped in <command-name> tags) with
    # their output, are not what the session is about: the title is the first prompt a person wrote.
    return next((t for t in texts if not is_injected(t) and not t.lstrip().startswith("<") and not _SLASH_COMMAND.match(t)), None)


def claude_code_run(document: dict) -> Run:
    run_id = document.get("session_id")
    if not isinstance(run_id, str) or not run_id.strip():
        raise FormatError("a Claude Code session file with no sessionId on any line; nothing to read yet")
    nodes: list[Node] = []
    warnings: list[str] = []
    unknown: Counter[str] = Counter()
    unknown_blocks: Counter[str] = Counter()
    current = _current_path(document["lines"])
    tools = _tool_names(document["lines"])
    for i, line in enumerate(document["lines"]):
        if not isinstance(line, dict):
            continue  # a line that could not be read: named when the file was read
        kind = line.get("type")
        if kind not in MESSAGE_TYPES:
            if kind not in QUIET_TYPES:
                unknown[str(kind)] += 1
            continue
        message = line.get("message")
        if not isinstance(message, dict):
            warnings.append(f"line {i + 1}: a {kind} event whose 'message' is not an object; skipped")
            continue
        node_type: NodeType = MESSAGE_TYPES[kind]  # type: ignore[assignment]
        hidden = bool(line.get("isMeta") or line.get("isCompactSummary"))
        if hidden:
            node_type = "system_message"
        branch = "sidechain" if line.get("isSidechain") is True else "abandoned" if _off_path(line, current) else "current"
        stamp = normalize_timestamp(line.get("timestamp"))
        at: Steps = ("lines", i)
        for below, typ, hide in _message_texts(message, node_type, unknown_blocks, tools):
            nodes.append(Node(at + ("message",) + below, typ, stamp, at, branch, hidden or hide))  # type: ignore[arg-type]
    if unknown:
        listed = ", ".join(f"{k} ({n})" for k, n in sorted(unknown.items()))
        warnings.append(f"skipped {sum(unknown.values())} line(s) of event types this reader does not know: {listed}")
    if unknown_blocks:
        listed = ", ".join(f"{k} ({n})" for k, n in sorted(unknown_blocks.items()))
        warnings.append(f"skipped {sum(unknown_blocks.values())} content block(s) of kinds this reader does not know: {listed}")
    return Run(
        run_id=run_id,
        status="OPEN",
        started_at=normalize_timestamp(document.get("started_at")),
        format="claude-code",
        document=document,
        nodes=tuple(nodes),
        version_id=document_version(document),
        warnings=tuple(warnings),
    )


def _current_path(lines: list[Any]) -> set[str] | None:
    """The uuids on the path from the session's first line to its last message: what the user
    last saw. A prompt edited or a reply retried in Claude Code starts a new child of an earlier
    line; the old continuation is then abandoned, as a ChatGPT branch is (docs/sessions.md). A compaction
    restarts the chain (`parentUuid` null) and names the line it continues in `logicalParentUuid`;
    when that line is written only after the boundary (Claude Code 2.1.185, PROVENANCE.md), the
    compaction continues the line written just before it, so what came before is not abandoned.
    None when the lines carry no uuids (nothing to tell branches apart)."""
    parents: dict[str, str | None] = {}
    leaf = previous = None
    for line in lines:
        if not isinstance(line, dict) or not first_text(line.get("uuid")) or line.get("isSidechain") is True:
            continue
        parent = line.get("parentUuid")
        if not first_text(parent):
            logical = line.get("logicalParentUuid")
            parent = logical if first_text(logical) and logical in parents else previous if first_text(logical) else None
        parents[line["uuid"]] = parent if first_text(parent) else None
        previous = line["uuid"]
        if line.get("type") in MESSAGE_TYPES:
            leaf = line["uuid"]
    if leaf is None:
        return None
    path: set[str] = set()
    at: str | None = leaf
    while at is not None and at not in path:
        path.add(at)
        at = parents.get(at)
    # Parallel tool calls: each call, its progress and its result hang off the line before them,
    # and the chain goes on from the last one; what hangs off the path was seen, it is no abandoned
    # branch. Only a prompt starts one (a prompt edited, or the conversation rewound to before it).
    for line in lines:
        if isinstance(line, dict) and parents.get(line.get("uuid")) in path and not _prompt(line):
            path.add(line["uuid"])
    return path


def _prompt(line: dict) -> bool:
    """A user line that says something (not only tool results)."""
    message = line.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if line.get("type") != "user" or content is None:
        return False
    return not (isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _off_path(line: dict, current: set[str] | None) -> bool:
    uuid = line.get("uuid")
    return current is not None and isinstance(uuid, str) and uuid not in current


def _tool_names(lines: list[Any]) -> dict[str, str]:
    """tool_use id -> tool name, over the whole session: a result names its call only by id."""
    names: dict[str, str] = {}
    for line in lines:
        message = line.get("message") if isinstance(line, dict) and line.get("type") == "assistant" else None
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
                names[block["id"]] = block["name"]
    return names


def _said(sender: NodeType, text: str) -> tuple[NodeType, bool]:
    """(node type, hidden) of a text in a message from `sender`: a user's string that is all
    harness (a slash command's wrapper or output, a reminder, IDE context) is a hidden system text."""
    if sender == "user_message" and is_injected(text):
        return "system_message", True
    return sender, False


def _result_type(name: str | None, texts: list[str]) -> NodeType:
    """A tool_result is the tool's output, unless the person spoke through it: the answer to
    AskUserQuestion, the approval or refusal of a plan, a refused tool use with their comment."""
    if any(REJECTED_WITH_COMMENT in t for t in texts):
        return "user_message"
    if name in PERSON_TOOLS and not any(t.lstrip().startswith(REFUSED) for t in texts):
        return "user_message"
    return "tool_message"


def _message_texts(
    message: dict, sender: NodeType, unknown_blocks: Counter, tools: dict[str, str] | None = None
) -> Iterator[tuple[Steps, NodeType, bool]]:
    """(steps below `message`, node type, hidden) for every non-blank text of one message."""
    content = message.get("content")
    if first_text(content):
        yield ("content",), *_said(sender, content)
        return
    if not isinstance(content, list):
        return
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if first_text(block.get("text")):
                yield ("content", j, "text"), *_said(sender, block["text"])
        elif kind == "thinking":
            if first_text(block.get("thinking")):
                yield ("content", j, "thinking"), "assistant_message", True
        elif kind == "tool_use":
            plan = block.get("name") == "ExitPlanMode"
            for steps in _strings(block.get("input"), ("content", j, "input")):
                # The plan the agent proposes for approval is what it says, not a tool's argument.
                yield steps, "assistant_message" if plan and steps[3:] == (PLAN_KEY,) else "tool_call", False
        elif kind == "tool_result":
            result = block.get("content")
            name = (tools or {}).get(block.get("tool_use_id"))
            if first_text(result):
                yield ("content", j, "content"), _result_type(name, [result]), False
            elif isinstance(result, list):
                parts = [
                    (k, part["text"])
                    for k, part in enumerate(result)
                    if isinstance(part, dict) and part.get("type", "text") == "text" and first_text(part.get("text"))
                ]
                typ = _result_type(name, [t for _, t in parts])
                for k, _ in parts:
                    yield ("content", j, "content", k, "text"), typ, False
        elif kind not in SKIPPED_BLOCKS:
            # Counted, not one warning each: a new block kind recurs on every line of a session.
            unknown_blocks[kind if isinstance(kind, str) else "null" if block is None else "(no kind)"] += 1


def _strings(value: Any, steps: Steps) -> Iterator[Steps]:
    """The non-blank strings a tool call's input holds (its command, file text, prompt), in
    document order; keys that only identify the call are left out."""
    stack: list[tuple[Steps, Any]] = [(steps, value)]
    seen = 0
    while stack and seen < _MAX_TOOL_INPUT_LEAVES:
        at, node = stack.pop()
        if isinstance(node, str):
            if node.strip():
                seen += 1
                yield at
        elif isinstance(node, dict):
            stack.extend((at + (k,), v) for k, v in reversed(list(node.items())) if k not in _TOOL_INPUT_IDS)
        elif isinstance(node, list):
            stack.extend((at + (n,), v) for n, v in reversed(list(enumerate(node))))
