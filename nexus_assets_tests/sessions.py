"""Small Claude Code and Codex CLI sessions written by the tests (issue 42 item 4).

Their shapes follow real files (fixtures/sessions/PROVENANCE.md); every text in them is ours.
"""

from __future__ import annotations

import json
from pathlib import Path

SESSION = "5f0c1e2a-7d0e-4d7b-9b1e-2f6c1d9a0b11"
CWD = "/home/ana/code/nexus-sync"


def line(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def claude_event(kind: str, n: int, content, *, parent: int | None = None, sidechain: bool = False, **extra) -> dict:
    """A Claude Code user/assistant line; `n` makes its uuid and its timestamp (minutes)."""
    message = {"role": kind, "content": content}
    if kind == "assistant":
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": content}
    return {
        "parentUuid": None if parent is None else f"u-{parent}",
        "isSidechain": sidechain,
        "userType": "external",
        "cwd": CWD,
        "sessionId": SESSION,
        "version": "2.0.14",
        "gitBranch": "issue-42",
        "type": kind,
        "message": message,
        "uuid": f"u-{n}",
        "timestamp": f"2026-03-02T09:{n:02d}:00.000Z",
        **extra,
    }


def claude_session_lines() -> list[dict]:
    """A prompt, a reply with thinking, a tool call and its result, a subagent's exchange, and the
    bookkeeping lines Claude Code writes between them."""
    return [
        {"type": "summary", "summary": "Nightly sync window", "leafUuid": "u-6"},
        {"type": "file-history-snapshot", "messageId": "u-1", "snapshot": {"trackedFileBackups": {}}, "isSnapshotUpdate": False},
        claude_event("user", 1, "The nightly sync must finish before the backup starts."),
        claude_event(
            "assistant",
            2,
            [
                {"type": "thinking", "thinking": "The backup starts at three, so the sync needs a window.", "signature": "c2ln"},
                {"type": "text", "text": "Then the sync runs at two and the backup at three."},
            ],
            parent=1,
        ),
        claude_event(
            "assistant",
            3,
            [{"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "crontab -l", "description": "Show the sync schedule"}}],
            parent=2,
        ),
        claude_event("user", 4, [{"tool_use_id": "toolu_01", "type": "tool_result", "content": "0 2 * * * nexus sync", "is_error": False}], parent=3),
        claude_event("user", 5, "Check the sync logs for failures.", parent=4, sidechain=True, agentId="a1b2c3"),
        claude_event("assistant", 6, [{"type": "text", "text": "The sync logs show no failures this week."}], parent=5, sidechain=True, agentId="a1b2c3"),
        {"type": "mystery-event", "sessionId": SESSION, "timestamp": "2026-03-02T09:07:00.000Z"},
    ]


def codex_session_lines(session_id: str = "019c0000-1111-7222-8333-444455556666") -> list[dict]:
    def item(ts: int, payload: dict) -> dict:
        return {"timestamp": f"2026-03-03T10:00:{ts:02d}.000Z", "type": "response_item", "payload": payload}

    return [
        {
            "timestamp": "2026-03-03T10:00:00.000Z",
            "type": "session_meta",
            "payload": {
                "id": session_id,
                "timestamp": "2026-03-03T10:00:00.000Z",
                "cwd": "/home/ana/code/backup-tool",
                "originator": "codex_cli_rs",
                "cli_version": "0.60.1",
                "source": "cli",
                "git": {"branch": "main", "commit_hash": "abc1234"},
            },
        },
        item(1, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/home/ana/code/backup-tool</cwd>\n</environment_context>"}]}),
        item(2, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Make the backup skip the sync folder."}]}),
        {"timestamp": "2026-03-03T10:00:02.000Z", "type": "event_msg", "payload": {"type": "user_message", "message": "Make the backup skip the sync folder.", "kind": "plain"}},
        {"timestamp": "2026-03-03T10:00:02.000Z", "type": "turn_context", "payload": {"cwd": "/home/ana/code/backup-tool", "model": "gpt-5-codex"}},
        item(3, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Finding the backup excludes**"}], "content": None, "encrypted_content": "gAAAA"}),
        item(4, {"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"grep\",\"-n\",\"exclude\",\"backup.toml\"]}", "call_id": "call_1"}),
        item(5, {"type": "function_call_output", "call_id": "call_1", "output": "{\"output\":\"3:exclude = []\\n\",\"metadata\":{\"exit_code\":0}}"}),
        item(6, {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** Update File: backup.toml\n-exclude = []\n+exclude = [\"sync\"]\n*** End Patch", "call_id": "call_2", "status": "completed"}),
        item(7, {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Success. Updated the following files:\nM backup.toml"}),
        item(8, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The backup now skips the sync folder."}]}),
        {"timestamp": "2026-03-03T10:00:08.000Z", "type": "event_msg", "payload": {"type": "agent_message", "message": "The backup now skips the sync folder."}},
    ]


def write_lines(path: Path, lines: list[dict], *, tail: str = "") -> Path:
    """`lines` as JSON Lines, then `tail` as it is (e.g. half a line still being written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line(v) for v in lines) + tail, encoding="utf-8")
    return path


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)
