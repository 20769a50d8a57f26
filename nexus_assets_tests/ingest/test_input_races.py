"""Files that vanish or change during a sync, files that claim one run_id, identical broken files
and floods of errors (invariants 11 and 12): each is named, none costs another file."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from nexus_assets.core.fingerprint import sha256_hex
from nexus_assets.ingest.step import ingest_runs
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "vault-notes"


def write_topic(p: Project) -> None:
    p.write_topic(TOPIC, keywords=["vault"])


def test_a_file_deleted_between_scan_and_read_is_named_and_the_rest_ingests(empty_project: Project, tmp_path: Path):
    p = empty_project
    for i in range(3):
        p.write_run(f"r{i}.json", nexus_run(f"run-{i}", [("user", f"The vault holds note {i}.")]))

    def delete_next(message: str) -> None:
        # Called before each new file is read (fewer than ten files): the next one disappears.
        if "r0.json" in message:
            (p.runs / "r1.json").unlink()

    with Vault.open(tmp_path / "v.duckdb") as vault:
        report = ingest_runs(vault, p.runs, progress=delete_next)
        assert {"run-0", "run-2"} <= set(vault.runs.latest_versions())
        assert "run-1" not in vault.runs.latest_versions()
        assert any("r1.json" in e.file and "vanished" in e.problem for e in report.errors), report.errors
    # It comes back: the next sync reads it, because it was never marked as read.
    p.write_run("r1.json", nexus_run("run-1", [("user", "The vault holds note 1.")]))
    with Vault.open(tmp_path / "v.duckdb") as vault:
        ingest_runs(vault, p.runs)
        assert "run-1" in vault.runs.latest_versions()


def test_a_file_rewritten_before_it_is_read_is_stored_with_the_hash_of_what_was_read(empty_project: Project, tmp_path: Path):
    p = empty_project
    p.write_run("a.json", nexus_run("run-a", [("user", "The vault is first.")]))
    p.write_run("b.json", nexus_run("run-b", [("user", "The vault was old.")]))
    new = nexus_run("run-b", [("user", "The vault is new.")])

    def rewrite_next(message: str) -> None:
        if "a.json" in message:
            p.write_run("b.json", new)

    with Vault.open(tmp_path / "v.duckdb") as vault:
        ingest_runs(vault, p.runs, progress=rewrite_next)
        stored = vault.conn.execute("SELECT file_sha256, raw_json FROM runs WHERE run_id = 'run-b'").fetchall()
        on_disk = sha256_hex((p.runs / "b.json").read_bytes())
        assert [row[0] for row in stored] == [on_disk]
        assert "The vault is new." in stored[0][1]
        assert on_disk in vault.runs.files_seen()


def test_two_files_with_one_run_id_are_named_in_either_arrival_order(empty_project: Project, capsys):
    p = empty_project
    write_topic(p)
    a = nexus_run("shared", [("user", "The vault from file A.")])
    b = nexus_run("shared", [("user", "The vault from file B.")])
    problems = []
    for order in (("a", "b"), ("b", "a"), ("ab",)):
        root = p.root / f"order-{'-'.join(order)}"
        runs = root / "runs"
        runs.mkdir(parents=True)
        db = str(root / "v.duckdb")
        args = ["--db", db, "sync", "--runs-dir", str(runs), "--topics-dir", str(p.topics)]
        for arrival in order:
            for name in arrival:
                (runs / f"{name}.json").write_text(json.dumps(a if name == "a" else b))
            run_json(capsys, *args)
        run_json(capsys, *args)  # later syncs change nothing and do not fail
        errors = [e for e in run_json(capsys, "--db", db, "errors") if "shared" in e["problem"]]
        assert len(errors) == 1, errors
        problems.append(errors[0]["problem"].split(";")[0])
        contents = [b_["content"] for b_ in run_json(capsys, "--db", db, "bricks", TOPIC)]
        # The file that was there first keeps the run; arriving together, the first by path.
        assert contents == ["The vault from file A." if order[0] in ("a", "ab") else "The vault from file B."]
    # The same error, naming both files, whatever the order.
    assert all("a.json" in x and "b.json" in x for x in problems)


def test_identical_broken_files_are_each_named(empty_project: Project, capsys):
    p = empty_project
    write_topic(p)
    for name in ("one.json", "two.json", "sub/three.json"):
        p.write_bytes(name, b'{"run_id": "x", "status": ')
    run_json(capsys, *p.sync_args(TOPIC))
    p.write_bytes("later/four.json", b'{"run_id": "x", "status": ')
    run_json(capsys, *p.sync_args(TOPIC))
    run_json(capsys, *p.sync_args(TOPIC))
    named = sorted(Path(e["file"]).name for e in run_json(capsys, *p.cli_args(), "errors"))
    assert named == ["four.json", "one.json", "three.json", "two.json"]


def test_errors_from_one_file_are_capped_with_a_summary_row(empty_project: Project, capsys, monkeypatch):
    p = empty_project
    write_topic(p)
    conversation = {"uuid": "same", "name": "n", "chat_messages": [{"sender": "human", "text": "The vault keeps everything.", "content": []}]}
    with zipfile.ZipFile(p.runs / "flood.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", json.dumps([conversation] * 500))
    monkeypatch.setenv("NEXUS_MAX_ERRORS_PER_FILE", "10")
    run_json(capsys, *p.sync_args(TOPIC))
    errors = run_json(capsys, *p.cli_args(), "errors")
    assert len(errors) == 11
    assert "489 more problems" in errors[-1]["problem"] or any("489 more problems" in e["problem"] for e in errors)
    assert any(s["run_id"] == "same" for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC) for s in b["sources"])
