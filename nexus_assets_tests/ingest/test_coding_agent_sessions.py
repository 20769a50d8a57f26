"""Coding-agent sessions as sources (issue 42, docs/sessions.md): Claude Code and Codex CLI JSON Lines.

Every text a person or the model wrote is a node whose address names its line and block, and
resolving that address on the run document gives the text exactly (invariant 1); a bad line costs
that line (invariant 11); a session still being written is an OPEN run that grows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nexus_assets.core.fingerprint import node_checksum
from nexus_assets.core.models import IngestionError, Run
from nexus_assets.core.paths import resolve_string
from nexus_assets.ingest.runfiles import Limits, iter_run_file, scan_run_files
from nexus_assets_tests.sessions import (
    CWD,
    SESSION,
    append,
    claude_event,
    claude_harness_lines,
    claude_session_lines,
    codex_question_lines,
    codex_session_lines,
    line,
    write_lines,
)
from nexus_assets_tests.project import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "sessions"


def read(path: Path, limits: Limits | None = None) -> tuple[list[Run], list[IngestionError]]:
    items = list(iter_run_file(path, str(path), limits=limits))
    return [i for i in items if isinstance(i, Run)], [i for i in items if isinstance(i, IngestionError)]


def texts(run: Run) -> dict[str, tuple[str, str, str, bool]]:
    """path -> (text, node type, branch, hidden); each text read back through its address."""
    out = {}
    for node in run.nodes:
        steps, text = resolve_string(run.document, node.path)
        assert steps == node.steps
        out[node.path] = (text, node.node_type, node.branch, node.hidden)
    return out


def test_a_claude_code_session_is_one_open_run_whose_nodes_name_line_and_block(tmp_path: Path):
    path = write_lines(tmp_path / "projects" / "-home-ana-code-nexus-sync" / f"{SESSION}.jsonl", claude_session_lines())
    runs, errors = read(path)
    [run] = runs
    assert (run.run_id, run.status, run.format, run.started_at) == (SESSION, "OPEN", "claude-code", "2026-03-02T09:01:00.000000Z")
    assert run.document["title"] == "Nightly sync window"  # the summary line, before the first prompt
    assert (run.document["project"], run.document["git_branch"]) == (CWD, "issue-42")
    assert texts(run) == {
        "$['lines'][2]['message']['content']": ("The nightly sync must finish before the backup starts.", "user_message", "current", False),
        "$['lines'][3]['message']['content'][0]['thinking']": (
            "The backup starts at three, so the sync needs a window.", "assistant_message", "current", True),
        "$['lines'][3]['message']['content'][1]['text']": ("Then the sync runs at two and the backup at three.", "assistant_message", "current", False),
        "$['lines'][4]['message']['content'][0]['input']['command']": ("crontab -l", "tool_call", "current", False),
        "$['lines'][4]['message']['content'][0]['input']['description']": ("Show the sync schedule", "tool_call", "current", False),
        "$['lines'][5]['message']['content'][0]['content']": ("0 2 * * * nexus sync", "tool_message", "current", False),
        "$['lines'][6]['message']['content']": ("Check the sync logs for failures.", "user_message", "sidechain", False),
        "$['lines'][7]['message']['content'][0]['text']": ("The sync logs show no failures this week.", "assistant_message", "sidechain", False),
    }
    # Each node carries its own line's time.
    assert run.timestamp_of(run.nodes[1].steps) == "2026-03-02T09:02:00.000000Z"
    # The one unknown event type is skipped and counted, not an error per line.
    assert [e.problem for e in errors] == [
        "warning: skipped 1 line(s) of event types this reader does not know: mystery-event (1); the rest of the session was kept"
    ]


def test_unknown_blocks_are_counted_in_one_warning(tmp_path: Path):
    lines = [
        claude_event("assistant", n, [{"type": "hologram", "data": "x"}, {"type": "text", "text": f"Reply {n}."}, None])
        for n in range(1, 4)
    ]
    [run], errors = read(write_lines(tmp_path / "blocks.jsonl", lines))
    assert len(run.nodes) == 3
    assert [e.problem for e in errors] == [
        "warning: skipped 6 content block(s) of kinds this reader does not know: hologram (3), null (3); the rest of the session was kept"
    ]


def test_an_edited_prompt_forks_the_session_and_the_old_continuation_is_abandoned(tmp_path: Path):
    """Claude Code writes a rewound or edited prompt as a new child of an earlier line; a
    compaction restarts the chain and names its logical parent."""
    lines = [
        claude_event("user", 1, "Schedule the sync."),
        claude_event("assistant", 2, [{"type": "text", "text": "The sync runs at two."}], parent=1),
        claude_event("user", 3, "Make it three.", parent=2),
        claude_event("assistant", 4, [{"type": "text", "text": "The sync runs at three."}], parent=3),
        claude_event("user", 5, "Make it one instead.", parent=2),  # the prompt of line 3, edited
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted", "uuid": "u-6", "parentUuid": None,
         "logicalParentUuid": "u-5", "sessionId": SESSION, "timestamp": "2026-03-02T09:06:00.000Z"},
        claude_event("assistant", 7, [{"type": "text", "text": "The sync runs at one."}], parent=6),
    ]
    [run], errors = read(write_lines(tmp_path / "fork.jsonl", lines))
    assert not errors
    branches = {t[0]: t[2] for t in texts(run).values()}
    assert branches == {
        "Schedule the sync.": "current",
        "The sync runs at two.": "current",
        "Make it three.": "abandoned",
        "The sync runs at three.": "abandoned",
        "Make it one instead.": "current",
        "The sync runs at one.": "current",
    }


def test_a_compaction_whose_logical_parent_is_written_after_it_abandons_nothing(tmp_path: Path):
    """Claude Code 2.1.185 (PROVENANCE.md, `pv-case-review`): the boundary names as its logical
    parent a line written after it; what was said before the compaction is still the current path."""
    lines = [
        claude_event("user", 1, "Store the start time, not a countdown."),
        claude_event("assistant", 2, [{"type": "text", "text": "The start time is stored."}], parent=1),
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted", "uuid": "u-3", "parentUuid": None,
         "logicalParentUuid": "u-5", "sessionId": SESSION, "timestamp": "2026-03-02T09:03:00.000Z"},
        claude_event("user", 4, "This session is being continued from a previous conversation that ran out of context.",
                     parent=3, isCompactSummary=True),
        claude_event("user", 5, [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "ok"}], parent=4),
        claude_event("assistant", 6, [{"type": "text", "text": "The countdown is gone."}], parent=5),
    ]
    [run], errors = read(write_lines(tmp_path / "compacted.jsonl", lines))
    assert not errors
    assert {t[0]: t[2] for t in texts(run).values()} == {
        "Store the start time, not a countdown.": "current",
        "The start time is stored.": "current",
        "This session is being continued from a previous conversation that ran out of context.": "current",
        "ok": "current",
        "The countdown is gone.": "current",
    }


def test_parallel_tool_calls_are_on_the_current_path(tmp_path: Path):
    """Two calls in one turn (real Claude Code 2.1.39 files, `marot/spotter`): the first call's
    result hangs off that call and the chain goes on from the second; the person saw both."""
    lines = [
        claude_event("user", 1, "Check the sync config and its tests."),
        claude_event("assistant", 2, [{"type": "tool_use", "id": "toolu_a", "name": "Read", "input": {"file_path": "sync.toml"}}], parent=1),
        claude_event("assistant", 3, [{"type": "tool_use", "id": "toolu_b", "name": "Read", "input": {"file_path": "test_sync.py"}}], parent=2),
        claude_event("user", 4, [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "retries = 3"}], parent=2),
        claude_event("user", 5, [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "def test_retries(): ..."}], parent=3),
        claude_event("assistant", 6, [{"type": "text", "text": "The sync retries three times."}], parent=5),
    ]
    [run], errors = read(write_lines(tmp_path / "parallel.jsonl", lines))
    assert not errors and {t[2] for t in texts(run).values()} == {"current"}


def test_a_subagent_file_is_its_own_run_on_the_sidechain(tmp_path: Path):
    lines = [
        claude_event("user", 1, "List the sync jobs.", sidechain=True, agentId="a7b1"),
        claude_event("assistant", 2, [{"type": "text", "text": "There is one sync job."}], parent=1, sidechain=True, agentId="a7b1"),
    ]
    [run], errors = read(write_lines(tmp_path / "agent-a7b1.jsonl", lines))
    assert run.run_id == f"{SESSION}:agent-a7b1" and not errors
    assert {n.branch for n in run.nodes} == {"sidechain"}


def test_a_codex_rollout_keeps_what_was_said_once(tmp_path: Path):
    path = write_lines(tmp_path / "sessions" / "2026" / "03" / "03" / "rollout-2026-03-03T10-00-00-x.jsonl", codex_session_lines())
    [run], errors = read(path)
    assert not errors
    assert (run.run_id, run.status, run.format) == ("019c0000-1111-7222-8333-444455556666", "OPEN", "codex")
    assert run.document["title"] == "Make the backup skip the sync folder."
    assert (run.document["project"], run.document["git_branch"]) == ("/home/ana/code/backup-tool", "main")
    found = texts(run)
    kinds = {p: (t[1], t[3]) for p, t in found.items()}
    assert kinds == {
        "$['lines'][1]['payload']['content'][0]['text']": ("system_message", True),  # Codex's own context, hidden
        "$['lines'][2]['payload']['content'][0]['text']": ("user_message", False),
        "$['lines'][5]['payload']['summary'][0]['text']": ("assistant_message", True),  # reasoning, hidden
        "$['lines'][6]['payload']['arguments']": ("tool_call", False),
        "$['lines'][7]['payload']['output']": ("tool_message", False),
        "$['lines'][8]['payload']['input']": ("tool_call", False),
        "$['lines'][9]['payload']['output']": ("tool_message", False),
        "$['lines'][10]['payload']['content'][0]['text']": ("assistant_message", False),
    }
    # event_msg repeats the turns: the prompt and the answer are one node each.
    said = [t[0] for t in found.values()]
    assert said.count("Make the backup skip the sync folder.") == 1
    assert said.count("The backup now skips the sync folder.") == 1


def test_an_older_codex_rollout_without_wrappers_is_read(tmp_path: Path):
    lines = [
        {"id": "0c7d-old", "timestamp": "2025-06-01T08:00:00.000Z", "instructions": None},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Rename the backup job."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The backup job is renamed."}]},
    ]
    [run], errors = read(write_lines(tmp_path / "rollout-old.jsonl", lines))
    assert not errors and run.run_id == "0c7d-old"
    assert list(texts(run)) == ["$['lines'][2]['content'][0]['text']", "$['lines'][3]['content'][0]['text']"]


def test_a_malformed_line_is_one_error_naming_file_and_line_and_the_rest_compiles(tmp_path: Path):
    lines = claude_session_lines()
    body = "".join(line(v) for v in lines[:4]) + '{"type":"user","message": {oops\n' + "".join(line(v) for v in lines[4:])
    path = tmp_path / "broken.jsonl"
    path.write_text(body, encoding="utf-8")
    [run], errors = read(path)
    bad = [e for e in errors if "line 5" in e.problem]
    assert len(bad) == 1 and bad[0].file == str(path) and bad[0].conversation == SESSION
    assert "not valid JSON" in bad[0].problem and "the rest of the session was read" in bad[0].problem
    # Later lines keep their own line numbers: the bad line is a null in its place.
    assert run.document["lines"][4] is None
    assert "$['lines'][8]['message']['content'][0]['text']" in texts(run)


def test_a_half_written_last_line_is_no_error_and_the_session_grows(tmp_path: Path):
    lines = claude_session_lines()[:4]
    next_line = line(claude_event("user", 9, "Move the backup to four.", parent=2))
    path = write_lines(tmp_path / f"{SESSION}.jsonl", lines, tail=next_line[:25])
    [first], errors = read(path)
    assert not errors
    before = {n.path: node_checksum(t[0]) for n, t in zip(first.nodes, texts(first).values())}

    append(path, next_line[25:] + line(claude_event("assistant", 10, [{"type": "text", "text": "The backup runs at four now."}], parent=9)))
    [grown], errors = read(path)
    assert not errors and grown.run_id == first.run_id and grown.version_id != first.version_id
    after = {n.path: node_checksum(t[0]) for n, t in zip(grown.nodes, texts(grown).values())}
    # Earlier nodes keep their addresses and checksums; the appended lines are new nodes.
    assert {p: after[p] for p in before} == before
    assert set(after) - set(before) == {"$['lines'][4]['message']['content']", "$['lines'][5]['message']['content'][0]['text']"}


def test_format_is_detected_by_content_not_by_name(tmp_path: Path):
    session_as_json = write_lines(tmp_path / "runs" / "session.json", claude_session_lines())
    nexus_as_jsonl = tmp_path / "runs" / "run.jsonl"
    nexus_as_jsonl.write_text(json.dumps({"run_id": "r1", "status": "CLOSED", "messages": [{"role": "user", "content": "Hi."}]}) + "\n")
    other = write_lines(tmp_path / "runs" / "history.jsonl", [{"display": "ls", "timestamp": 1}, {"display": "pwd", "timestamp": 2}])
    assert {p.name for p in scan_run_files(tmp_path / "runs")} == {"session.json", "run.jsonl", "history.jsonl"}
    assert read(session_as_json)[0][0].format == "claude-code"
    assert read(nexus_as_jsonl)[0][0].format == "nexus"
    runs, errors = read(other)
    assert not runs and len(errors) == 1 and "not a Claude Code session" in errors[0].problem


def test_a_one_line_session_is_still_a_session(tmp_path: Path):
    [run], _ = read(write_lines(tmp_path / "one.jsonl", [claude_event("user", 1, "Only one line so far.")]))
    assert run.format == "claude-code" and len(run.nodes) == 1


def test_hostile_lines_cost_their_line_and_a_huge_file_is_refused(tmp_path: Path):
    lines = claude_session_lines()[:3]
    long_line = line(claude_event("user", 7, "x" * 5000))
    deep_line = '{"type":"user","message":' + "[" * 100 + "]" * 100 + "}\n"
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(line(v) for v in lines) + long_line + deep_line + line(lines[2]), encoding="utf-8")
    limits = Limits(max_line_bytes=4096, max_depth=64)
    [run], errors = read(path, limits)
    problems = sorted(e.problem for e in errors)
    assert any(p.startswith("line 4 is over the 4096-byte line limit (NEXUS_MAX_JSONL_LINE_BYTES)") for p in problems)
    assert any(p.startswith("line 5 JSON nesting is deeper than 64 levels") for p in problems)
    assert run.document["lines"][3] is None and run.document["lines"][4] is None
    assert "$['lines'][5]['message']['content']" in texts(run)

    runs, errors = read(path, Limits(max_session_bytes=2000))
    assert not runs and len(errors) == 1 and "NEXUS_MAX_SESSION_FILE_BYTES" in errors[0].problem
    runs, errors = read(path, Limits(max_session_lines=4))
    assert not runs and len(errors) == 1 and "more than 4 lines (NEXUS_MAX_SESSION_LINES)" in errors[0].problem


def test_a_flood_of_bad_lines_is_named_up_to_a_bound(tmp_path: Path):
    path = tmp_path / "flood.jsonl"
    path.write_text(line(claude_event("user", 1, "The one good line.")) + "not json\n" * 1500)
    [run], errors = read(path)
    assert len(run.nodes) == 1
    assert len(errors) == 1001 and errors[-1].problem.startswith("line 1501 and 500 more bad lines after line 1001")


def test_a_lone_surrogate_costs_its_line(tmp_path: Path):
    lines = claude_session_lines()[:3]
    path = tmp_path / "surrogate.jsonl"
    path.write_text("".join(line(v) for v in lines) + '{"type":"user","sessionId":"s","message":{"role":"user","content":"bad \\ud800"}}\n' + line(lines[2]))
    [run], errors = read(path)
    assert [e.problem.split(" holds")[0] for e in errors] == ["line 4"]
    assert len(run.nodes) == 2


@pytest.mark.parametrize(
    "name, run_id, expected",
    [
        ("claude-code-real-redacted.jsonl", "06090cb1-3e64-433a-bc7e-a621c0f596d2", {"user_message": 1, "assistant_message": 1}),
        ("codex-real-redacted.jsonl", "019e9625-802f-7e91-840a-cfe88d14117a", {"system_message": 2, "user_message": 1, "assistant_message": 1}),
    ],
)
def test_real_session_files_read_as_their_tool_wrote_them(name: str, run_id: str, expected: dict):
    """Real files (MIT, redacted by their publisher; see PROVENANCE.md): no error, no unknown
    event, and each prompt and answer a node exactly once."""
    [run], errors = read(FIXTURES / name)
    assert run.run_id == run_id and not errors
    counted: dict[str, int] = {}
    for _, node_type, _, _ in texts(run).values():
        counted[node_type] = counted.get(node_type, 0) + 1
    assert counted == expected


# Read as a person reads (issue 49 item 1, docs/sessions.md): the shapes of real files (PROVENANCE.md).


def test_claude_code_harness_text_is_hidden_and_what_the_person_says_through_a_tool_is_theirs(tmp_path: Path):
    [run], errors = read(write_lines(tmp_path / "harness.jsonl", claude_harness_lines()))
    assert not errors
    assert run.document["title"] == "Keep the sync retry count at three, not five."  # not the caveat, nor the command
    kinds = {p: (t[1], t[3]) for p, t in texts(run).items()}
    system, user, assistant = ("system_message", True), ("user_message", False), ("assistant_message", False)
    tool_call, tool_message = ("tool_call", False), ("tool_message", False)
    content = "['message']['content']"
    expected = {
        f"$['lines'][0]{content}": system,  # isMeta: the local-command caveat
        f"$['lines'][1]{content}": user,  # /compact with what the person typed after it (only that is quoted)
        f"$['lines'][2]{content}": system,  # what the command printed
        f"$['lines'][3]{content}[0]['text']": system,  # the IDE's opened file, a block of its own
        f"$['lines'][3]{content}[1]['text']": user,  # what the person typed beside it
        f"$['lines'][4]{content}": user,  # a string that holds both: the person's (the IDE span is never quoted)
        f"$['lines'][6]{content}[0]['content']": user,  # the answer to AskUserQuestion
        f"$['lines'][7]{content}[0]['input']['plan']": assistant,  # the plan proposed for approval
        f"$['lines'][7]{content}[0]['input']['allowedPrompts'][0]['tool']": tool_call,
        f"$['lines'][7]{content}[0]['input']['allowedPrompts'][0]['prompt']": tool_call,
        f"$['lines'][8]{content}[0]['content']": user,  # the plan approved
        f"$['lines'][9]{content}[0]['input']['command']": tool_call,
        f"$['lines'][9]{content}[0]['input']['description']": tool_call,
        f"$['lines'][10]{content}[0]['content']": user,  # a refused tool use, with the person's comment
        f"$['lines'][12]{content}[0]['content']": tool_message,  # refused without a word: the harness's notice
        f"$['lines'][13]{content}[0]['input']['command']": tool_call,
        f"$['lines'][14]{content}[0]['content']": tool_message,
        f"$['lines'][15]{content}[0]['text']": system,  # [Request interrupted by user for tool use]
        f"$['lines'][16]{content}": system,  # a background task's notice
        f"$['lines'][17]{content}": system,  # a hook's reminder
        f"$['lines'][18]{content}[0]['text']": assistant,
        f"$['lines'][18]{content}[1]['text']": assistant,
    }
    for n in (5, 11):  # AskUserQuestion's questions and options are the tool call
        expected.update({p: tool_call for p in kinds if p.startswith(f"$['lines'][{n}]")})
    assert kinds == expected


def test_a_codex_answer_to_request_user_input_is_the_persons_and_codex_context_is_hidden(tmp_path: Path):
    [run], errors = read(write_lines(tmp_path / "rollout-question.jsonl", codex_question_lines()))
    assert not errors and run.document["title"] == "Add retries to the sync job."
    kinds = {p: (t[1], t[3]) for p, t in texts(run).items()}
    assert kinds == {
        "$['lines'][1]['payload']['content'][0]['text']": ("system_message", True),  # developer: permissions
        "$['lines'][2]['payload']['content'][0]['text']": ("system_message", True),  # <environment_context>
        "$['lines'][3]['payload']['content'][0]['text']": ("user_message", False),
        "$['lines'][4]['payload']['arguments']": ("tool_call", False),  # the questions asked
        "$['lines'][5]['payload']['output']": ("user_message", False),  # the person's answers
        "$['lines'][6]['payload']['arguments']": ("tool_call", False),
        "$['lines'][7]['payload']['output']": ("tool_message", False),
    }


def test_the_person_spans_of_a_string_the_harness_wrote_into():
    from nexus_assets.ingest.formats.harness import person_spans

    def spans(text: str) -> list[str]:
        return [text[a:b] for a, b in person_spans(text)]

    # Claude Code 2.1.185 words it "Your questions have been answered"; 2.1.39 "User has answered your questions".
    answered = 'Your questions have been answered: "Backup format?"="One file per run", "Where?"="s3". You can now continue with these answers in mind.'
    assert spans(answered) == ["One file per run", "s3"]
    assert spans("User has approved your plan. You can now start coding.\n\n## Approved Plan:\n# Plan\nShip it.") == ["# Plan\nShip it."]
    assert spans("User has approved exiting plan mode. You can now proceed.") == []
    # A Codex request_user_input reply: the chosen labels, exactly as the JSON string holds them.
    assert spans('{"answers":{"fmt":{"answers":["One file","say \\"hi\\""]}}}') == ["One file", 'say \\"hi\\"']
    assert spans("<command-name>/review</command-name>\n<command-args>check the retries</command-args>")[1] == "check the retries"
    assert spans("Plain words.") == ["Plain words."]
    # Hostile strings cost time in proportion to their length (a line may hold 32 MiB).
    import time

    from nexus_assets.ingest.formats.harness import is_injected

    started = time.monotonic()
    for hostile in ("<command-name>/x</command-name>" + "<command-args>" * 20_000, "<system-reminder>a" * 20_000,
                    'User has answered your questions: ' + '"q"="a", ' * 20_000 + '"' * 5_000,
                    '{"answers": {"x": {"answers": [' + '"a", ' * 5_000 + '"b"' + " " * 5_000):
        person_spans(hostile)
        is_injected(hostile)
    assert time.monotonic() - started < 5


def _session_topic(target_node_types: list[str] | None = None, keywords: tuple[str, ...] = ("sync", "retry", "retries", "notes")):
    from nexus_assets.core.models import Topic

    policy: dict = {"scope_description": "How the nightly sync retries.", "required_keywords": list(keywords)}
    if target_node_types:
        policy["target_node_types"] = target_node_types
    return Topic.model_validate({"topic_id": "sync-retries", "display_name": "Sync retries", "state": "ACTIVE", "extraction_policy": policy})


def test_a_topic_reads_no_tool_output_or_harness_text_unless_it_names_them(tmp_path: Path):
    from nexus_assets.extract.embedded import extract_embedded
    from nexus_assets.gate.rules import validate_pointer

    [run], _ = read(write_lines(tmp_path / "harness.jsonl", claude_harness_lines()))
    kinds = {n.path: n.node_type for n in run.nodes}
    kept = extract_embedded(_session_topic(), run)
    quotes = [p["verbatim_quote"] for p in kept]
    assert "Keep the sync retry count at three, not five." in quotes
    assert "The sync must log every retry." in quotes  # after the IDE's selection, in the same string
    assert "run only the sync unit tests, the network ones hang" in quotes  # said while refusing a tool use
    assert "Three, and the sync waits a minute between tries" in quotes  # the answer, not the question nor the harness's words
    assert "and keep the sync notes" in quotes  # a slash command's arguments
    assert not any("RETRIES = 5" in q or "ide_selection" in q or "command" in q for q in quotes)  # the harness's spans
    assert not any("User has" in q or "You can now" in q or "doesn't want to proceed" in q for q in quotes)
    assert {kinds[p["json_path"]] for p in kept} <= {"user_message", "assistant_message"}
    # A topic that asks for tool output gets it, judged line by line as what it is, not as prose.
    warnings = extract_embedded(_session_topic(["tool_message"], ("deprecated",)), run)
    assert [p["verbatim_quote"] for p in warnings] == ["DeprecationWarning: the sync retry helper is deprecated, use the vault retry policy"]
    for p in kept + warnings:
        assert validate_pointer(p, topic_id="sync-retries", run=run).content == p["verbatim_quote"]
    # The gate refuses a pointer at tool output for a topic that did not name it.
    [tool_output] = [n.path for n in run.nodes if n.node_type == "tool_message" and "Deprecation" in (n.text or texts(run)[n.path][0])]
    from nexus_assets.ingest.scope import Scope

    refused = validate_pointer(
        {"topic_id": "sync-retries", "json_path": tool_output, "verbatim_quote": "1 passed, 1 warning in 0.12s"},
        topic_id="sync-retries", run=run, scope=Scope.of(_session_topic().extraction_policy, _session_topic()),
    )
    assert "tool calls and output are read only by a topic whose target_node_types name them" in str(refused)


# Through the whole product: `nexus sync --runs-dir ~/.claude/projects` as it is.

TOPIC = "sync-schedule"


@pytest.fixture()
def agent_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A ~/.claude/projects folder with one session, and a topics folder."""
    monkeypatch.setenv("NEXUS_NO_RECALL", "1")
    projects = tmp_path / ".claude" / "projects"
    write_lines(projects / "-home-ana-code-nexus-sync" / f"{SESSION}.jsonl", claude_session_lines()[:4])
    topics = tmp_path / "topics"
    topics.mkdir()
    (topics / f"{TOPIC}.yaml").write_text(
        f"topic_id: {TOPIC}\ndisplay_name: Sync schedule\nstate: ACTIVE\n"
        "extraction_policy:\n  scope_description: When the sync and the backup run.\n  required_keywords: [sync, backup]\n",
        encoding="utf-8",
    )
    return projects, topics


def test_sync_of_a_growing_session_keeps_earlier_bricks_and_traces_each_to_its_line(agent_home, tmp_path: Path, capsys):
    from nexus_assets_tests.cli_helpers import run_cli, run_json

    projects, topics = agent_home
    db = ["--db", str(tmp_path / "vault.duckdb")]
    sync = [*db, "sync", "--runs-dir", str(projects), "--topics-dir", str(topics)]
    run_json(capsys, *sync)
    first = {b["brick_id"]: b for b in run_json(capsys, *db, "bricks", TOPIC)}
    assert {b["content"] for b in first.values()} == {
        "The nightly sync must finish before the backup starts.",
        "Then the sync runs at two and the backup at three.",
    }
    for brick in first.values():
        [source] = brick["sources"]
        assert source["run_id"] == SESSION and source["json_path"].startswith("$['lines'][")
        assert brick["state"] == "IMPROVISE"  # the session is OPEN
    # The session is named by its title, project and date.
    code, out, _ = run_cli(capsys, *db, "bricks", TOPIC)
    assert code == 0 and "\u201cNightly sync window\u201d (nexus-sync, 2026-03-02)" in out

    # One more exchange, the second line still being written when the next sync runs.
    path = projects / "-home-ana-code-nexus-sync" / f"{SESSION}.jsonl"
    reply = line(claude_event("assistant", 11, [{"type": "text", "text": "The backup window moved, so the sync runs at one."}], parent=10))
    append(path, line(claude_event("user", 10, "The backup moved to two.", parent=3)) + reply[:40])
    run_json(capsys, *sync)
    append(path, reply[40:])
    run_json(capsys, *sync)
    second = {b["brick_id"]: b for b in run_json(capsys, *db, "bricks", TOPIC)}
    assert set(first) <= set(second)
    for brick_id, brick in first.items():
        assert second[brick_id]["sources"][0]["node_checksum"] == brick["sources"][0]["node_checksum"]
        assert second[brick_id]["sources"][0]["json_path"] == brick["sources"][0]["json_path"]
    new = {b["content"]: b["sources"][0]["json_path"] for k, b in second.items() if k not in first}
    assert new == {
        "The backup moved to two.": "$['lines'][4]['message']['content']",
        "The backup window moved, so the sync runs at one.": "$['lines'][5]['message']['content'][0]['text']",
    }
    assert run_json(capsys, *db, "errors") == []
    new_id = next(k for k, b in second.items() if b["content"] == "The backup moved to two.")
    [traced] = run_json(capsys, *db, "trace", new_id)["traces"]
    assert (traced["line"], traced["quote"], traced["current"]) == (5, "The backup moved to two.", True)
    code, _, err = run_cli(capsys, *db, "verify")
    assert code == 0, err


@pytest.mark.parametrize(
    "command",
    [
        "/init",  # as typed
        "/review 142",
        "<command-message>init is analyzing your codebase…</command-message>\n<command-name>/init</command-name>",
        [{"type": "text", "text": "<command-name>/compact</command-name>\n<command-args></command-args>"}],
    ],
)
def test_a_session_opened_by_a_slash_command_is_titled_by_the_first_real_prompt(tmp_path: Path, command):
    lines = [
        claude_event("user", 1, command),
        claude_event("user", 2, "<local-command-stdout>Compacted</local-command-stdout>", parent=1),
        claude_event("user", 3, "Please analyze this codebase and create a CLAUDE.md file.", parent=2, isMeta=True),
        claude_event("assistant", 4, [{"type": "text", "text": "I wrote CLAUDE.md."}], parent=3),
        claude_event("user", 5, "/usr/local/bin has two nexus binaries; keep the newer one.", parent=4),
    ]
    [run], _ = read(write_lines(tmp_path / f"{SESSION}.jsonl", lines))
    assert run.document["title"] == "/usr/local/bin has two nexus binaries; keep the newer one."


def test_a_sync_gives_tool_output_to_the_topic_that_asks_for_it_and_to_no_other(tmp_path: Path, capsys, monkeypatch):
    from nexus_assets_tests.cli_helpers import run_json

    monkeypatch.setenv("NEXUS_NO_RECALL", "1")
    runs = tmp_path / "projects" / "-home-ana-code-nexus-sync"
    write_lines(runs / f"{SESSION}.jsonl", claude_harness_lines())
    topics = tmp_path / "topics"
    topics.mkdir()
    (topics / "tool-warnings.yaml").write_text(
        "topic_id: tool-warnings\ndisplay_name: Warnings the tests printed\nstate: ACTIVE\nextraction_policy:\n"
        "  scope_description: Deprecation warnings the test runner printed.\n  target_node_types: [tool_message]\n"
        "  required_keywords: [warning, deprecated]\n",
        encoding="utf-8",
    )
    (topics / "sync-retries.yaml").write_text(
        "topic_id: sync-retries\ndisplay_name: Sync retries\nstate: ACTIVE\nextraction_policy:\n"
        "  scope_description: How many times the nightly sync retries and what it does between tries.\n"
        "  required_keywords: [sync, retry, retries, warning, deprecated]\n",
        encoding="utf-8",
    )
    db = ["--db", str(tmp_path / "vault.duckdb")]
    run_json(capsys, *db, "sync", "--runs-dir", str(tmp_path / "projects"), "--topics-dir", str(topics))
    warnings = run_json(capsys, *db, "bricks", "tool-warnings")
    assert warnings and {s["node_type"] for b in warnings for s in b["sources"]} == {"tool_message"}
    retries = run_json(capsys, *db, "bricks", "sync-retries")
    assert retries and {s["node_type"] for b in retries for s in b["sources"]} <= {"user_message", "assistant_message"}
    assert "Keep the sync retry count at three, not five." in {b["content"] for b in retries}
