"""Real exports as people have them (DESIGN §3, invariant 11): every message kept, nothing mistyped.

Fixtures are written here by hand in the shape real ChatGPT and Claude exports have.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

from nexus_assets.core.formats.chatgpt import CONTENT_TYPES, chatgpt_run
from nexus_assets.core.formats.claude import claude_run
from nexus_assets.core.formats.exports import ConversationProblem, iter_export
from nexus_assets.core.models import ExtractionPolicy, IngestionError, Run, Topic
from nexus_assets.core.paths import resolve_string
from nexus_assets.core.scope import in_scope_nodes
from nexus_assets.runfiles import iter_run_file
from nexus_assets.usecases.ingest import ingest_runs
from nexus_assets.vault.store import Vault

README = Path(__file__).resolve().parents[1] / "README.md"


def gpt_message(role: str, content: dict, *, recipient: str = "all", hidden: bool = False, t: float = 1717000000.0) -> dict:
    return {
        "id": "m",
        "author": {"role": role, "name": None, "metadata": {}},
        "create_time": t,
        "content": content,
        "status": "finished_successfully",
        "end_turn": None,
        "weight": 1.0,
        "metadata": {"is_visually_hidden_from_conversation": True} if hidden else {},
        "recipient": recipient,
    }


def gpt_conversation(cid: str, messages: list[tuple[str, dict | None]], **extra) -> dict:
    """A linear ChatGPT conversation: (node id, message) in order, a null-message root first."""
    mapping: dict = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
    parent = "root"
    for node_id, message in messages:
        mapping[node_id] = {"id": node_id, "message": message, "parent": parent, "children": []}
        mapping[parent]["children"].append(node_id)
        parent = node_id
    return {
        "title": f"conversation {cid}",
        "create_time": 1717000000.0,
        "update_time": 1717000100.0,
        "mapping": mapping,
        "current_node": parent,
        "conversation_id": cid,
        "id": cid,
        **extra,
    }


def claude_conversation(uuid: str, messages: list) -> dict:
    return {
        "uuid": uuid,
        "name": f"chat {uuid}",
        "created_at": "2024-06-01T10:00:00.000000+00:00",
        "updated_at": "2024-06-01T10:05:00.000000+00:00",
        "account": {"uuid": "acc"},
        "chat_messages": messages,
    }


def claude_message(sender: str, content: list, text: str = "") -> dict:
    return {
        "uuid": f"{sender}-{len(content)}",
        "text": text,
        "content": content,
        "sender": sender,
        "created_at": "2024-06-01T10:01:00.000000+00:00",
        "attachments": [],
        "files": [],
    }


def texts(run: Run) -> list[tuple[str, str]]:
    return [(n.node_type, resolve_string(run.document, n.path)[1]) for n in run.nodes]


def export_file(tmp_path: Path, name: str, conversations: list) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(conversations, ensure_ascii=False), encoding="utf-8")
    return path


# --- 1. a bad entry costs that entry only ---------------------------------------------------


def test_a_null_claude_message_costs_that_message_only(tmp_path: Path) -> None:
    conversation = claude_conversation(
        "c-null",
        [
            claude_message("human", [{"type": "text", "text": "Why does the sync drop edits offline?"}]),
            None,  # seen in real exports
            claude_message("assistant", [{"type": "text", "text": "Because the queue is flushed before the write commits."}]),
        ],
    )
    path = export_file(tmp_path, "conversations.json", [conversation])
    items = list(iter_run_file(path, "exports/conversations.json"))
    runs = [i for i in items if isinstance(i, Run)]
    warnings = [i for i in items if isinstance(i, IngestionError)]
    assert len(runs) == 1
    assert [t for _, t in texts(runs[0])] == [
        "Why does the sync drop edits offline?",
        "Because the queue is flushed before the write commits.",
    ]
    assert len(warnings) == 1
    (w,) = warnings
    assert w.file == "exports/conversations.json" and w.conversation == "c-null"
    assert "chat_messages[1]" in w.problem and "null" in w.problem
    assert "_Message" not in w.problem and "_Conversation" not in w.problem


def test_an_unknown_claude_block_kind_costs_that_block_only() -> None:
    run = claude_run(
        claude_conversation(
            "c-block",
            [
                claude_message(
                    "assistant",
                    [
                        {"type": "hologram", "payload": "?"},
                        {"type": "thinking", "thinking": "private"},
                        {"type": "text", "text": "The manifest hash covers the ordered list."},
                    ],
                )
            ],
        )
    )
    assert texts(run) == [("assistant_message", "The manifest hash covers the ordered list.")]
    assert len(run.warnings) == 1 and "chat_messages[0].content[0]" in run.warnings[0] and "'hologram'" in run.warnings[0]


def test_an_unknown_chatgpt_node_shape_costs_that_node_only() -> None:
    conversation = gpt_conversation(
        "g-shape",
        [
            ("u1", gpt_message("user", {"content_type": "text", "parts": ["Which key do we merge on?"]})),
            ("a1", gpt_message("assistant", {"content_type": "text", "parts": ["Merge on the natural key."]})),
        ],
    )
    conversation["mapping"]["a1"]["message"]["author"] = "assistant"  # not an object
    conversation["mapping"]["orphan"] = "not a node"
    run = chatgpt_run(conversation)
    assert texts(run) == [("user_message", "Which key do we merge on?")]
    assert len(run.warnings) == 2
    assert any("'a1'" in w and "author.role" in w for w in run.warnings)
    assert any("'orphan'" in w for w in run.warnings)


def test_errors_never_name_internal_classes(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"run_id": "r", "status": "OPEN", "messages": "none"}))
    (tmp_path / "entries.json").write_text(json.dumps({"run_id": "e", "status": "OPEN", "messages": [None, {"role": 1}]}))
    (error,) = list(iter_run_file(tmp_path / "bad.json", "bad.json"))
    _, *warnings = list(iter_run_file(tmp_path / "entries.json", "entries.json"))
    assert isinstance(error, IngestionError) and "messages" in error.problem
    assert [w.problem.split()[1] for w in warnings] == ["messages[0]", "messages[1]"]
    for problem in [error.problem, *(w.problem for w in warnings)]:
        assert not re.search(r"\b_[A-Z]\w+", problem), problem


def test_a_malformed_nexus_message_costs_that_message_only(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "Keep the vault append-only."},
        None,
        {"role": "user", "content": 42},
        {"content": "a message without a role"},
        {"role": "assistant", "content": "Agreed: nothing stored is ever deleted.", "timestamp": "2025-01-02T03:04:05Z"},
    ]
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r-entries", "status": "CLOSED", "messages": messages}))
    run, *warnings = list(iter_run_file(tmp_path / "run.json", "runs/run.json"))
    assert isinstance(run, Run) and run.run_id == "r-entries"
    assert [n.path for n in run.nodes] == ["$['messages'][0]['content']", "$['messages'][4]['content']"]
    assert run.nodes[1].timestamp == "2025-01-02T03:04:05.000000Z"
    assert all(isinstance(w, IngestionError) and w.conversation == "r-entries" and w.file == "runs/run.json" for w in warnings)
    problems = [w.problem for w in warnings]
    assert len(problems) == 3
    assert problems[0].startswith("warning: messages[1] is null, not a message object")
    assert "messages[2]" in problems[1] and "content" in problems[1]
    assert "messages[3]" in problems[2] and "role" in problems[2]
    assert all(p.endswith("the rest of the conversation was kept") for p in problems)


# --- 2. every readable text is reachable: the content-type table ----------------------------


def every_content_type() -> dict:
    return gpt_conversation(
        "g-types",
        [
            ("text", gpt_message("user", {"content_type": "text", "parts": ["Plot the retries per hour."]})),
            (
                "mm",
                gpt_message(
                    "user",
                    {
                        "content_type": "multimodal_text",
                        "parts": [
                            {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-1", "width": 10},
                            {"content_type": "audio_transcription", "text": "und bitte auf Deutsch 🙂", "direction": "in"},
                            {"content_type": "audio_asset_pointer", "asset_pointer": "sediment://file-2"},
                            "Here is the chart from the UI.",
                        ],
                    },
                ),
            ),
            ("ctx", gpt_message("user", {"content_type": "user_editable_context", "user_profile": "I am a data engineer.", "user_instructions": "Be brief."}, hidden=False)),
            ("thoughts", gpt_message("assistant", {"content_type": "thoughts", "thoughts": [{"summary": "s", "content": "thinking"}]})),
            ("recap", gpt_message("assistant", {"content_type": "reasoning_recap", "content": "Thought for 8 seconds"})),
            ("code", gpt_message("assistant", {"content_type": "code", "language": "unknown", "text": "df.groupby('hour').size()"}, recipient="python")),
            ("exec", gpt_message("tool", {"content_type": "execution_output", "text": "hour\n2    47"})),
            ("err", gpt_message("tool", {"content_type": "system_error", "name": "Exception", "text": "KeyError: 'hour'"})),
            ("quote", gpt_message("tool", {"content_type": "tether_quote", "url": "https://example.org/k", "domain": "example.org", "text": "Idempotent producers dedupe retries.", "title": "Kafka docs"})),
            ("browse", gpt_message("tool", {"content_type": "tether_browsing_display", "result": "# 【0†Kafka exactly-once†example.org】\nIdempotence is on by default.", "summary": None, "assets": None})),
            ("answer", gpt_message("assistant", {"content_type": "text", "parts": ["47 of 50 retries fall in the 02:00 hour."]})),
        ],
    )


def test_every_content_type_of_the_table() -> None:
    run = chatgpt_run(every_content_type())
    by_message = {n.steps[1]: [] for n in run.nodes}
    for node in run.nodes:
        by_message[node.steps[1]].append((node.node_type, resolve_string(run.document, node.path)[1]))
    assert by_message == {
        "text": [("user_message", "Plot the retries per hour.")],
        "mm": [("user_message", "und bitte auf Deutsch 🙂"), ("user_message", "Here is the chart from the UI.")],
        "code": [("tool_call", "df.groupby('hour').size()")],
        "exec": [("tool_message", "hour\n2    47")],
        "err": [("tool_message", "KeyError: 'hour'")],
        "quote": [("tool_message", "Idempotent producers dedupe retries.")],
        "browse": [("tool_message", "# 【0†Kafka exactly-once†example.org】\nIdempotence is on by default.")],
        "answer": [("assistant_message", "47 of 50 retries fall in the 02:00 hour.")],
    }
    assert run.warnings == ()  # skipped on purpose is not a warning
    skipped = {k for k, rule in CONTENT_TYPES.items() if rule.skipped}
    assert skipped == {"thoughts", "reasoning_recap", "user_editable_context"}


def test_an_unknown_content_type_is_skipped_and_said() -> None:
    run = chatgpt_run(
        gpt_conversation(
            "g-new",
            [
                ("w", gpt_message("assistant", {"content_type": "super_widget", "widget": {"x": 1}})),
                ("a", gpt_message("assistant", {"content_type": "text", "parts": ["Still here."]})),
            ],
        )
    )
    assert texts(run) == [("assistant_message", "Still here.")]
    assert run.warnings == ("mapping node 'w': content type 'super_widget' is not one this version reads; skipped",)


def test_the_readme_shows_the_same_table() -> None:
    readme = README.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", readme, re.MULTILINE))
    for kind, rule in CONTENT_TYPES.items():
        assert kind in rows, f"README lacks a row for {kind}"
        if rule.skipped:
            assert rows[kind].strip().startswith("skipped"), kind
        else:
            expected = rule.node_type or "by author"
            assert expected in rows[kind], (kind, rows[kind])
    assert "branch" in readme and "current_node" in readme


# --- 3. node types that tell who spoke; hidden messages ----------------------------------------


def test_chatgpt_messages_addressed_to_a_tool_are_tool_calls() -> None:
    run = chatgpt_run(
        gpt_conversation(
            "g-tools",
            [
                ("py", gpt_message("assistant", {"content_type": "code", "language": "unknown", "text": "print(1)"}, recipient="python")),
                ("fs", gpt_message("assistant", {"content_type": "code", "language": "unknown", "text": "{\"queries\": [\"retry policy\"]}"}, recipient="file_search.msearch")),
                ("img", gpt_message("assistant", {"content_type": "text", "parts": ["{\"prompt\": \"a lighthouse at dawn\"}"]}, recipient="dalle.text2im")),
                ("canvas", gpt_message("assistant", {"content_type": "code", "language": "json", "text": "{\"name\": \"plan\", \"content\": \"Step 1\"}"}, recipient="canmore.create_textdoc")),
                ("said", gpt_message("assistant", {"content_type": "text", "parts": ["Done: the draft is in the canvas."]})),
            ],
        )
    )
    assert [t for t, _ in texts(run)] == ["tool_call"] * 4 + ["assistant_message"]


def test_claude_tool_use_is_a_tool_call_and_its_result_a_tool_message() -> None:
    run = claude_run(
        claude_conversation(
            "c-tools",
            [
                claude_message(
                    "assistant",
                    [
                        {"type": "text", "text": "Let me search."},
                        {"type": "tool_use", "id": "t1", "name": "web_search", "input": {"query": "debezium schema evolution"}},
                        {"type": "tool_result", "tool_use_id": "t1", "name": "web_search", "content": [{"type": "text", "text": "Columns are added."}]},
                    ],
                )
            ],
        )
    )
    assert texts(run) == [
        ("assistant_message", "Let me search."),
        ("tool_call", "debezium schema evolution"),
        ("tool_message", "Columns are added."),
    ]


def test_hidden_messages_only_for_topics_that_ask() -> None:
    run = chatgpt_run(
        gpt_conversation(
            "g-hidden",
            [
                ("sys", gpt_message("system", {"content_type": "text", "parts": ["Sync context for the model."]}, hidden=True)),
                ("u", gpt_message("user", {"content_type": "text", "parts": ["How do we sync context?"]})),
            ],
        )
    )
    assert [n.hidden for n in run.nodes] == [True, False]
    policy = ExtractionPolicy(scope_description="sync")
    plain = Topic(topic_id="t", display_name="T", extraction_policy=policy)
    asking = Topic(topic_id="t", display_name="T", extraction_policy=policy, include_hidden=True)
    assert [n.steps[1] for n, _ in in_scope_nodes(policy, run, plain)] == ["u"]
    assert [n.steps[1] for n, _ in in_scope_nodes(policy, run, asking)] == ["sys", "u"]
    assert plain.include_hidden is False and plain.branches == "all"


# --- 5. the export as it is downloaded ----------------------------------------------------------


def two_conversations(prefix: str) -> list[dict]:
    return [
        gpt_conversation(f"{prefix}-{i}", [("u", gpt_message("user", {"content_type": "text", "parts": [f"sync question {i}"]}))])
        for i in range(2)
    ]


def test_a_sharded_zip_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("conversations-000.json", json.dumps(two_conversations("a")))
        zf.writestr("conversations-001.json", json.dumps(two_conversations("b") + [two_conversations("a")[0]]))
        zf.writestr("user.json", json.dumps({"id": "user-1", "email": "x@example.org"}))
        zf.writestr("chat.html", "<html></html>")
    items = list(iter_run_file(path, "export.zip"))
    assert sorted(i.run_id for i in items if isinstance(i, Run)) == ["a-0", "a-1", "b-0", "b-1"]
    (dup,) = [i for i in items if isinstance(i, IngestionError)]
    assert dup.file == "export.zip:conversations-001.json" and "duplicate conversation id 'a-0'" in dup.problem


def test_unzipped_side_files_are_skipped_with_one_info_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs" / "chatgpt-2026-11"
    runs.mkdir(parents=True)
    (runs / "conversations.json").write_text(json.dumps(two_conversations("s")))
    (runs / "user.json").write_text(json.dumps({"id": "user-1", "email": "x@example.org", "chatgpt_plus_user": True}))
    (runs / "message_feedback.json").write_text(json.dumps([{"id": f"f{i}", "rating": "thumbsUp"} for i in range(30)]))
    (runs / "model_comparisons.json").write_text(json.dumps([{"id": "c", "input": {}, "output": {}}]))
    (runs / "shared_conversations.json").write_text(json.dumps([{"id": "s", "conversation_id": "s-0", "title": "t"}]))
    (runs / "chat.html").write_text("<html><body>…</body></html>")
    said: list[str] = []
    with Vault.open(tmp_path / "v.duckdb") as vault:
        report = ingest_runs(vault, tmp_path / "runs", progress=said.append)
        assert vault.ingestion_errors() == []
    assert report.errors == [] and report.runs_new == 2
    notes = [line for line in said if "side file" in line]
    assert notes == [
        "skipped 5 export side file(s) with no conversations: chat.html, message_feedback.json, "
        "model_comparisons.json, shared_conversations.json, user.json"
    ]


def test_an_unsupported_list_is_one_error_for_the_file(tmp_path: Path) -> None:
    sharegpt = [
        {"id": f"item-{i}", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
        for i in range(500)
    ]
    path = export_file(tmp_path, "sharegpt.json", sharegpt)
    items = list(iter_run_file(path, "runs/sharegpt.json"))
    assert len(items) == 1
    (error,) = items
    assert isinstance(error, IngestionError) and error.file == "runs/sharegpt.json" and error.conversation is None
    assert "500 items" in error.problem and "ShareGPT" in error.problem
    assert "ChatGPT or Claude conversations.json" in error.problem and "Nexus run" in error.problem


def test_odd_items_among_real_conversations_are_still_reported_one_by_one() -> None:
    conversations = [None, {"foo": 1}] + two_conversations("m")
    items = list(iter_export(io.BytesIO(json.dumps(conversations).encode())))
    assert [type(i).__name__ for i in items] == ["ConversationProblem", "ConversationProblem", "Run", "Run"]
    assert isinstance(items[0], ConversationProblem) and items[0].index == 0
