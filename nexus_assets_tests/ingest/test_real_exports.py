"""Real exports as people have them (docs/inputs.md, invariant 11): every message kept, nothing mistyped.

Fixtures are written here by hand in the shape real ChatGPT and Claude exports have.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from nexus_assets.ingest.formats.limits import InputLimits
from nexus_assets.core.models import ExtractionPolicy, IngestionError, Run, Topic
from nexus_assets.core.paths import resolve_string
from nexus_assets.ingest.scope import in_scope_nodes
from nexus_assets.ingest.formats.chatgpt import CONTENT_TYPES, chatgpt_run
from nexus_assets.ingest.formats.claude import claude_run
from nexus_assets.ingest.formats.exports import ConversationProblem, iter_export
from nexus_assets.ingest.runfiles import iter_run_file
from nexus_assets.ingest.step import ingest_runs
from nexus_assets.store import Vault
from nexus_assets_tests.project import REPO

README = REPO / "docs" / "inputs.md"  # the manual's input tables


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
        assert kind in rows, f"docs/inputs.md lacks a row for {kind}"
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
        assert vault.runs.ingestion_errors() == []
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


# --- 6. a conversation nested too deep costs that conversation only ------------------------------

TOO_DEEP = "JSON nesting is deeper than 64 levels (NEXUS_MAX_JSON_DEPTH); this conversation was skipped, the rest of the export was read"
# Brackets, an escaped quote and an escaped backslash before a closing quote: none of them may
# count as structure or end a string.
TRICKY = r'a ]]} [{ \" [ \\'


def nested(levels: int, filler: str = TRICKY, core: str = "1") -> str:
    """`levels` levels of arrays and objects in turn around `core`, each holding a tricky string."""
    opens = [f'["{filler}", ' if i % 2 == 0 else f'{{"k{i}": "{filler}", "v": ' for i in range(levels)]
    closes = ["]" if i % 2 == 0 else "}" for i in reversed(range(levels))]
    return "".join(opens) + core + "".join(closes)


def with_raw(conversation: dict, key: str, raw: str) -> str:
    """The conversation as JSON text with `raw` (any JSON text, however deep) as the value of `key`."""
    marker = "@raw-value@"
    text = json.dumps({**conversation, key: marker}, ensure_ascii=False)
    assert text.count(json.dumps(marker)) == 1
    return text.replace(json.dumps(marker), raw)


def said(cid: str, text: str, shape: str) -> dict:
    if shape == "chatgpt":
        return gpt_conversation(cid, [("u", gpt_message("user", {"content_type": "text", "parts": [text]}))])
    return claude_conversation(cid, [claude_message("human", [{"type": "text", "text": text}], text)])


def export_of(path: Path, parts: list[str]) -> Path:
    path.write_text("[" + ",\n".join(parts) + "]", encoding="utf-8")
    return path


def read_export(path: Path, limits: InputLimits | None = None) -> tuple[list[str], list[IngestionError]]:
    items = list(iter_run_file(path, path.name, limits=limits))
    return [i.run_id for i in items if isinstance(i, Run)], [i for i in items if isinstance(i, IngestionError)]


@pytest.mark.parametrize("shape", ["chatgpt", "claude"])
def test_a_too_deep_conversation_costs_that_conversation_only(tmp_path: Path, shape: str) -> None:
    # The deep bytes are not even JSON past the limit: they are skipped, never parsed.
    deep = nested(200, core="@ not json , : ,")
    path = export_of(
        tmp_path / "conversations.json",
        [
            json.dumps(said("c-0", "Before the deep one.", shape)),
            with_raw(said("c-deep", "Deep.", shape), "extra", deep),
            json.dumps(said("c-2", "After the deep one.", shape)),
            json.dumps(said("c-3", "Last of all.", shape)),
        ],
    )
    runs, errors = read_export(path)
    assert runs == ["c-0", "c-2", "c-3"]
    assert [(e.file, e.conversation, e.problem) for e in errors] == [("conversations.json", "c-deep", TOO_DEEP)]


def test_deep_parts_straddling_chunks_with_brackets_and_quotes_in_strings(tmp_path: Path) -> None:
    # Each deep part is far larger than the 64 KiB the reader takes at a time, and its strings
    # hold brackets, escaped quotes and escaped backslashes.
    long = TRICKY * 400
    path = export_of(
        tmp_path / "conversations.json",
        [
            json.dumps(said("g-0", "Before [ and { in text \" quoted.", "chatgpt")),
            with_raw(said("g-deep-1", "Deep.", "chatgpt"), "extra", nested(300, long)),
            json.dumps(said("g-2", "Between ]] the two.", "chatgpt")),
            with_raw(said("g-deep-2", "Deep too.", "chatgpt"), "extra", nested(90, long)),
            json.dumps(said("g-4", "After both \\ of them.", "chatgpt")),
        ],
    )
    assert path.stat().st_size > 4 * 64 * 1024
    runs, errors = read_export(path)
    assert runs == ["g-0", "g-2", "g-4"]
    assert [(e.conversation, e.problem) for e in errors] == [("g-deep-1", TOO_DEEP), ("g-deep-2", TOO_DEEP)]


def test_deep_conversations_without_an_id_with_their_id_after_the_deep_part_or_last(tmp_path: Path) -> None:
    # The second one's id comes after its deep part; the third has no id at all; the last is deep.
    id_after = '{"extra": ' + nested(100) + ', "uuid": "late-id", "name": "late", "chat_messages": []}'
    no_id = with_raw({"name": "nameless", "chat_messages": []}, "extra", nested(100))
    path = export_of(
        tmp_path / "conversations.json",
        [
            json.dumps(said("c-0", "Kept.", "claude")),
            id_after,
            no_id,
            json.dumps(said("c-3", "Kept too.", "claude")),
            with_raw(said("c-last", "Deep at the end.", "claude"), "extra", nested(65)),
        ],
    )
    runs, errors = read_export(path)
    assert runs == ["c-0", "c-3"]
    assert [(e.conversation, e.problem) for e in errors] == [("late-id", TOO_DEEP), ("#2", TOO_DEEP), ("c-last", TOO_DEEP)]


def test_an_export_that_ends_inside_a_deep_part_says_so(tmp_path: Path) -> None:
    path = tmp_path / "conversations.json"
    path.write_text("[" + json.dumps(said("c-0", "Kept.", "claude")) + ', {"uuid": "cut-off", "extra": ' + "[" * 100_000)
    runs, errors = read_export(path)
    assert runs == ["c-0"]
    (error,) = errors
    assert error.conversation == "#1" and "deeper than 64 levels (NEXUS_MAX_JSON_DEPTH)" in error.problem
    assert "the file ends inside array item #1" in error.problem


def test_exactly_the_limit_is_read_and_one_more_level_is_not(tmp_path: Path) -> None:
    # The conversation object is level 1, its "extra" value level 2.
    path = export_of(
        tmp_path / "conversations.json",
        [
            with_raw(said("c-at", "At the limit.", "claude"), "extra", nested(63)),
            with_raw(said("c-over", "One over.", "claude"), "extra", nested(64)),
        ],
    )
    runs, errors = read_export(path)
    assert runs == ["c-at"]
    assert [e.conversation for e in errors] == ["c-over"]


def test_a_cut_that_changes_what_the_reader_sees_is_still_reported_as_too_deep(tmp_path: Path, monkeypatch) -> None:
    # At 6 levels, the object part of a multimodal message is what crosses the limit; what the
    # reader would find in its place must never be stored as the conversation's text.
    six = InputLimits.given({"NEXUS_MAX_JSON_DEPTH": "6"})  # as a command hands them down, from its settings
    spoken = {"content_type": "audio_transcription", "text": "Spoken.", "direction": "in"}
    multimodal = gpt_message("user", {"content_type": "multimodal_text", "parts": [spoken, "Typed."]})
    path = export_of(
        tmp_path / "conversations.json",
        [
            json.dumps(said("g-0", "Plain.", "chatgpt")),
            json.dumps(gpt_conversation("g-cut", [("u", multimodal)])),
            json.dumps(said("g-2", "Plain too.", "chatgpt")),
        ],
    )
    runs, errors = read_export(path, six)
    assert runs == ["g-0", "g-2"]
    assert [(e.conversation, e.problem) for e in errors] == [("g-cut", TOO_DEEP.replace("64", "6"))]
    # At 1 level every conversation's body is cut, and the reader would call it the wrong shape.
    runs, errors = read_export(path, InputLimits.given({"NEXUS_MAX_JSON_DEPTH": "1"}))
    assert runs == []
    assert [(e.conversation, e.problem) for e in errors] == [(c, TOO_DEEP.replace("64", "1")) for c in ("g-0", "g-cut", "g-2")]


def test_a_sharded_zip_with_a_deep_conversation_reads_every_other_one(tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    first = [json.dumps(said("a-0", "First shard.", "chatgpt")), with_raw(said("a-deep", "Deep.", "chatgpt"), "extra", nested(5000)), json.dumps(said("a-2", "Still first.", "chatgpt"))]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations-000.json", "[" + ", ".join(first) + "]")
        zf.writestr("conversations-001.json", json.dumps(two_conversations("b")))
    runs, errors = read_export(path)
    assert runs == ["a-0", "a-2", "b-0", "b-1"]
    assert [(e.file, e.conversation, e.problem) for e in errors] == [("export.zip:conversations-000.json", "a-deep", TOO_DEEP)]
