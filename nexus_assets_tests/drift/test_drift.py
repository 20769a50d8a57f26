"""Invariant 9: a source that changes after a sync flags exactly its bricks stale; nothing is deleted."""

import json
import shutil

import dagster as dg
import pytest

from nexus_assets.store import Vault
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
                for b in v.bricks.select(TOPIC)
                if b.state != "SUPERSEDED" and (b.sources[0].json_path, b.sources[0].run_id) == (EDITED, RUN_ID)
            }
        edit_closed_run(project)
        result = materialize_topic(project, TOPIC, instance)
    (drift,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "checksum_drift"]
    assert not drift.passed
    assert int(drift.metadata["stale_bricks"].value) == len(expected)  # a figure as text: no plot mixing topics
    assert {r.data["brick"] for r in drift.metadata["stale"].value.records} == {b[:12] for b in expected}
    with Vault.open(project.db, read_only=True) as v:
        stale = {b.brick_id for b in v.bricks.select(TOPIC) if b.stale and b.state != "SUPERSEDED"}
        assert stale == expected
        # The old version stays in the vault so the original address can still be shown.
        assert v.conn.execute("SELECT count(*) FROM runs WHERE run_id = ?", [RUN_ID]).fetchone()[0] == 2


# The sync's drift step and `nexus verify` see the same thing when a file is broken, rewritten
# with other runs, restored, or moved (invariant 14, docs/cli.md exit codes).

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


def drift_passed(result: dict) -> bool:
    """The drift check passed, or the topic had nothing new (a file moved with its bytes): checked
    before the sync and not compiled (issue 52), so nothing could have drifted."""
    return result["checks"]["checksum_drift"] if result["dagster_run_id"] else result["unchanged"] is True


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

    assert drift_passed(sync(capsys, p, expect=0))
    assert stale_now(capsys, p) == set()
    assert run_json(capsys, *p.cli_args(), "verify")["ok"]
    with Vault.open(p.db, read_only=True) as v:
        assert v.runs.run_sources(["run-a"])["run-a"][0] == str((p.runs / "archive" / "a.json").resolve())
    # Lineage and forget key on files: the new path and the old one both name the run.
    for path in (p.runs / "archive" / "a.json", p.runs / "a.json"):
        plan = run_json(capsys, *p.cli_args(), "lineage", "--file", str(path))
        assert plan["run_ids"] == ["run-a"]
        assert {b["brick_id"] for b in plan["bricks_alone"]} == bricks

    # A copy whose original is then removed is the same move, in two syncs.
    shutil.copy(p.runs / "archive" / "a.json", p.runs / "copy.json")
    sync(capsys, p, expect=0)
    (p.runs / "archive" / "a.json").unlink()
    assert drift_passed(sync(capsys, p, expect=0))
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
        flips = v.drift.source_status_history("run-a")
    checksum = before["sources"][0]["node_checksum"]
    assert [f["drifted"] for f in flips if (f["json_path"], f["node_checksum"]) == (A_NODE, checksum)] == [True, False]


# An edit that is undone: the brick made from the edited text read text that no file holds any
# more. It is superseded history (kept, traceable, hidden), not a visible stale brick, and the
# topic reads as if the edit never happened (invariant 14); a FINAL brick would stay (invariant 7).


def test_an_edit_then_a_restore_leaves_the_topic_as_if_the_edit_never_happened(empty_project: Project, capsys):
    p = small_project(empty_project)
    original = (p.runs / "a.json").read_bytes()
    edited = original.replace(b"The vault is DuckDB.", b"The vault is SQLite.")
    assert edited != original
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    before = run_json(capsys, *p.cli_args(), "bricks", NOTES, "--all")
    manifest = run_json(capsys, *p.cli_args(), "manifest", NOTES)

    (p.runs / "a.json").write_bytes(edited)
    assert sync(capsys, p, expect=1)["checks"]["checksum_drift"] is False, "the original brick is stale (invariant 9)"
    made_from_edit = brick_like(capsys, p, "The vault is SQLite.")
    assert made_from_edit["stale"] is False

    (p.runs / "a.json").write_bytes(original)
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    # The unchanged sentence of the edited node stays linked to the edited version too (history, stale).
    now = run_json(capsys, *p.cli_args(), "bricks", NOTES)
    assert [{**b, "sources": [s for s in b["sources"] if not s["stale"]]} for b in now] == [b for b in before if b["state"] != "SUPERSEDED"]
    assert [s["stale"] for b in now for s in b["sources"]] == [False, True, False, False]
    assert run_json(capsys, *p.cli_args(), "manifest", NOTES) == manifest
    report = run_json(capsys, *p.cli_args(), "verify")
    assert (report["ok"], report["stale_bricks"]) == (True, [])
    history = {b["brick_id"]: b for b in run_json(capsys, *p.cli_args(), "bricks", NOTES, "--all")}
    kept = history[made_from_edit["brick_id"]]
    assert (kept["state"], kept["content"], kept["stale"], kept["order_index"]) == ("SUPERSEDED", "The vault is SQLite.", True, None)
    assert kept["sources"] == [{**made_from_edit["sources"][0], "stale": True}]
    recalled = run_json(capsys, *p.cli_args(), "recall", "Which database is the vault?", "--topic", NOTES)["results"]
    assert recalled and all("SQLite" not in r["content"] for r in recalled)
    answer = run_json(capsys, *p.cli_args(), "ask", "Which database is the vault?", "--topic", NOTES)
    assert answer["refused"] is False and "SQLite" not in answer["answer"]

    # The episode is kept: the original node drifted and came back; the edited one is drifted now.
    with Vault.open(p.db, read_only=True) as v:
        flips = [(f["node_checksum"], f["drifted"]) for f in v.drift.source_status_history("run-a")]
    first_checksum = before[0]["sources"][0]["node_checksum"]
    assert flips[0] == (first_checksum, True), "the edit"
    assert sorted(flips[1:]) == sorted([(first_checksum, False), (made_from_edit["sources"][0]["node_checksum"], True)]), "the restore"

    # The edit made again is the truth again: its brick is back, the original stale.
    (p.runs / "a.json").write_bytes(edited)
    assert sync(capsys, p, expect=1)["checks"]["checksum_drift"] is False
    assert brick_like(capsys, p, "The vault is SQLite.") == made_from_edit
    (p.runs / "a.json").write_bytes(original)
    assert sync(capsys, p, expect=0)["checks"]["checksum_drift"]
    assert run_json(capsys, *p.cli_args(), "manifest", NOTES)["manifest_hash"] == manifest["manifest_hash"]


def test_resolution_of_withdrawn_sources_is_a_function_of_the_set():
    """The rule in the core, without a vault: a brick only withdrawn sources hold is superseded
    history and supersedes nothing; a withdrawn source is never canonical while another is not."""
    import itertools

    from nexus_assets.resolve.rules import resolve_topic
    from nexus_assets_tests.strategies import TOPIC, make_run, occ, statuses

    edited = make_run("run-a", ["The vault is SQLite and fast."], status="CLOSED")
    old = make_run("run-a", ["The vault is fast."], status="CLOSED")
    other = make_run("run-b", ["The vault is SQLite and fast."], status="OPEN")
    fragment = make_run("run-c", ["The vault is SQLite"], status="OPEN")
    withdrawn_occ, linked, kept, small = occ(edited, "The vault is SQLite and fast."), occ(other, "The vault is SQLite and fast."), occ(old, "The vault is fast."), occ(fragment, "The vault is SQLite")
    status = statuses(edited, other, fragment)

    def resolved(occurrences, withdrawn):
        return {b.brick_id: b for b in resolve_topic(TOPIC, occurrences, run_status=status, withdrawn=withdrawn)}

    alone = [withdrawn_occ, kept, small]
    results = [resolved(list(p), {withdrawn_occ.address}) for p in itertools.permutations(alone)]
    assert all(r == results[0] for r in results), "order-independent"
    by_text = {b.content: b for b in results[0].values()}
    history = by_text["The vault is SQLite and fast."]
    assert (history.state, history.superseded_by, history.order_index) == ("SUPERSEDED", None, None)
    assert by_text["The vault is SQLite"].state == "IMPROVISE", "a withdrawn brick supersedes nothing"
    # With the withdrawal lifted, the same occurrences resolve as before.
    assert resolved(alone, set())[history.brick_id].state == "FORMING"

    # Linked to a live source: visible, and the live source is canonical.
    linked_brick = resolved([withdrawn_occ, linked, kept], {withdrawn_occ.address})[history.brick_id]
    assert linked_brick.state == "IMPROVISE" and linked_brick.sources == (linked.address, withdrawn_occ.address)
