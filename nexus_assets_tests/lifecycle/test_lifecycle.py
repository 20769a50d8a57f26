"""Topic lifecycle (docs/invariants.md §7): DRAFT → ACTIVE → SEALING → LOCKED, with who and when of every step.

Real run files, a real DuckDB vault, the real `nexus` command and real Dagster materializations.
"""

import getpass
import os

import dagster as dg
import pytest

from nexus_assets.definitions import defs
from nexus_assets.lifecycle.rules import StateLineError, set_state_line
from nexus_assets.lifecycle.step import sealed_manifest, sealed_snapshot, topic_history
from nexus_assets.topics.files import read_topic_file
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.dagster_helpers import check_results, materialize_topic
from nexus_assets_tests.lifecycle_helpers import (
    CLOSED_RUN,
    OPEN_RUN,
    TOPIC,
    TOPIC_FILE,
    identity,
    seal_args,
    sealed_walk,
    write_walk_project,
)
from nexus_assets_tests.project import Project, nexus_run


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.splitlines(), after.splitlines()
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b) if x != y]


def bricks(capsys, p: Project) -> list[dict]:
    return run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")


def test_one_topic_walks_from_draft_to_locked_and_its_bricks_never_change(empty_project: Project, capsys):
    p = empty_project
    write_walk_project(p)
    topic_file = p.topics / f"{TOPIC}.yaml"

    # DRAFT: never compiled, by name or by default.
    code, _, err = run_cli(capsys, *p.sync_args(TOPIC))
    assert code == 2 and "DRAFT" in err and f"nexus activate {TOPIC}" in err
    code, _, err = run_cli(capsys, *p.sync_args())
    assert code == 2 and "no ACTIVE topics" in err

    # The human gate rewrites the state line only; comments and layout stay.
    activated = run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    assert activated["state"] == "ACTIVE" and activated["file_rewritten"] is True
    assert changed_lines(TOPIC_FILE, topic_file.read_text()) == [
        ("state: DRAFT   # a person flips this with `nexus activate walk`", "state: ACTIVE   # a person flips this with `nexus activate walk`")
    ]

    # ACTIVE with one run open: IMPROVISE and FORMING bricks.
    run_json(capsys, *p.sync_args(TOPIC))
    first = {b["brick_id"]: b for b in bricks(capsys, p)}
    by_run = {b["sources"][0]["run_id"]: [] for b in first.values()}
    for b in first.values():
        by_run[b["sources"][0]["run_id"]].append(b["state"])
    assert set(by_run[OPEN_RUN]) == {"IMPROVISE"} and set(by_run[CLOSED_RUN]) == {"FORMING"}
    assert len(first) == 3

    code, _, err = run_cli(capsys, *seal_args(p))
    assert code == 1 and "open_runs" in err and OPEN_RUN in err

    # Closed: every brick FORMING, byte-identical otherwise.
    run_json(capsys, *p.cli_args(), "close", OPEN_RUN)
    run_json(capsys, *p.sync_args(TOPIC))
    second = {b["brick_id"]: b for b in bricks(capsys, p)}
    assert {b["state"] for b in second.values()} == {"FORMING"}
    assert {k: identity(b) for k, b in second.items()} == {k: identity(b) for k, b in first.items()}

    # Sealed: every brick FINAL, byte-identical otherwise; the file says LOCKED, nothing else changed.
    before_seal = topic_file.read_text()
    sealed = run_json(capsys, *seal_args(p))
    assert sealed["state"] == "LOCKED" and sealed["bricks"] == 3 and sealed["file_updated"] is True
    third = {b["brick_id"]: b for b in bricks(capsys, p)}
    assert {b["state"] for b in third.values()} == {"FINAL"}
    assert {k: identity(b) for k, b in third.items()} == {k: identity(b) for k, b in first.items()}
    assert changed_lines(before_seal, topic_file.read_text()) == [
        ("state: ACTIVE   # a person flips this with `nexus activate walk`", "state: LOCKED   # a person flips this with `nexus activate walk`")
    ]
    assert read_topic_file(topic_file).topic.state == "LOCKED"

    manifest = run_json(capsys, *p.cli_args(), "manifest", TOPIC)
    assert manifest["manifest_hash"] == sealed["manifest_hash"]
    assert [e["state"] for e in manifest["bricks"]] == ["FINAL"] * 3
    assert [e["brick_id"] for e in manifest["bricks"]] == [b["brick_id"] for b in bricks(capsys, p)]

    user = os.environ.get("USER") or getpass.getuser()
    with Vault.open(p.db, read_only=True) as v:
        history = [(h["from_state"], h["to_state"], h["actor"]) for h in topic_history(v, TOPIC)]
        assert history == [
            (None, "DRAFT", "topic file"),
            ("DRAFT", "ACTIVE", f"{user} (nexus activate)"),
            ("ACTIVE", "SEALING", f"{user} (nexus seal)"),
            ("SEALING", "LOCKED", f"{user} (nexus seal)"),
        ]
        stamps = [h["changed_at"] for h in topic_history(v, TOPIC)]
        assert stamps == sorted(stamps)
        assert sealed_manifest(v, TOPIC).manifest_hash == sealed["manifest_hash"]
        assert set(sealed_snapshot(v, TOPIC)) == set(third)
        assert [m.manifest_hash for m in v.bricks.manifests(TOPIC)][-1] == sealed["manifest_hash"]
        assert len(v.bricks.manifests(TOPIC)) == 3

    # Sealing twice changes nothing; verify is clean.
    again = run_json(capsys, *seal_args(p))
    assert again["already_sealed"] is True and again["manifest_hash"] == sealed["manifest_hash"]
    assert run_json(capsys, *p.cli_args(), "verify")["ok"] is True


def test_a_locked_topic_reports_new_runs_and_compiles_none_of_them(empty_project: Project):
    p = empty_project
    sealed_walk(p)
    with Vault.open(p.db, read_only=True) as v:
        before = v.bricks.select(TOPIC)
        manifests = v.bricks.manifests(TOPIC)
    p.write_run("late.json", nexus_run("r-late", [("user", "A late thought about the sync engine.")], start="2026-03-01T00:00:00Z"))
    with dg.instance_for_test() as instance:
        result = materialize_topic(p, TOPIC, instance)
    assert result.success
    assert check_results(result) == {
        "hallucination_rejection": True, "checksum_drift": True, "final_immutability": True, "extraction_quality": True,
        "vector_index_in_step": True, "open_conflicts": True,
        "passages_verbatim": True, "passage_index_in_step": True,
    }
    raw = result.asset_materializations_for_node("raw_runs")[0].metadata
    assert raw["topic_state"].value == "LOCKED"
    assert raw["runs_ignored_locked"].value == 1
    assert [r.data["run_id"] for r in raw["ignored_runs"].value.records] == ["r-late"]
    assert result.asset_materializations_for_node("topic_manifest")[0].metadata["new_manifest"].value is False
    with Vault.open(p.db, read_only=True) as v:
        assert v.bricks.select(TOPIC) == before
        assert v.bricks.manifests(TOPIC) == manifests
        assert v.runs.latest_versions().keys() >= {"r-late"}
        assert not any(o.address.run_id == "r-late" for o, _ in v.occurrences.stream(TOPIC))


def test_the_seal_topic_job_seals_through_dagster(empty_project: Project, capsys):
    p = empty_project
    write_walk_project(p)
    run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    run_json(capsys, *p.sync_args(TOPIC))
    from nexus_assets.definitions import build_defs

    job = build_defs(db_path=str(p.db), runs_dir=str(p.runs), topics_dir=str(p.topics)).resolve_job_def("seal_topic")
    assert job.partitions_def.name == "topics"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("topics", [TOPIC])
        refused = job.execute_in_process(partition_key=TOPIC, instance=instance, raise_on_error=False)
        assert not refused.success
        failure = next(e for e in refused.all_events if e.is_step_failure)
        assert "gate open_runs" in failure.event_specific_data.error.message and OPEN_RUN in failure.event_specific_data.error.message

        run_json(capsys, *p.cli_args(), "close", OPEN_RUN)
        run_json(capsys, *p.sync_args(TOPIC))
        done = job.execute_in_process(partition_key=TOPIC, instance=instance)
        assert done.success
        (event,) = done.get_asset_materialization_events()
        materialization = event.event_specific_data.materialization
        assert materialization.asset_key == dg.AssetKey("topic_manifest") and materialization.partition == TOPIC
        assert materialization.metadata["sealed"].value is True
    with Vault.open(p.db, read_only=True) as v:
        assert v.topic_state(TOPIC) == "LOCKED"
        assert {b.state for b in v.bricks.select(TOPIC)} == {"FINAL"}
        assert topic_history(v, TOPIC)[-1]["actor"].startswith("seal_topic job (run ")
    assert read_topic_file(p.topics / f"{TOPIC}.yaml").topic.state == "LOCKED"


def test_editing_the_ordering_rule_of_an_active_topic_is_refused(empty_project: Project, capsys):
    p = empty_project
    write_walk_project(p)
    run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    run_json(capsys, *p.sync_args(TOPIC))
    with Vault.open(p.db, read_only=True) as v:
        manifests = v.bricks.manifests(TOPIC)
    path = p.topics / f"{TOPIC}.yaml"
    path.write_text(path.read_text().replace("ordering_rule: chronological", "ordering_rule: source-run-order"))

    code, _, err = run_cli(capsys, *p.sync_args(TOPIC))
    assert code == 2
    assert f"topic '{TOPIC}' has been ACTIVE with ordering_rule 'chronological'" in err
    assert "create a new topic" in err and "Nothing was compiled" in err

    with dg.instance_for_test() as instance:
        result = materialize_topic(p, TOPIC, instance)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "raw_runs"
    message = failure.event_specific_data.error.message
    assert f"topic '{TOPIC}'" in message and "ordering_rule" in message and "create a new topic" in message
    with Vault.open(p.db, read_only=True) as v:
        assert v.topics.topic(TOPIC).ordering_rule == "chronological"
        assert v.bricks.manifests(TOPIC) == manifests

    # Put back, it syncs again.
    path.write_text(path.read_text().replace("ordering_rule: source-run-order", "ordering_rule: chronological"))
    assert run_cli(capsys, *p.sync_args(TOPIC))[0] == 0


def test_renaming_the_topic_id_of_an_active_topic_file_is_refused(empty_project: Project, capsys):
    p = empty_project
    write_walk_project(p)
    run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    run_json(capsys, *p.sync_args(TOPIC))
    path = p.topics / f"{TOPIC}.yaml"
    path.write_text(path.read_text().replace("topic_id: walk ", "topic_id: stroll"))
    code, _, err = run_cli(capsys, *p.sync_args("stroll"))
    assert code == 2
    assert "defined topic 'walk', which has been ACTIVE, and now says topic_id 'stroll'" in err
    assert "create a new topic" in err
    with Vault.open(p.db, read_only=True) as v:
        assert v.topics.topic("stroll") is None


def test_a_topic_file_cannot_seal_a_topic_by_saying_locked(empty_project: Project, capsys):
    p = empty_project
    write_walk_project(p, topic_file=TOPIC_FILE.replace("state: DRAFT", "state: LOCKED"))
    code, _, err = run_cli(capsys, *p.sync_args(TOPIC))
    assert code == 2 and "was never sealed" in err and f"nexus seal {TOPIC}" in err
    with Vault.open(p.db, read_only=True) as v:
        assert v.topics.topic(TOPIC) is None


def test_activate_refuses_what_it_cannot_do(empty_project: Project, capsys):
    p = empty_project
    write_walk_project(p)
    code, _, err = run_cli(capsys, *p.cli_args(), "activate", "nope", "--topics-dir", str(p.topics))
    assert code == 2 and "no valid topic file defines 'nope'" in err and "nexus discover" in err
    run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    again = run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    assert again["previous_state"] == "ACTIVE" and again["file_rewritten"] is False
    assert len(again["transitions"]) == 2

    code, _, err = run_cli(capsys, *p.cli_args(), "seal", TOPIC, "--topics-dir", str(p.topics), "--runs-dir", str(p.runs))
    assert code == 1 and "never been synced" in err


def test_activate_after_seal_is_refused(empty_project: Project, capsys):
    p = empty_project
    sealed_walk(p)
    code, _, err = run_cli(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    assert code == 2 and "LOCKED" in err and "new topic" in err


def test_a_sync_never_creates_a_topic(project: Project, capsys):
    run_json(capsys, *project.sync_args())
    with Vault.open(project.db, read_only=True) as v:
        assert {t.topic_id for t in v.topics.all()} == {p.stem for p in project.topics.glob("*.yaml")}


def test_definitions_carry_the_seal_job():
    assert defs.resolve_job_def("seal_topic").partitions_def.name == "topics"
    assert {k.name for k in defs.get_repository_def().asset_graph.asset_check_keys} >= {"final_immutability"}


@pytest.mark.parametrize(
    "before, after",
    [
        ("state: DRAFT\n", "state: ACTIVE\n"),
        ("a: 1\nstate: DRAFT   # keep me\nb: 2\n", "a: 1\nstate: ACTIVE   # keep me\nb: 2\n"),
        ("state: 'DRAFT'\n", "state: 'ACTIVE'\n"),
        ('state:   "DRAFT"  # quoted\n', 'state:   "ACTIVE"  # quoted\n'),
        ("a: 1\r\nstate: DRAFT\r\n", "a: 1\r\nstate: ACTIVE\r\n"),
        ("a: 1\nstate:\n", "a: 1\nstate: ACTIVE\n"),
        ("a: 1\n", "a: 1\nstate: ACTIVE\n"),
        ("a: 1", "a: 1\nstate: ACTIVE\n"),
        ("a:\n  state: nested\nstate: DRAFT", "a:\n  state: nested\nstate: ACTIVE"),
    ],
)
def test_set_state_line_changes_the_value_only(before, after):
    assert set_state_line(before, "ACTIVE") == after


def test_set_state_line_refuses_two_state_lines():
    with pytest.raises(StateLineError, match="2 top-level `state:` lines"):
        set_state_line("state: DRAFT\nstate: ACTIVE\n", "ACTIVE")


def test_activate_refuses_a_flow_style_topic_file_it_cannot_rewrite_and_leaves_it_as_it_was(empty_project: Project, capsys):
    p = empty_project
    p.topics.mkdir(parents=True, exist_ok=True)
    path = p.topics / "flow.yaml"
    text = '{"topic_id": "flow", "display_name": "Flow", "extraction_policy": {"scope_description": "x"}, "state": "DRAFT"}\n'
    path.write_text(text, encoding="utf-8")
    assert read_topic_file(path).topic is not None, "a valid topic file"
    code, _, err = run_cli(capsys, *p.cli_args(), "activate", "flow", "--topics-dir", str(p.topics))
    assert code == 2
    assert "set `state: ACTIVE` by hand" in err and "Traceback" not in err
    assert path.read_text(encoding="utf-8") == text
