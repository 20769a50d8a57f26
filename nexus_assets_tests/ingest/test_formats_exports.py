"""ChatGPT and Claude exports (docs/inputs.md): each conversation becomes one run, read as a stream."""

from __future__ import annotations

import copy
import io
import json
import re
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Run
from nexus_assets.core.paths import resolve_string, value_at
from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats.chatgpt import chatgpt_run, current_branch
from nexus_assets.ingest.formats.claude import claude_run
from nexus_assets.ingest.formats.exports import (
    BrokenExportError,
    ConversationProblem,
    iter_export,
    open_export_zip,
)
from nexus_assets_tests.project import REPO
from nexus_assets_tests.project import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "exports"
CHATGPT = FIXTURES / "chatgpt" / "conversations.json"
CLAUDE = FIXTURES / "claude" / "conversations.json"
SAMPLES = REPO / "data" / "runs" / "exports"
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def load(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))


def read_all(data: bytes, **kwargs) -> list[Run | ConversationProblem]:
    return list(iter_export(io.BytesIO(data), **kwargs))


def export_bytes(conversations: list) -> bytes:
    return json.dumps(conversations, ensure_ascii=False).encode("utf-8")


def runs_of(path: Path, **kwargs) -> list[Run]:
    with path.open("rb") as fh:
        items = list(iter_export(fh, **kwargs))
    assert all(isinstance(item, Run) for item in items), items
    return items  # type: ignore[return-value]


def texts(run: Run) -> list[tuple[str, str]]:
    return [(node.node_type, resolve_string(run.document, node.path)[1]) for node in run.nodes]


def mapping_id(conversation: dict, needle: str) -> str:
    """The mapping key of the node whose text starts with `needle`."""
    for node_id, node in conversation["mapping"].items():
        message = node["message"]
        if message is None:
            continue
        content = message["content"]
        candidates = [p for p in content.get("parts") or () if isinstance(p, str)] + [content.get("text")]
        if any(isinstance(c, str) and c.startswith(needle) for c in candidates):
            return node_id
    raise AssertionError(f"no node starts with {needle!r}")


# --- every node is a verbatim, addressable string ------------------------------------------------

# (node_type, beginning of the text) in node order, written out by hand from the fixtures.
EXPECTED_CHATGPT = {
    "Offline-first sync engine design": [
        ("user_message", "I'm designing a sync engine for an offline-first notes app."),
        ("assistant_message", "Don't sync rows, sync operations."),
        ("user_message", "Danke! Wie gehe ich mit Löschungen um"),
        ("assistant_message", "Gute Frage. Löschungen werden als Tombstone-Operation"),
        ("assistant_message", "The simplest approach is last-writer-wins"),  # the regenerated-away answer
    ],
    "Airflow task retries at 02:00": [
        ("user_message", "Here's the graph view from our Airflow UI."),
        ("tool_call", "import pandas as pd\n\nlog = pd.read_csv("),  # addressed to python
        ("tool_message", "hour\n0      0\n1      2\n2     47"),
        ("assistant_message", "47 of the 50 retries happen in the 02:00 hour."),
        ("user_message", "Instead of more retries, how do I make `load_orders` idempotent"),
        ("assistant_message", "Load into a staging table, then merge on the natural key"),
        ("user_message", "Can we just bump the retry count to 10?"),  # the prompt before it was edited
        ("assistant_message", "You can, but ten retries"),
    ],
    "Kafka exactly-once パイプライン": [
        ("user_message", "データパイプラインで exactly-once を実現するには"),
        ("tool_message", "Since 0.11.0.0, the Kafka producer also supports an idempotent delivery"),
        ("assistant_message", "ポイントは3つです ✅"),
        ("user_message", "And how do I backfill last month without double counting"),
        ("assistant_message", "Run the backfill through the same idempotent path"),
    ],
    "Brick manifest hashing": [
        ("user_message", "For the brick compiler I want a manifest hash"),
        ("assistant_message", "Only the ordered brick list"),
    ],
}

EXPECTED_CLAUDE = {
    "Chunking strategy for the extractor": [
        ("user_message", "Here is our sync spec. How should the pointer extractor chunk"),
        ("user_message", "# Sync spec v0.3\n\n## Change capture"),  # attachment
        ("assistant_message", "For the extractor, chunk by whole messages"),
        ("tool_call", "def chunk_messages(messages: list[str]"),  # artifact body
        ("tool_message", "OK"),
        ("assistant_message", "Each chunk stays under the token budget"),
        ("user_message", "Warum nicht einfach nach Absätzen splitten?"),
        ("assistant_message", "Weil ein Absatz kein adressierbarer Knoten ist"),
    ],
    "CDC パイプラインの設計": [
        ("user_message", "Debezium で Postgres の変更をキャプチャして"),  # top-level text, no blocks
        ("tool_call", "Debezium schema evolution Snowflake connector"),  # web search query
        ("tool_message", "When schema evolution is enabled, the connector adds new columns"),
        ("assistant_message", "スキーマ進化を前提に設計しましょう 👍"),
        ("user_message", "Thanks — and how do I test that in CI?"),
    ],
    "Fingerprint normalisation": [
        ("user_message", "Should the brick fingerprint casefold? „Straße“"),
        ("assistant_message", "Yes, for dedup only."),
    ],
}


@pytest.mark.parametrize(
    ("path", "expected", "title_key"),
    [(CHATGPT, EXPECTED_CHATGPT, "title"), (CLAUDE, EXPECTED_CLAUDE, "name")],
    ids=["chatgpt", "claude"],
)
def test_every_node_resolves_to_its_verbatim_text(path: Path, expected: dict, title_key: str) -> None:
    runs = runs_of(path)
    assert [run.document[title_key] for run in runs] == list(expected)
    for run in runs:
        got = texts(run)
        want = expected[run.document[title_key]]
        assert [t for t, _ in got] == [t for t, _ in want], run.document[title_key]
        for (_, text), (_, start) in zip(got, want):
            assert text.startswith(start)
        for node in run.nodes:
            steps, text = resolve_string(run.document, node.path)
            assert steps == node.steps
            assert text == value_at(run.document, node.steps)
            assert text.strip()
            assert node.steps[: len(node.message_steps)] == node.message_steps
        assert len({node.steps for node in run.nodes}) == len(run.nodes)


def test_paths_are_relative_to_the_unchanged_conversation() -> None:
    raw = CHATGPT.read_bytes()
    for run, conversation in zip(runs_of(CHATGPT), json.loads(raw)):
        assert run.document == conversation
        assert run.version_id == sha256_hex(canonical_json(conversation))
        assert all(node.path.startswith("$['mapping']['") for node in run.nodes)
    for run, conversation in zip(runs_of(CLAUDE), load(CLAUDE)):
        assert run.run_id == conversation["uuid"]
        assert run.format == "claude"
        assert all(node.path.startswith("$['chat_messages'][") for node in run.nodes)


def test_run_ids_prefer_conversation_id_and_fall_back_to_id() -> None:
    conversations = load(CHATGPT)
    runs = runs_of(CHATGPT)
    assert runs[0].run_id == conversations[0]["conversation_id"]
    assert "conversation_id" not in conversations[3]
    assert runs[3].run_id == conversations[3]["id"]
    assert {run.format for run in runs} == {"chatgpt"}


def test_shipped_sample_exports_import_cleanly() -> None:
    for kind in ("chatgpt", "claude"):
        runs = runs_of(SAMPLES / kind / "conversations.json")
        assert len(runs) == 2
        words = " ".join(text for run in runs for _, text in texts(run)).lower()
        for word in ("sync", "brick", "compiler", "manifest", "pipeline"):
            assert word in words, (kind, word)


# --- ChatGPT trees: every branch kept, the current one first -------------------------------------


def test_current_branch_runs_root_to_current_node() -> None:
    conversation = load(CHATGPT)[0]
    branch = current_branch(conversation)
    mapping = conversation["mapping"]
    assert branch[-1] == conversation["current_node"]
    assert mapping[branch[0]]["parent"] is None
    for parent, child in zip(branch, branch[1:]):
        assert mapping[child]["parent"] == parent
    assert mapping_id(conversation, "Don't sync rows") in branch
    assert mapping_id(conversation, "The simplest approach") not in branch


@pytest.mark.parametrize(
    ("index", "current_texts", "other_texts"),
    [
        (0, 4, ["The simplest approach is last-writer-wins"]),  # a regenerated answer
        (1, 6, ["Can we just bump the retry count to 10?", "You can, but ten retries"]),  # an edited prompt
    ],
)
def test_branches_are_kept_after_the_current_branch(index: int, current_texts: int, other_texts: list[str]) -> None:
    conversation = load(CHATGPT)[index]
    run = chatgpt_run(conversation)
    branch = current_branch(conversation)
    on_branch = [node.steps[1] in branch for node in run.nodes]
    assert on_branch == [True] * current_texts + [False] * len(other_texts)
    # The current branch is in root-to-leaf order.
    positions = [branch.index(node.steps[1]) for node in run.nodes[:current_texts]]
    assert positions == sorted(positions)
    off_branch = [resolve_string(run.document, node.path)[1] for node in run.nodes[current_texts:]]
    assert [text[: len(want)] for text, want in zip(off_branch, other_texts)] == other_texts


def test_conversation_without_current_node_keeps_mapping_order() -> None:
    conversation = copy.deepcopy(load(CHATGPT)[0])
    del conversation["current_node"]
    assert current_branch(conversation) == []
    run = chatgpt_run(conversation)
    node_order = [node.steps[1] for node in run.nodes]
    assert node_order == [k for k in conversation["mapping"] if k in set(node_order)]


def test_non_text_parts_are_skipped_and_text_parts_kept() -> None:
    _, airflow, exactly_once, manifest = load(CHATGPT)
    run = chatgpt_run(airflow)
    upload = next(k for k, v in airflow["mapping"].items() if v["message"] and v["message"]["content"]["content_type"] == "multimodal_text")
    upload_paths = [node.steps for node in run.nodes if node.steps[1] == upload]
    assert upload_paths == [("mapping", upload, "message", "content", "parts", 1)]
    assert airflow["mapping"][upload]["message"]["content"]["parts"][0]["content_type"] == "image_asset_pointer"

    run = chatgpt_run(exactly_once)
    voice = next(k for k, v in exactly_once["mapping"].items() if v["message"] and v["message"]["content"]["content_type"] == "multimodal_text")
    voice_paths = [node.steps for node in run.nodes if node.steps[1] == voice]
    # The transcription is text; the audio pointer beside it is not.
    assert voice_paths == [("mapping", voice, "message", "content", "parts", 0, "text")]

    run = chatgpt_run(manifest)
    types = {v["message"]["content"]["content_type"] for v in manifest["mapping"].values() if v["message"]}
    assert "user_editable_context" in types
    assert all(manifest["mapping"][node.steps[1]]["message"]["content"]["content_type"] == "text" for node in run.nodes)


def test_code_execution_output_and_quotes_use_content_text() -> None:
    airflow = load(CHATGPT)[1]
    run = chatgpt_run(airflow)
    by_type = {node.node_type: node for node in run.nodes}
    assert by_type["tool_message"].steps[-2:] == ("content", "text")
    code = mapping_id(airflow, "import pandas")
    assert ("mapping", code, "message", "content", "text") in {node.steps for node in run.nodes}


def test_blank_strings_are_not_nodes() -> None:
    conversation = load(CHATGPT)[0]
    system = next(k for k, v in conversation["mapping"].items() if v["message"] and v["message"]["author"]["role"] == "system")
    assert conversation["mapping"][system]["message"]["content"]["parts"] == [""]
    assert all(node.steps[1] != system for node in chatgpt_run(conversation).nodes)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(st.text(max_size=40), st.sampled_from([" ", "\n\t", "🧱 brick"])), max_size=4), max_size=6))
def test_chatgpt_nodes_are_exactly_the_non_blank_parts(messages: list[list[str]]) -> None:
    mapping: dict = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
    parent = "root"
    for i, parts in enumerate(messages):
        node_id = f"n{i}"
        mapping[node_id] = {
            "id": node_id,
            "message": {"id": node_id, "author": {"role": "user" if i % 2 else "assistant"}, "create_time": 1.0 + i,
                        "content": {"content_type": "text", "parts": parts}},
            "parent": parent,
            "children": [],
        }
        mapping[parent]["children"].append(node_id)
        parent = node_id
    run = chatgpt_run({"conversation_id": "c", "mapping": mapping, "current_node": parent})
    got = [resolve_string(run.document, node.path)[1] for node in run.nodes]
    assert got == [p for parts in messages for p in parts if p.strip()]


# --- Claude messages --------------------------------------------------------------------------


def test_claude_text_blocks_win_over_the_flattened_text() -> None:
    chunking, cdc, _ = load(CLAUDE)
    run = claude_run(chunking)
    paths = {node.steps for node in run.nodes}
    # Both messages carry `text` as well as text blocks; only the blocks become nodes.
    assert chunking["chat_messages"][0]["text"] == chunking["chat_messages"][0]["content"][0]["text"]
    assert ("chat_messages", 0, "text") not in paths
    assert ("chat_messages", 1, "text") not in paths
    assert "isn’t yet supported" in chunking["chat_messages"][1]["text"]
    assert not any("isn’t yet supported" in text for _, text in texts(run))

    run = claude_run(cdc)
    paths = [node.steps for node in run.nodes]
    assert paths[0] == ("chat_messages", 0, "text")  # no content blocks at all
    assert not any(p[:2] == ("chat_messages", 3) for p in paths)  # an empty reply gives nothing


def test_claude_attachments_tools_and_thinking() -> None:
    chunking, cdc, _ = load(CLAUDE)
    run = claude_run(chunking)
    nodes = {node.steps: node for node in run.nodes}
    attachment = nodes[("chat_messages", 0, "attachments", 0, "extracted_content")]
    assert attachment.node_type == "user_message"
    assert nodes[("chat_messages", 1, "content", 1, "input", "content")].node_type == "tool_call"
    assert nodes[("chat_messages", 1, "content", 2, "content", 0, "text")].node_type == "tool_message"

    run = claude_run(cdc)
    found = {node.steps for node in run.nodes}
    blocks = cdc["chat_messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "tool_use", "tool_result", "text"]
    assert not any(s[:4] == ("chat_messages", 1, "content", 0) for s in found)  # thinking
    assert ("chat_messages", 1, "content", 1, "input", "query") in found  # the tool call's input
    assert ("chat_messages", 1, "content", 2, "content", 0, "text") in found


def test_claude_tool_result_given_as_a_string() -> None:
    conversation = {
        "uuid": "k",
        "chat_messages": [
            {"sender": "assistant", "text": "", "content": [{"type": "tool_result", "content": "rows: 42"}]},
        ],
    }
    run = claude_run(conversation)
    assert [(n.steps, n.node_type) for n in run.nodes] == [(("chat_messages", 0, "content", 0, "content"), "tool_message")]


# --- timestamps and status --------------------------------------------------------------------


def test_timestamps_are_normalised() -> None:
    gpt = runs_of(CHATGPT)
    claude = runs_of(CLAUDE)
    assert gpt[0].started_at == "2024-05-28T16:00:00.500000Z"  # epoch 1716912000.5
    assert gpt[0].nodes[0].timestamp == "2024-05-28T16:00:10.000000Z"
    assert claude[0].started_at == "2024-06-03T08:15:42.118403Z"
    # "+00:00" and "Z" in the source give one spelling.
    assert claude[1].nodes[4].timestamp == "2024-09-12T01:20:10.000000Z"
    for run in gpt + claude:
        assert ISO_UTC.match(run.started_at or "")
        assert all(node.timestamp is None or ISO_UTC.match(node.timestamp) for node in run.nodes)
        assert all(run.timestamp_of(node.steps) == node.timestamp for node in run.nodes)


def test_export_conversations_are_closed_by_default() -> None:
    assert {run.status for run in runs_of(CHATGPT) + runs_of(CLAUDE)} == {"CLOSED"}


@pytest.mark.parametrize(
    ("open_after", "status"),
    [
        ("2024-11-02T11:20:00.124Z", "OPEN"),
        ("2024-11-02T11:20:00.125Z", "OPEN"),  # updated exactly at the threshold
        ("2024-11-02T12:20:00.125+01:00", "OPEN"),  # same instant, other offset
        ("2024-11-02T11:20:00.126Z", "CLOSED"),
        ("2025-01-01", "CLOSED"),
    ],
)
def test_open_after_opens_recently_updated_conversations(open_after: str, status: str) -> None:
    exactly_once = load(CHATGPT)[2]  # update_time 1730546400.125 = 2024-11-02T11:20:00.125Z
    assert chatgpt_run(exactly_once, open_after=open_after).status == status


def test_open_after_applies_per_conversation_in_both_formats() -> None:
    items = runs_of(CHATGPT, open_after="2024-10-01T00:00:00Z") + runs_of(CLAUDE, open_after="2024-10-01T00:00:00Z")
    assert {run.document.get("title") or run.document.get("name"): run.status for run in items} == {
        "Offline-first sync engine design": "CLOSED",
        "Airflow task retries at 02:00": "CLOSED",
        "Kafka exactly-once パイプライン": "OPEN",
        "Brick manifest hashing": "CLOSED",
        "Chunking strategy for the extractor": "CLOSED",
        "CDC パイプラインの設計": "CLOSED",
        "Fingerprint normalisation": "OPEN",
    }


def test_missing_update_time_falls_back_to_create_time() -> None:
    conversation = copy.deepcopy(load(CLAUDE)[2])
    del conversation["updated_at"]
    assert claude_run(conversation, open_after="2024-11-20T16:00:00Z").status == "OPEN"
    assert claude_run(conversation, open_after="2024-11-20T16:00:01Z").status == "CLOSED"
    conversation["created_at"] = None
    assert claude_run(conversation, open_after="2000-01-01").status == "CLOSED"


def test_unreadable_open_after_is_a_setting_error() -> None:
    with pytest.raises(ValueError, match="open_after 'yesterday'"):
        chatgpt_run(load(CHATGPT)[0], open_after="yesterday")
    with pytest.raises(ValueError, match="open_after"):
        next(iter_export(io.BytesIO(CHATGPT.read_bytes()), open_after="yesterday"))


# --- re-exports -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHATGPT, CLAUDE], ids=["chatgpt", "claude"])
def test_reordering_conversations_moves_nothing(path: Path) -> None:
    conversations = load(path)
    reordered = conversations[1:] + conversations[:1]
    reordered.reverse()

    def by_id(data: bytes) -> dict:
        return {run.run_id: run for run in read_all(data)}  # type: ignore[union-attr]

    first, second = by_id(export_bytes(conversations)), by_id(export_bytes(reordered))
    assert first.keys() == second.keys() and len(first) == len(conversations)
    for run_id, run in first.items():
        other = second[run_id]
        assert other.document == run.document
        assert other.version_id == run.version_id
        assert [n.path for n in other.nodes] == [n.path for n in run.nodes]
        assert other.nodes == run.nodes


def test_version_id_tracks_content_not_formatting() -> None:
    conversations = load(CHATGPT)
    compact = read_all(export_bytes(conversations))
    pretty = read_all(json.dumps(conversations, indent=4, ensure_ascii=True).encode())
    assert [r.version_id for r in compact] == [r.version_id for r in pretty]  # type: ignore[union-attr]
    changed = copy.deepcopy(conversations)
    changed[0]["title"] += " (renamed)"
    assert read_all(export_bytes(changed))[0].version_id != compact[0].version_id  # type: ignore[union-attr]


# --- streaming --------------------------------------------------------------------------------


def _synthetic_conversation(i: int, filler: str) -> dict:
    mapping: dict = {"root": {"id": "root", "message": None, "parent": None, "children": ["m0"]}}
    parent = "root"
    for m in range(6):
        node_id = f"m{m}"
        mapping[node_id] = {
            "id": node_id,
            "message": {
                "id": f"{i}-{m}",
                "author": {"role": "user" if m % 2 == 0 else "assistant", "name": None, "metadata": {}},
                "create_time": 1700000000.0 + i * 60 + m,
                "content": {"content_type": "text", "parts": [f"Conversation {i}, message {m}: the sync pipeline "
                                                              f"compiles bricks. {filler}"]},
                "metadata": {},
            },
            "parent": parent,
            "children": [f"m{m + 1}"] if m < 5 else [],
        }
        parent = node_id
    return {"title": f"Generated {i}", "create_time": 1700000000.0 + i * 60, "update_time": 1700000000.0 + i * 60 + 5,
            "mapping": mapping, "current_node": "m5", "conversation_id": f"gen-{i:06d}", "id": f"gen-{i:06d}"}


def _write_big_export(path: Path, target_bytes: int) -> int:
    filler = "Ein Brick ist ein wörtliches Zitat; ブリックは逐語的です 🧱. " * 20
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write("[")
        while fh.tell() < target_bytes:
            if count:
                fh.write(",\n")
            fh.write(json.dumps(_synthetic_conversation(count, filler), ensure_ascii=False))
            count += 1
        fh.write("]")
    return count


def test_large_export_streams_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "conversations.json"
    written = _write_big_export(path, 30 * 1024 * 1024)
    size = path.stat().st_size

    tracemalloc.start()
    try:
        count = nodes = 0
        with path.open("rb") as fh:
            for item in iter_export(fh):
                assert isinstance(item, Run), item
                count += 1
                nodes += len(item.nodes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert count == written and nodes == written * 6
    assert peak < size / 10, f"peak {peak} bytes while streaming a {size}-byte export"


class _CountingReader(io.RawIOBase):
    def __init__(self, data: bytes):
        self._inner = io.BytesIO(data)
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        self.consumed += len(data)
        return data


def test_conversations_are_yielded_before_the_file_is_read_to_the_end() -> None:
    filler = "x" * 2000
    data = export_bytes([_synthetic_conversation(i, filler) for i in range(400)])
    reader = _CountingReader(data)
    first = next(iter_export(reader))  # type: ignore[arg-type]
    assert isinstance(first, Run) and first.run_id == "gen-000000"
    assert reader.consumed < len(data) / 10


# --- bad input ------------------------------------------------------------------------------


def test_truncated_export_keeps_what_came_before_then_fails() -> None:
    conversations = load(CHATGPT)
    pieces = [json.dumps(c, ensure_ascii=False).encode() for c in conversations]
    data = b"[" + b",".join(pieces[:2]) + b"," + pieces[2][: len(pieces[2]) // 2]
    stream = iter_export(io.BytesIO(data))
    got = [next(stream), next(stream)]
    assert [r.run_id for r in got] == [conversations[0]["conversation_id"], conversations[1]["conversation_id"]]  # type: ignore[union-attr]
    with pytest.raises(FormatError, match=r"after 2 complete conversation\(s\).*truncated") as caught:
        next(stream)
    assert isinstance(caught.value, BrokenExportError)
    assert caught.value.conversations_read == 2


def test_garbage_mid_stream_fails_after_the_good_conversations() -> None:
    conversations = load(CLAUDE)
    data = b"[" + json.dumps(conversations[0]).encode() + b", {oops}, " + json.dumps(conversations[1]).encode() + b"]"
    seen = []
    with pytest.raises(FormatError, match="after 1 complete conversation"):
        for item in iter_export(io.BytesIO(data)):
            seen.append(item)
    assert [r.run_id for r in seen] == [conversations[0]["uuid"]]  # type: ignore[union-attr]


def test_invalid_utf8_is_a_format_error() -> None:
    data = b'[{"uuid": "k", "chat_messages": [{"sender": "human", "text": "caf\xe9"}]}]'
    with pytest.raises(FormatError, match="UTF8|UTF-8|utf-8"):
        read_all(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "export is empty"),
        (b"  \n ", "export is empty"),
        (b'{"run_id": "r", "status": "OPEN", "messages": []}', "found an object"),
        (b"42", "does not start with a JSON array"),
    ],
)
def test_not_an_array_of_conversations(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        read_all(data)


def test_utf8_bom_is_accepted() -> None:
    data = b"\xef\xbb\xbf" + CLAUDE.read_bytes()
    assert [r.run_id for r in read_all(data)] == [c["uuid"] for c in load(CLAUDE)]  # type: ignore[union-attr]


def _break(conversation: dict, how: str) -> dict:
    broken = copy.deepcopy(conversation)
    if how == "chatgpt-mapping-list":
        broken["mapping"] = list(broken["mapping"].values())
    elif how == "chatgpt-no-author":
        node = next(v for v in broken["mapping"].values() if v["message"])
        del node["message"]["author"]
    elif how == "chatgpt-no-id":
        del broken["conversation_id"], broken["id"]
    elif how == "chatgpt-dangling-current":
        broken["current_node"] = "no-such-node"
    elif how == "chatgpt-parent-loop":
        root = next(k for k, v in broken["mapping"].items() if v["parent"] is None)
        broken["mapping"][root]["parent"] = broken["current_node"]
    elif how == "claude-no-sender":
        del broken["chat_messages"][1]["sender"]
    elif how == "claude-messages-object":
        broken["chat_messages"] = {"0": broken["chat_messages"][0]}
    elif how == "claude-no-uuid":
        broken["uuid"] = ""
    return broken


@pytest.mark.parametrize(
    ("how", "problem", "named"),
    [
        ("chatgpt-mapping-list", "mapping: input should be a valid dictionary", True),
        ("chatgpt-no-id", "has no id (neither 'conversation_id' nor 'id'", False),
        ("chatgpt-dangling-current", "current_node 'no-such-node' is not in mapping", True),
        ("chatgpt-parent-loop", "parent links loop back to node", True),
        ("claude-messages-object", "chat_messages: input should be a valid list", True),
        ("claude-no-uuid", "has no id (neither 'uuid'", False),
    ],
)
def test_a_broken_conversation_is_a_problem_for_that_one_only(how: str, problem: str, named: bool) -> None:
    source = load(CLAUDE) if how.startswith("claude") else load(CHATGPT)
    conversations = [source[0], _break(source[1], how), source[2]]
    items = read_all(export_bytes(conversations))
    assert isinstance(items[0], Run) and isinstance(items[2], Run)
    bad = items[1]
    assert isinstance(bad, ConversationProblem)
    assert bad.index == 1
    assert re.search(problem if "\\" in problem else re.escape(problem), bad.problem), bad.problem
    expected_name = source[1].get("conversation_id") or source[1].get("uuid")
    assert bad.conversation == (expected_name if named else None)


def test_format_errors_name_the_conversation() -> None:
    conversation = _break(load(CHATGPT)[1], "chatgpt-mapping-list")
    with pytest.raises(FormatError, match=rf"^conversation '{conversation['conversation_id']}': mapping: "):
        chatgpt_run(conversation)
    nameless = _break(load(CHATGPT)[1], "chatgpt-no-id")
    with pytest.raises(FormatError, match=r"^conversation #7 \('Airflow task retries at 02:00'\): has no id"):
        chatgpt_run(nameless, index=7)
    with pytest.raises(FormatError, match=r"^conversation '.+': chat_messages: input should be a valid list"):
        claude_run(_break(load(CLAUDE)[0], "claude-messages-object"))


def test_duplicate_conversation_id_keeps_the_first() -> None:
    conversations = load(CHATGPT)
    again = copy.deepcopy(conversations[0])
    again["title"] = "Offline-first sync engine design (re-exported)"
    items = read_all(export_bytes([conversations[0], conversations[1], again]))
    assert isinstance(items[0], Run) and items[0].document["title"] == conversations[0]["title"]
    assert isinstance(items[1], Run)
    problem = items[2]
    assert problem == ConversationProblem(
        2,
        conversations[0]["conversation_id"],
        f"duplicate conversation id {conversations[0]['conversation_id']!r} (first at array item #0, which was kept)",
    )


def test_non_object_array_items_are_problems() -> None:
    claude = load(CLAUDE)
    data = export_bytes([claude[0], "oops", 42, None, [claude[1]], {"hello": "world"}, claude[2]])
    items = read_all(data)
    assert [type(i).__name__ for i in items] == ["Run"] + ["ConversationProblem"] * 5 + ["Run"]
    problems = items[1:6]
    assert [p.index for p in problems] == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
    assert problems[0].problem == "array item #1 is str, not a conversation object"  # type: ignore[union-attr]
    assert problems[2].problem == "array item #3 is null, not a conversation object"  # type: ignore[union-attr]
    assert problems[3].problem == "array item #4 is list, not a conversation object"  # type: ignore[union-attr]
    assert "not a ChatGPT conversation (no 'mapping') or a Claude conversation" in problems[4].problem  # type: ignore[union-attr]


def test_mixed_export_detects_each_conversation() -> None:
    data = export_bytes([load(CHATGPT)[3], load(CLAUDE)[2]])
    assert [r.format for r in read_all(data)] == ["chatgpt", "claude"]  # type: ignore[union-attr]


# --- zip exports ------------------------------------------------------------------------------


def test_zip_without_conversations_json(tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("chat.html", "<html></html>")
        zf.writestr("user.json", "{}")
        zf.writestr("conversations.json.bak", "[]")
    with pytest.raises(FormatError) as caught:
        open_export_zip(path)
    assert str(caught.value) == "zip has no conversations.json; expected a ChatGPT or Claude data export"


def test_zip_with_conversations_json_in_a_subfolder(tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data-2024-12-01/chat.html", "<html></html>")
        zf.writestr("__MACOSX/data-2024-12-01/conversations.json", "junk")
        zf.writestr("data-2024-12-01/conversations.json", CHATGPT.read_bytes())
    stream = open_export_zip(path)
    assert isinstance(stream, zipfile.ZipExtFile)  # a member stream, not the member read into memory
    with stream:
        runs = list(iter_export(stream))
    assert [r.run_id for r in runs] == [r.run_id for r in runs_of(CHATGPT)]  # type: ignore[union-attr]
    assert [r.version_id for r in runs] == [r.version_id for r in runs_of(CHATGPT)]  # type: ignore[union-attr]


def test_zip_prefers_the_shallowest_conversations_json(tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("old/backup/conversations.json", CHATGPT.read_bytes())
        zf.writestr("conversations.json", CLAUDE.read_bytes())
    with open_export_zip(path) as stream:
        assert {r.format for r in iter_export(stream)} == {"claude"}  # type: ignore[union-attr]


def test_a_file_that_is_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    path.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(FormatError, match="not a readable zip archive"):
        open_export_zip(path)
