"""docs/architecture.md and invariant 14: check results are kept per topic partition, so one topic's pass never
hides another's failure; stale follows the files as they stand now, and every flip is kept."""

import json

import dagster as dg

from nexus_assets.core.paths import parse_normalized
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.dagster_helpers import latest_check_evaluation, materialize_topic
from nexus_assets_tests.project import Project

BROKEN = "nexus-server-sync"
OTHER = "storage-decisions"
# A CLOSED run whose node 1 backs only nexus-server-sync's bricks.
RUN_FILE = "nexus/2026-10-21-ordering-review.json"
RUN_ID = "run-2026-10-21-ordering-review"
NODE = "$['messages'][1]['content']"
DRIFT = dg.AssetCheckKey(dg.AssetKey("topic_manifest"), "checksum_drift")


def latest_drift(instance: dg.DagsterInstance, topic_id: str) -> dg.AssetCheckEvaluation:
    found = latest_check_evaluation(instance, DRIFT, topic_id)
    assert found is not None, topic_id
    _, evaluation = found
    assert evaluation.partition == topic_id
    return evaluation


def edit(project: Project) -> str:
    path = project.runs / RUN_FILE
    original = path.read_text(encoding="utf-8")
    doc = json.loads(original)
    doc["messages"][1]["content"] = "Quietly rewritten: " + doc["messages"][1]["content"]
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return original


def test_a_failed_check_stays_with_its_topic_until_that_topic_passes_again(project: Project, capsys):
    path = project.runs / RUN_FILE
    with dg.instance_for_test() as instance:
        for topic in (BROKEN, OTHER):
            assert materialize_topic(project, topic, instance).success
        with Vault.open(project.db, read_only=True) as v:
            assert not any(
                (s.run_id, s.json_path) == (RUN_ID, NODE) for b in v.bricks.select(OTHER) for s in b.sources
            ), "the edited node backs only one topic"
            expected = {
                b.brick_id
                for b in v.bricks.select(BROKEN, visible_only=True)
                if (b.sources[0].run_id, b.sources[0].json_path) == (RUN_ID, NODE)
            }
            original_checksum = next(
                s.node_checksum for b in v.bricks.select(BROKEN) for s in b.sources if (s.run_id, s.json_path) == (RUN_ID, NODE)
            )
        assert expected

        original = edit(project)
        # The broken topic first, then the other: the later pass must not hide the earlier failure.
        for topic in (BROKEN, OTHER):
            materialize_topic(project, topic, instance)
        broken, other = latest_drift(instance, BROKEN), latest_drift(instance, OTHER)
        assert not broken.passed and other.passed
        assert broken.metadata["topic_id"].value == BROKEN and other.metadata["topic_id"].value == OTHER
        assert int(broken.metadata["stale_bricks"].value) == len(expected)
        assert {r.data["brick"] for r in broken.metadata["stale"].value.records} == {b[:12] for b in expected}
        assert BROKEN in broken.description and "stale" in broken.description
        assert "stale" not in other.metadata, "nothing empty is shown"

        # verify, bricks, trace and the check agree on the same bricks.
        report = run_json(capsys, *project.cli_args(), "verify", expect=1)
        assert set(report["stale_bricks"]) == expected
        listed = run_json(capsys, *project.cli_args(), "bricks", BROKEN)
        assert {b["brick_id"] for b in listed if b["stale"]} == expected
        some = sorted(expected)[0]
        traced = run_json(capsys, *project.cli_args(), "trace", some)
        assert traced["stale"] is True and traced["traces"][0]["current"] is False

        path.write_text(original, encoding="utf-8")
        materialize_topic(project, BROKEN, instance)
        again = latest_drift(instance, BROKEN)
        assert again.passed, again.description
        assert latest_drift(instance, OTHER).passed

    listed = run_json(capsys, *project.cli_args(), "bricks", BROKEN)
    assert not any(b["stale"] for b in listed)
    # Addresses into the restored text match again; one recorded from the edited text (an extra
    # source of a brick it shared) truthfully no longer does.
    still = [s for b in listed for s in b["sources"] if s["stale"]]
    assert all(s["run_id"] == RUN_ID and s["json_path"] == NODE and s["node_checksum"] != original_checksum for s in still)
    traced = run_json(capsys, *project.cli_args(), "trace", some)
    assert traced["stale"] is False and traced["traces"][0]["current"] is True
    report = run_json(capsys, *project.cli_args(), "verify")
    assert report["ok"] is True and report["stale_bricks"] == []
    with Vault.open(project.db, read_only=True) as v:
        flips = [f for f in v.drift.source_status_history(RUN_ID) if (f["json_path"], f["node_checksum"]) == (NODE, original_checksum)]
    assert [f["drifted"] for f in flips] == [True, False], "every flip is kept"
    assert flips[0]["problem"] and flips[1]["problem"] is None


def test_each_source_of_a_linked_brick_has_its_own_status(project: Project, capsys):
    """A brick seen in two runs: only the edited run's source turns stale, and the brick only when
    that source is its canonical one."""
    run_json(capsys, *project.sync_args())
    linked = [b for t in (BROKEN, OTHER) for b in run_json(capsys, *project.cli_args(), "bricks", t) if len(b["sources"]) > 1]
    assert linked, "the sample data links a brick across runs"
    brick = linked[0]
    second = brick["sources"][1]
    doc_path = next(p for p in project.runs.rglob("*.json") if f'"{second["run_id"]}"' in p.read_text(encoding="utf-8"))
    doc = json.loads(doc_path.read_text(encoding="utf-8"))
    steps = parse_normalized(second["json_path"])
    target = doc
    for step in steps[:-1]:
        target = target[step]
    assert isinstance(target[steps[-1]], str)
    target[steps[-1]] += " (edited later)"
    doc_path.write_text(json.dumps(doc, indent=1), encoding="utf-8")

    report = run_json(capsys, *project.cli_args(), "verify")
    assert report["stale_bricks"] == [], "no brick is stale: its canonical source still matches"
    assert any(d["brick_id"] == brick["brick_id"] and d["run_id"] == second["run_id"] for d in report["drift"])
    after = next(b for b in run_json(capsys, *project.cli_args(), "bricks", brick["topic_id"]) if b["brick_id"] == brick["brick_id"])
    assert [s["stale"] for s in after["sources"]] == [False, True]
    assert after["stale"] is False, "the canonical source still matches"
    traced = run_json(capsys, *project.cli_args(), "trace", brick["brick_id"])
    assert [t["current"] for t in traced["traces"]] == [True, False]
    assert traced["traces"][0]["node_checksum"] != traced["traces"][1]["node_checksum"] or traced["traces"][0]["run_id"] != traced["traces"][1]["run_id"]
