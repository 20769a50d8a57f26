"""Invariant 9: a source that changes after a sync flags exactly its bricks stale; nothing is deleted."""

import json
import shutil

import dagster as dg
import pytest

from nexus_assets.vault.store import Vault
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.dagster_helpers import check_results, materialize_topic
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "storage-decisions"
RUN_FILE = "nexus/2026-10-09-vault-design.json"
RUN_ID = "run-2026-10-09-vault-design"
EDITED = "$['messages'][5]['content']"


def edit_closed_run(project: Project) -> None:
    path = project.runs / RUN_FILE
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["status"] == "CLOSED"
    doc["messages"][5]["content"] = doc["messages"][5]["content"].replace("flagged stale", "quietly rewritten")
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")


def bricks_of_node(bricks: list[dict]) -> set[str]:
    """Visible bricks whose canonical source is the edited node: the ones that turn stale (invariant 14)."""
    return {
        b["brick_id"]
        for b in bricks
        if b["state"] != "SUPERSEDED" and (b["sources"][0]["run_id"], b["sources"][0]["json_path"]) == (RUN_ID, EDITED)
    }


def test_verify_names_exactly_the_bricks_of_the_edited_node(project: Project, capsys):
    run_json(capsys, *project.sync_args(TOPIC))
    before = run_json(capsys, *project.cli_args(), "bricks", TOPIC, "--all")
    expected = bricks_of_node(before)
    assert expected, "the sample run has bricks in the node we edit"
    edit_closed_run(project)

    report = run_json(capsys, *project.cli_args(), "verify", expect=1)
    assert report["ok"] is False
    assert set(report["stale_bricks"]) == expected
    assert all(d["json_path"] == EDITED and d["run_id"] == RUN_ID for d in report["drift"])

    after = {b["brick_id"]: b for b in run_json(capsys, *project.cli_args(), "bricks", TOPIC, "--all")}
    assert set(after) == {b["brick_id"] for b in before}, "no brick was deleted"
    assert {bid for bid, b in after.items() if b["stale"] and b["state"] != "SUPERSEDED"} == expected
    for b in before:
        assert after[b["brick_id"]]["content"] == b["content"]


def test_checksum_drift_check_fails_after_a_resync_of_an_edited_closed_run(project: Project):
    with dg.instance_for_test() as instance:
        assert check_results(materialize_topic(project, TOPIC, instance))["checksum_drift"]
        with Vault.open(project.db, read_only=True) as v:
            # Invariant 14: a brick is stale when its canonical source no longer matches.
            expected = {
                b.brick_id
                for b in v.bricks(TOPIC)
                if b.state != "SUPERSEDED" and (b.sources[0].json_path, b.sources[0].run_id) == (EDITED, RUN_ID)
            }
        edit_closed_run(project)
        result = materialize_topic(project, TOPIC, instance)
    (drift,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "checksum_drift"]
    assert not drift.passed
    assert drift.metadata["stale_bricks"].value == len(expected)
    assert {r.data["brick_id"] for r in drift.metadata["stale"].value.records} == expected
    with Vault.open(project.db, read_only=True) as v:
        stale = {b.brick_id for b in v.bricks(TOPIC) if b.stale and b.state != "SUPERSEDED"}
        assert stale == expected
        # The old version stays in the vault so the original address can still be shown.
        assert v.conn.execute("SELECT count(*) FROM runs WHERE run_id = ?", [RUN_ID]).fetchone()[0] == 2


# The sync's drift step and `nexus verify` see the same thing when a file is broken, rewritten
# with other runs, restored, or moved (invariant 14, DESIGN §7 exit codes).

NOTES = "vault-notes"


def small_project(p: Project) -> Project:
    p.write_topic(NOTES, keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "Keep the vault append-only. The vault is DuckDB.")]))
    p.write_run("b.json", nexus_run("run-b", [("user", "The vault is never edited by hand.")]))
    return p


def stale_now(capsys, p: Project) -> set[str]:
    return {b["brick_id"] for b in run_json(capsys, *p.cli_args(), "bricks", NOTES) if b["stale"]}


def bricks_from(capsys, p: Project, run_id: str) -> set[str]:
    return {b["brick_id"] for b in run_json(capsys, *p.cli_args(), "bricks", NOTES) if b["sources"][0]["run_id"] == run_id}


def sync(capsys, p: Project, *, expect: int) -> dict:
    (result,) = run_json(capsys, *p.sync_args(), expect=expect)
    return result


@pytest.mark.parametrize(
    "rewrite, problem",
    [
        (lambda data: data[:50], "no longer reads"),
        (lambda data: data.replace(b'"run-a"', b'"run-z"'), "run run-a is no longer in"),
    ],
    ids=["no-longer-reads", "other-run-id"],
)
def test_a_rewritten_source_file_is_stale_after_the_sync_and_restoring_it_clears_it(empty_project: Project, capsys, rewrite, problem):
    p = small_project(empty_project)
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    expected = bricks_from(capsys, p, "run-a")
    assert expected
    original = (p.runs / "a.json").read_bytes()
    (p.runs / "a.json").write_bytes(rewrite(original))

    # The sync recorded the file's new stat while reading it; its drift step still sees the drift.
    result = sync(capsys, p, expect=1)
    assert result["checks"]["checksum_drift"] is False
    assert stale_now(capsys, p) == expected
    report = run_json(capsys, *p.cli_args(), "verify", expect=1)
    assert set(report["stale_bricks"]) == expected
    assert all(problem in d["problem"] for d in report["drift"] if d["run_id"] == "run-a")

    (p.runs / "a.json").write_bytes(original)
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    assert stale_now(capsys, p) == set()
    assert run_json(capsys, *p.cli_args(), "verify")["ok"]


def test_a_moved_source_file_is_not_stale_and_is_found_by_its_new_path(empty_project: Project, capsys):
    p = small_project(empty_project)
    sync(capsys, p, expect=0)
    bricks = bricks_from(capsys, p, "run-a")
    (p.runs / "archive").mkdir()
    (p.runs / "a.json").rename(p.runs / "archive" / "a.json")

    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    assert stale_now(capsys, p) == set()
    assert run_json(capsys, *p.cli_args(), "verify")["ok"]
    with Vault.open(p.db, read_only=True) as v:
        assert v.run_sources(["run-a"])["run-a"][0] == str((p.runs / "archive" / "a.json").resolve())
    # Lineage and forget key on files: the new path and the old one both name the run.
    for path in (p.runs / "archive" / "a.json", p.runs / "a.json"):
        plan = run_json(capsys, *p.cli_args(), "lineage", "--file", str(path))
        assert plan["run_ids"] == ["run-a"]
        assert {b["brick_id"] for b in plan["bricks_alone"]} == bricks

    # A copy whose original is then removed is the same move, in two syncs.
    shutil.copy(p.runs / "archive" / "a.json", p.runs / "copy.json")
    sync(capsys, p, expect=0)
    (p.runs / "archive" / "a.json").unlink()
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    assert stale_now(capsys, p) == set()
    assert run_json(capsys, *p.cli_args(), "verify")["ok"]

    # Gone for good: stale, and a copy coming back clears it.
    (p.runs / "copy.json").rename(p.root / "elsewhere.json")
    sync(capsys, p, expect=1)
    assert stale_now(capsys, p) == bricks
    (p.root / "elsewhere.json").rename(p.runs / "back.json")
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    assert stale_now(capsys, p) == set()

    # Forgetting by the first path forgets the run and its bytes wherever they are now.
    report = run_json(capsys, *p.cli_args(), "forget", "--file", str(p.runs / "a.json"), "--reason", "test", "--yes")
    assert report["run_ids"] == ["run-a"] and set(report["bricks_removed"]) == bricks
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    assert bricks_from(capsys, p, "run-a") == set()


# Two versions of one node can hold a sentence at the same place (an edit elsewhere in the node,
# or one of case or spacing). The oldest is the brick's canonical source, whatever its text: the
# edit makes the brick stale (invariant 9), the restore makes it current again (invariant 14).

A_NODE = "$['messages'][0]['content']"


def brick_like(capsys, p: Project, text: str) -> dict:
    from nexus_assets.core.fingerprint import fingerprint

    (brick,) = [b for b in run_json(capsys, *p.cli_args(), "bricks", NOTES) if fingerprint(b["content"]) == fingerprint(text)]
    return brick


@pytest.mark.parametrize(
    "original, edited",
    [
        ("keep the vault append-only.", "Keep the vault append-only."),
        ("Keep the vault append-only.", "keep the vault append-only."),
        ("Keep the vault\tappend-only.", "Keep the vault append-only."),
    ],
    ids=["capitalised", "lowercased", "tab-for-space"],
)
def test_a_case_only_edit_makes_the_brick_stale_and_a_restore_makes_it_current(empty_project: Project, capsys, original, edited):
    p = empty_project
    p.write_topic(NOTES, keywords=["vault"])
    path = p.write_run("a.json", nexus_run("run-a", [("user", original)]))
    first = path.read_bytes()
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    before = brick_like(capsys, p, original)
    manifest = run_json(capsys, *p.cli_args(), "manifest", NOTES)["manifest_hash"]

    p.write_run("a.json", nexus_run("run-a", [("user", edited)]))
    assert sync(capsys, p, expect=1)["checks"]["checksum_drift"] is False
    now = brick_like(capsys, p, original)
    assert (now["brick_id"], now["content"], now["stale"]) == (before["brick_id"], original, True)
    assert now["sources"][0] == {**before["sources"][0], "stale": True}
    assert [s["stale"] for s in now["sources"]] == [True, False], "the edited version is linked, and current"
    assert run_json(capsys, *p.cli_args(), "verify", expect=1)["stale_bricks"] == [before["brick_id"]]

    path.write_bytes(first)
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    now = brick_like(capsys, p, original)
    assert (now["content"], now["stale"]) == (original, False)
    assert now["sources"][0] == before["sources"][0]
    traced = run_json(capsys, *p.cli_args(), "trace", now["brick_id"])
    assert traced["traces"][0]["current"] is True and traced["traces"][0]["quote"] == original
    assert run_json(capsys, *p.cli_args(), "verify")["stale_bricks"] == []
    assert run_json(capsys, *p.cli_args(), "manifest", NOTES)["manifest_hash"] == manifest, "content is not in the manifest"
    with Vault.open(p.db, read_only=True) as v:
        flips = v.source_status_history("run-a")
    checksum = before["sources"][0]["node_checksum"]
    assert [f["drifted"] for f in flips if (f["json_path"], f["node_checksum"]) == (A_NODE, checksum)] == [True, False]
