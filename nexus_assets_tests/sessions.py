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


def claude_harness_lines() -> list[dict]:
    """A Claude Code session in the shapes real files show (fixtures/sessions/PROVENANCE.md, "Read
    as a person reads"): what the harness and the IDE write into the user's turn, answers given
    through AskUserQuestion and ExitPlanMode, a refused tool use with the person's comment, and
    tool output. Every text is ours."""
    ask = {"questions": [{"question": "Which retry count should the sync use?", "header": "Retries",
                          "options": [{"label": "Three", "description": "As today"}, {"label": "Five", "description": "More patient"}],
                          "multiSelect": False}]}
    plan = "# Plan: nightly sync retries\n\nThe sync retries three times, then records the failure in the vault."
    return [
        claude_event("user", 1, "<local-command-caveat>Caveat: The messages below were generated by the user while running local "
                     "commands. DO NOT respond to these messages or otherwise consider them in your response unless the user "
                     "explicitly asks you to.</local-command-caveat>", isMeta=True),
        claude_event("user", 2, "<command-name>/compact</command-name>\n            <command-message>compact</command-message>\n"
                     "            <command-args>and keep the sync notes</command-args>", parent=1),
        claude_event("user", 3, "<local-command-stdout>\u001b[2mCompacted (ctrl+o to see full summary)\u001b[22m</local-command-stdout>", parent=2),
        claude_event("user", 4, [
            {"type": "text", "text": "<ide_opened_file>The user opened the file /home/ana/code/nexus-sync/sync.py in the IDE. "
                                     "This may or may not be related to the current task.</ide_opened_file>"},
            {"type": "text", "text": "Keep the sync retry count at three, not five."},
        ], parent=3),
        claude_event("user", 5, "<ide_selection>The user selected the lines 3 to 4 from /home/ana/code/nexus-sync/sync.py:\n"
                     "RETRIES = 5\n\nThis may or may not be related to the current task.</ide_selection>\n\n"
                     "The sync must log every retry.", parent=4),
        claude_event("assistant", 6, [{"type": "tool_use", "id": "toolu_ask", "name": "AskUserQuestion", "input": ask}], parent=5),
        claude_event("user", 7, [{"type": "tool_result", "tool_use_id": "toolu_ask",
                                  "content": 'User has answered your questions: "Which retry count should the sync use?"="Three, '
                                             'and the sync waits a minute between tries". You can now continue with the user\'s '
                                             'answers in mind.'}], parent=6),
        claude_event("assistant", 8, [{"type": "tool_use", "id": "toolu_plan", "name": "ExitPlanMode",
                                       "input": {"allowedPrompts": [{"tool": "Bash", "prompt": "run the sync tests"}], "plan": plan}}], parent=7),
        claude_event("user", 9, [{"type": "tool_result", "tool_use_id": "toolu_plan",
                                  "content": "User has approved your plan. You can now start coding. Start with updating your todo "
                                             "list if applicable\n\n## Approved Plan:\n" + plan}], parent=8),
        claude_event("assistant", 10, [{"type": "tool_use", "id": "toolu_bash", "name": "Bash",
                                        "input": {"command": "pytest tests/test_sync.py", "description": "Run the sync tests"}}], parent=9),
        claude_event("user", 11, [{"type": "tool_result", "tool_use_id": "toolu_bash", "is_error": True,
                                   "content": "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. "
                                              "if it was a file edit, the new_string was NOT written to the file). To tell you how "
                                              "to proceed, the user said:\nrun only the sync unit tests, the network ones hang"}], parent=10),
        claude_event("assistant", 12, [{"type": "tool_use", "id": "toolu_ask2", "name": "AskUserQuestion", "input": ask}], parent=11),
        claude_event("user", 13, [{"type": "tool_result", "tool_use_id": "toolu_ask2", "is_error": True,
                                   "content": "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. "
                                              "if it was a file edit, the new_string was NOT written to the file). STOP what you are "
                                              "doing and wait for the user to tell you how to proceed."}], parent=12),
        claude_event("assistant", 14, [{"type": "tool_use", "id": "toolu_run", "name": "Bash", "input": {"command": "pytest -q tests/unit"}}], parent=13),
        claude_event("user", 15, [{"type": "tool_result", "tool_use_id": "toolu_run",
                                   "content": "tests/unit/test_sync.py::test_retry PASSED\nDeprecationWarning: the sync retry "
                                              "helper is deprecated, use the vault retry policy\n1 passed, 1 warning in 0.12s"}], parent=14),
        claude_event("user", 16, [{"type": "text", "text": "[Request interrupted by user for tool use]"}], parent=15),
        claude_event("user", 17, "<task-notification>\n<task-id>b0be39e</task-id>\n<status>completed</status>\n<summary>Background "
                     "command \"sync tests\" completed (exit code 0)</summary>\n</task-notification>\nRead the output file to "
                     "retrieve the result: /tmp/claude/tasks/b0be39e.output", parent=16),
        claude_event("user", 18, "<system-reminder>\nPostToolUse:Edit hook additional context: run the sync formatter.\n</system-reminder>", parent=17),
        claude_event("assistant", 19, [{"type": "text", "text": "Now I'll update the sync config."},
                                       {"type": "text", "text": "The sync retries three times because the vault lock times out after a minute."}], parent=18),
    ]


def codex_question_lines(session_id: str = "019c0000-2222-7333-8444-555566667777") -> list[dict]:
    """A Codex CLI rollout in plan mode: developer context, the injected environment, a prompt,
    `request_user_input` and the person's answer (shapes in PROVENANCE.md; the texts are ours)."""
    def item(ts: int, payload: dict) -> dict:
        return {"timestamp": f"2026-03-04T10:00:{ts:02d}.000Z", "type": "response_item", "payload": payload}

    question = {"questions": [{"header": "Retries", "id": "retries", "question": "How many times should the sync retry?",
                               "options": [{"label": "Three (Recommended)", "description": "As today."},
                                           {"label": "Five", "description": "More patient."}]}]}
    return [
        {"timestamp": "2026-03-04T10:00:00.000Z", "type": "session_meta",
         "payload": {"id": session_id, "timestamp": "2026-03-04T10:00:00.000Z", "cwd": "/home/ana/code/sync", "cli_version": "0.94.0"}},
        item(1, {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>\nFilesystem sandboxing: workspace-write.\n</permissions instructions>"}]}),
        item(2, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/home/ana/code/sync</cwd>\n</environment_context>"}]}),
        item(3, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Add retries to the sync job."}]}),
        item(4, {"type": "function_call", "name": "request_user_input", "arguments": json.dumps(question), "call_id": "call_q"}),
        item(5, {"type": "function_call_output", "call_id": "call_q", "output": json.dumps({"answers": {"retries": {"answers": ["Three (Recommended)"]}}})}),
        item(6, {"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"pytest\",\"-q\"]}", "call_id": "call_t"}),
        item(7, {"type": "function_call_output", "call_id": "call_t", "output": "3 passed in 0.40s"}),
    ]
