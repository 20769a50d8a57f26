"""ChatGPT and Claude exports as first-class runs: compiled verbatim, stable across re-exports,
honest when a conversation changes; run lifecycle and versions."""

import json
import shutil

import pytest

from nexus_assets.core.fingerprint import fingerprint, sha256_hex
from nexus_assets.core.paths import resolve_string
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import REPO, Project, nexus_run

FIXTURES = REPO / "nexus_assets_tests" / "fixtures" / "exports"
TOPIC = "export-notes"
KEYWORDS = ["sync", "manifest", "chunks", "retries", "idempotent", "brick", "fingerprint", "offline", "postgres", "tombstones"]


@pytest.fixture
def exports(empty_project: Project) -> Project:
    p = empty_project
    p.write_topic(TOPIC, keywords=KEYWORDS)
    for kind in ("chatgpt", "claude"):
        target = p.runs / kind / "conversations.json"
        target.parent.mkdir(parents=True)
        shutil.copy(FIXTURES / kind / "conversations.json", target)
    return p


def all_bricks(p: Project, capsys) -> dict[str, dict]:
    return {b["brick_id"]: b for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")}


def test_exports_compile_to_bricks_whose_every_address_is_verbatim(exports: Project, capsys):
    (result,) = run_json(capsys, *exports.sync_args(TOPIC))
    assert result["success"] and all(result["checks"].values())
    bricks = all_bricks(exports, capsys)
    with Vault.open(exports.db, read_only=True) as v:
        formats = dict(v.conn.execute("SELECT run_id, format FROM runs").fetchall())
        runs = v.runs.latest_runs()
    assert {formats[s["run_id"]] for b in bricks.values() for s in b["sources"]} == {"chatgpt", "claude"}
    for b in bricks.values():
        for n, s in enumerate(b["sources"]):
            _, node = resolve_string(runs[s["run_id"]].document, s["json_path"])
            lifted = node[s["start"] : s["end"]]
            # Invariant 1: the canonical address holds the content; linked ones hold their own verbatim text.
            assert lifted == b["content"] if n == 0 else fingerprint(lifted) == b["fingerprint"]
            assert sha256_hex(node) == s["node_checksum"]
    assert any(not ch.isascii() for b in bricks.values() for ch in b["content"]), "non-ASCII text survives verbatim"
    assert run_json(capsys, *exports.cli_args(), "verify")["ok"]


def test_a_reexport_reordered_with_one_new_conversation_moves_nothing(exports: Project, capsys):
    run_json(capsys, *exports.sync_args(TOPIC))
    before = all_bricks(exports, capsys)
    path = exports.runs / "chatgpt" / "conversations.json"
    conversations = json.loads(path.read_text(encoding="utf-8"))
    extra = json.loads(json.dumps(conversations[0]))
    extra["conversation_id"] = extra["id"] = "0f0f0f0f-new-conversation"
    # A newer conversation: later timestamps, so it sorts after everything already compiled.
    for key in ("create_time", "update_time"):
        extra[key] = (extra.get(key) or 0) + 86400
    for node in extra["mapping"].values():
        message = node.get("message")
        if message and message.get("create_time"):
            message["create_time"] += 86400
        if message and message["content"].get("parts") and isinstance(message["content"]["parts"][0], str):
            message["content"]["parts"][0] = "A fresh idempotent sync plan for the offline devices. " + message["content"]["parts"][0]
    # The new export replaces the old file, conversations in another order, one more at the end.
    path.unlink()
    (exports.runs / "chatgpt-2026-11").mkdir()
    (exports.runs / "chatgpt-2026-11" / "conversations.json").write_text(
        json.dumps(list(reversed(conversations)) + [extra], ensure_ascii=False, indent=2), encoding="utf-8"
    )
    (result,) = run_json(capsys, *exports.sync_args(TOPIC))
    assert result["success"] and all(result["checks"].values())
    after = all_bricks(exports, capsys)
    for bid, b in before.items():
        assert after[bid]["content"] == b["content"]
        # No address moved; the new conversation can only add linked sources after them.
        assert after[bid]["sources"][: len(b["sources"])] == b["sources"]
        assert not after[bid]["stale"]
    assert len({b["fingerprint"] for b in after.values()}) == len(after), "no duplicate bricks"
    assert any(s["run_id"] == "0f0f0f0f-new-conversation" for b in after.values() for s in b["sources"])
    assert run_json(capsys, *exports.cli_args(), "verify")["ok"]


def test_editing_a_closed_conversation_flags_exactly_the_bricks_of_that_node(exports: Project, capsys):
    run_json(capsys, *exports.sync_args(TOPIC))
    before = all_bricks(exports, capsys)
    path = exports.runs / "claude" / "conversations.json"
    conversations = json.loads(path.read_text(encoding="utf-8"))
    # Pick a node that has bricks and edit one word in it.
    target = next(s for b in before.values() for s in b["sources"] if s["run_id"] == conversations[0]["uuid"])
    expected = {bid for bid, b in before.items() if any(s["run_id"] == target["run_id"] and s["json_path"] == target["json_path"] for s in b["sources"])}
    from nexus_assets.core.paths import resolve_steps, value_at

    steps, text = resolve_steps(conversations[0], target["json_path"])
    parent = value_at(conversations[0], steps[:-1])
    parent[steps[-1]] = text + " (edited later)"
    path.write_text(json.dumps(conversations, ensure_ascii=False), encoding="utf-8")

    (result,) = run_json(capsys, *exports.sync_args(TOPIC), expect=1)
    assert result["checks"]["checksum_drift"] is False
    after = all_bricks(exports, capsys)
    assert {bid for bid, b in after.items() if b["stale"]} == expected
    assert set(before) <= set(after), "nothing deleted"


def test_appending_to_an_open_run_adds_bricks_and_flags_nothing(empty_project: Project, capsys):
    p = empty_project
    p.write_topic(TOPIC, keywords=KEYWORDS)
    doc = nexus_run("run-live", [("user", "The sync must be idempotent.")], status="OPEN")
    p.write_run("live.json", doc)
    run_json(capsys, *p.sync_args(TOPIC))
    doc["messages"].append({"role": "assistant", "content": "Then retries are safe. Every brick keeps its address.", "timestamp": "2026-01-01T00:05:00Z"})
    p.write_run("live.json", doc)
    (result,) = run_json(capsys, *p.sync_args(TOPIC))
    assert all(result["checks"].values())
    bricks = run_json(capsys, *p.cli_args(), "bricks", TOPIC)
    assert [b["content"] for b in bricks] == ["The sync must be idempotent.", "Then retries are safe.", "Every brick keeps its address."]
    assert not any(b["stale"] for b in bricks) and all(b["state"] == "IMPROVISE" for b in bricks)
    with Vault.open(p.db, read_only=True) as v:
        assert v.conn.execute("SELECT count(*), count(*) FILTER (is_latest) FROM runs").fetchone() == (2, 1)


def test_recently_updated_export_conversations_can_be_treated_as_open(exports: Project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_OPEN_AFTER", "2000-01-01T00:00:00Z")
    run_json(capsys, *exports.sync_args(TOPIC))
    states = {b["state"] for b in all_bricks(exports, capsys).values()}
    assert states <= {"IMPROVISE", "SUPERSEDED"} and "IMPROVISE" in states


def test_a_file_seen_before_is_a_no_op(exports: Project, capsys):
    run_json(capsys, *exports.sync_args(TOPIC))
    shutil.copy(exports.runs / "claude" / "conversations.json", exports.runs / "claude-copy.json")
    run_json(capsys, *exports.sync_args(TOPIC))
    with Vault.open(exports.db, read_only=True) as v:
        assert v.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == v.conn.execute("SELECT count(DISTINCT run_id) FROM runs").fetchone()[0]
