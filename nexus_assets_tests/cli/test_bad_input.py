"""Invariant 11: a malformed run file is an ingestion error naming the file and the problem;
every other run still compiles and nothing already in the vault is lost."""

import json
import zipfile

import pytest

from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "storage-decisions"


def deep(n: int) -> str:
    return "[" * n + "]" * n


BAD_FILES = {
    "truncated.json": (b'{"run_id": "t", "status": "CLOSED", "messages": [{"role": "user", "content": "the vault is', "not valid JSON"),
    "latin1.json": (
        json.dumps({"run_id": "l", "status": "CLOSED", "messages": [{"role": "user", "content": "caf\u00e9 vault"}]}, ensure_ascii=False).encode("latin-1"),
        "not valid UTF-8 at byte",
    ),
    "unknown-shape.json": (json.dumps({"title": "notes", "items": [1, 2, 3]}).encode(), "not a known run format"),
    "empty.json": (b"", "file is empty"),
    "whitespace.json": (b"  \n\t ", "file is empty"),
    "too-deep.json": (
        ('{"run_id": "d", "status": "CLOSED", "messages": [], "extra": ' + deep(200) + "}").encode(),
        "nesting is",
    ),
    "recursion-bomb.json": (
        ('{"run_id": "d2", "status": "CLOSED", "messages": [], "extra": ' + deep(100_000) + "}").encode(),
        "nesting",
    ),
    "bad-status.json": (json.dumps({"run_id": "s", "status": "DONE", "messages": []}).encode(), "status"),
    "messages-not-a-list.json": (
        json.dumps({"run_id": "c", "status": "CLOSED", "messages": {"role": "user", "content": "vault"}}).encode(),
        "messages: input should be a valid list",
    ),
    "surrogate.json": (b'{"run_id": "u", "status": "CLOSED", "messages": [{"role": "user", "content": "vault \\ud800"}]}', "surrogate"),
}


@pytest.fixture
def synced(project: Project, capsys) -> Project:
    run_json(capsys, *project.sync_args(TOPIC))
    return project


def test_each_malformed_file_is_an_error_and_the_rest_still_compiles(synced: Project, capsys):
    p = synced
    before = run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")
    manifest_before = run_json(capsys, *p.cli_args(), "manifest", TOPIC)
    for name, (data, _) in BAD_FILES.items():
        p.write_bytes(f"bad/{name}", data)
    p.write_run("good/new.json", nexus_run("run-new-good", [("user", "We chose DuckDB for the vault because it is embedded.")]))

    results = run_json(capsys, *p.sync_args(TOPIC))
    assert results[0]["success"], results

    errors = run_json(capsys, *p.cli_args(), "errors")
    by_file = {e["file"].rsplit("/", 1)[-1]: e["problem"] for e in errors}
    for name, (_, expected) in BAD_FILES.items():
        assert name in by_file, f"no ingestion error for {name}"
        assert expected in by_file[name], (name, by_file[name])
    assert all("/bad/" in e["file"] for e in errors), "errors name the file"

    after = {b["brick_id"]: b for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")}
    for b in before:
        assert after[b["brick_id"]]["content"] == b["content"]
    assert any(s["run_id"] == "run-new-good" for b in after.values() for s in b["sources"])
    assert run_json(capsys, *p.cli_args(), "manifest", TOPIC)["manifest_hash"] != manifest_before["manifest_hash"]


def test_a_malformed_message_costs_that_message_only(synced: Project, capsys):
    p = synced
    before = run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")
    run = nexus_run("run-entries", [("user", "The vault keeps every checksum."), ("user", "unused"), ("assistant", "DuckDB holds the vault.")])
    run["messages"][1] = None
    run["messages"].insert(2, {"role": "user", "content": ["the vault, as a list"]})
    p.write_run("entries.json", run)

    assert all(r["success"] for r in run_json(capsys, *p.sync_args(TOPIC)))
    errors = run_json(capsys, *p.cli_args(), "errors")
    assert sorted((e["file"].rsplit("/", 1)[-1], e["conversation"], e["problem"].split()[1]) for e in errors) == [
        ("entries.json", "run-entries", "messages[1]"),
        ("entries.json", "run-entries", "messages[2]"),
    ]
    after = {b["content"]: b for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")}
    assert {"The vault keeps every checksum.", "DuckDB holds the vault."} <= set(after)
    assert after["DuckDB holds the vault."]["sources"][0]["json_path"] == "$['messages'][3]['content']"
    assert all(b["content"] in after for b in before)


def test_an_oversized_file_is_refused_with_the_limit_named(empty_project: Project, capsys, monkeypatch):
    p = empty_project
    p.write_topic("limits", keywords=["vault"])
    p.write_run("big.json", nexus_run("big", [("user", "vault " + "x" * 5000)]))
    p.write_run("small.json", nexus_run("small", [("user", "The vault is small.")]))
    monkeypatch.setenv("NEXUS_MAX_RUN_FILE_BYTES", "4096")
    run_json(capsys, *p.sync_args("limits"))
    (error,) = run_json(capsys, *p.cli_args(), "errors")
    assert error["file"].endswith("big.json") and "over the 4096-byte limit" in error["problem"]
    assert [b["content"] for b in run_json(capsys, *p.cli_args(), "bricks", "limits")] == ["The vault is small."]


def test_a_broken_topic_file_is_named_and_other_topics_still_sync(project: Project, capsys):
    broken = project.topics / "broken.yaml"
    broken.write_text("topic_id: Not A Slug\ndisplay_name: x\n", encoding="utf-8")
    # The other topics compile; the sync still fails (issue 40), naming the file in its last lines.
    code, out, err = run_cli(capsys, *project.sync_args(), "--json")
    assert code == 1, err
    results = json.loads(out)
    assert [r["topic_id"] for r in results] == ["nexus-server-sync", "storage-decisions"]
    assert all(r["success"] for r in results)
    # The file is named, with what is wrong in it: in a warning as the sync starts, and last.
    (line,) = [x for x in err.splitlines() if "broken.yaml" in x and x.startswith("warning:")]
    assert line.startswith(f"warning: topic file {broken}: ") and "topic_id" in line and "extraction_policy" in line, line
    assert err.strip().splitlines()[-1].startswith(f"  topic file {broken}: topic_id: string should match pattern")


def test_a_bad_vault_memory_setting_is_a_usage_error_and_the_vault_is_untouched(synced: Project, capsys, monkeypatch):
    before = synced.db.read_bytes()
    monkeypatch.setenv("NEXUS_VAULT_MEMORY", "lots")
    for argv in (("topics",), ("sync", "--runs-dir", str(synced.runs), "--topics-dir", str(synced.topics))):
        code, _, err = run_cli(capsys, *synced.cli_args(), *argv)
        assert code == 2 and "NEXUS_VAULT_MEMORY='lots' is not a DuckDB memory size" in err
    assert synced.db.read_bytes() == before
    monkeypatch.setenv("NEXUS_VAULT_MEMORY", "64MB")
    assert run_json(capsys, *synced.cli_args(), "topics")


def claude_export(*conversations: tuple[str, str, str]) -> bytes:
    """A Claude export as raw JSON text: (uuid, text, raw JSON of an extra field) per conversation."""
    return (
        "["
        + ", ".join(
            f'{{"uuid": "{uuid}", "name": "notes", "created_at": "2026-01-01T00:00:00Z", "extra": {extra}, '
            f'"chat_messages": [{{"sender": "human", "created_at": "2026-01-01T00:00:00Z", "text": "{text}", '
            f'"content": [{{"type": "text", "text": "{text}"}}]}}]}}'
            for uuid, text, extra in conversations
        )
        + "]"
    ).encode()


def test_a_too_deep_conversation_in_an_export_costs_that_conversation_only(empty_project: Project, capsys):
    p = empty_project
    p.write_topic("vault-notes", keywords=["vault"])
    p.write_bytes(
        "claude/conversations.json",
        claude_export(
            ("c-before", "The vault was opened first.", '""'),
            ("c-deep", "The vault is deep.", deep(500)),
            ("c-after", "The vault still reads what comes after.", '""'),
        ),
    )
    shard = claude_export(("z-deep", "The vault is deep in a zip.", deep(70)), ("z-after", "The vault reads the zip to its end.", '""'))
    with zipfile.ZipFile(p.runs / "export.zip", "w") as archive:
        archive.writestr("conversations-000.json", shard)
        archive.writestr("conversations-001.json", claude_export(("z-next", "The vault reads the next shard.", '""')))
    run_json(capsys, *p.sync_args("vault-notes"))
    errors = {(e["file"].rsplit("/", 1)[-1], e["conversation"]): e["problem"] for e in run_json(capsys, *p.cli_args(), "errors")}
    assert set(errors) == {("conversations.json", "c-deep"), ("export.zip:conversations-000.json", "z-deep")}, errors
    assert all("deeper than 64 levels (NEXUS_MAX_JSON_DEPTH); this conversation was skipped" in e for e in errors.values()), errors
    sources = {s["run_id"] for b in run_json(capsys, *p.cli_args(), "bricks", "vault-notes", "--all") for s in b["sources"]}
    assert sources == {"c-before", "c-after", "z-after", "z-next"}
