"""One Dagster run per sync (issue 60 item 3, docs/architecture.md): the run files are ingested and
every topic compiles in one run over a range of topic partitions, each asset once for all of them,
and every check still reports one evaluation per topic. A topic whose partition is not next to the
others' takes a run of its own stretch; a step that fails for one topic holds back no other (the
range is compiled again one run per topic); a topic with nothing new does no step work."""

from __future__ import annotations

import dagster as dg
import pytest

import nexus_assets.defs.assets as assets
from nexus_assets.services.sync import SyncRequest, check, run
from nexus_assets_tests.project import Project, nexus_run

pytestmark = pytest.mark.slow

TOPICS = ["alpha", "beta", "gamma"]
CHECKS = {"hallucination_rejection", "checksum_drift", "final_immutability", "extraction_quality", "open_conflicts"}


def _project(p: Project) -> Project:
    """Three topics, each reading its own folder (so a new file in one is nothing new for the others)."""
    for t in TOPICS:
        path = p.write_topic(t, keywords=[t])
        path.write_text(path.read_text() + f"sources:\n  files: ['{t}/*']\n")
        p.write_run(f"{t}/one.json", nexus_run(f"run-{t}", [("user", f"The {t} vault keeps its notes nightly.")]))
    return p


def _sync(p: Project, instance, **kw):
    request = SyncRequest(db=str(p.db), runs_dir=str(p.runs), topics_dir=str(p.topics), no_recall=True, **kw)
    return run(check(request), instance=instance)


def _evaluations(instance, run_id: str) -> dict[str, set[str | None]]:
    """Each check's partitions evaluated in the run."""
    out: dict[str, set[str | None]] = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        e = entry.dagster_event.event_specific_data
        out.setdefault(e.check_name, set()).add(e.partition)
    return out


def test_a_sync_of_three_topics_is_one_run_and_each_check_reports_per_topic(empty_project: Project):
    p = _project(empty_project)
    with dg.instance_for_test() as instance:
        outcome = _sync(p, instance)
        assert not outcome.failed and [r["topic_id"] for r in outcome.results] == TOPICS
        (run_id,) = outcome.dagster_run_ids
        assert [r.run_id for r in instance.get_runs()] == [run_id]
        assert {r["dagster_run_id"] for r in outcome.results} == {run_id}
        # Every check of the topic graph: one evaluation per topic (and, a range's sum, one without).
        evaluated = _evaluations(instance, run_id)
        for name in CHECKS:
            assert evaluated[name] - {None} == set(TOPICS), (name, evaluated[name])
        for r in outcome.results:
            assert set(r["checks"]) == CHECKS and all(r["checks"].values()), r
        # Each topic's partition of each asset is materialized once, with its own metadata.
        for t in TOPICS:
            (m,) = [e for e in instance.fetch_materializations(dg.AssetKey("topic_manifest"), limit=10).records
                    if e.event_log_entry.asset_materialization.partition == t]
            assert m.event_log_entry.asset_materialization.metadata["topic_id"].value == t


def test_a_topic_with_nothing_new_does_no_step_work_in_the_run(empty_project: Project):
    p = _project(empty_project)
    with dg.instance_for_test() as instance:
        first = _sync(p, instance)
        p.write_run("beta/two.json", nexus_run("run-beta-2", [("user", "The beta vault also keeps a second note.")]))
        second = _sync(p, instance)
        (run_id,) = second.dagster_run_ids
        by_topic = {r["topic_id"]: r for r in second.results}
        assert by_topic["beta"]["dagster_run_id"] == run_id and by_topic["beta"]["manifest_hash"] != first.results[1]["manifest_hash"]
        for t in ("alpha", "gamma"):
            assert by_topic[t]["unchanged"] is True and by_topic[t]["dagster_run_id"] is None
        # The run left them alone: no check evaluated them, their steps record only that.
        evaluated = _evaluations(instance, run_id)
        assert all(evaluated[name] - {None} == {"beta"} for name in CHECKS), evaluated
        records = instance.fetch_materializations(dg.AssetKey("pointer_extractions"), limit=3).records
        skipped = {r.event_log_entry.asset_materialization.partition for r in records
                   if r.event_log_entry.run_id == run_id and "nothing_new" in r.event_log_entry.asset_materialization.metadata}
        assert skipped == {"alpha", "gamma"}


def test_topics_whose_partitions_are_apart_take_a_run_per_stretch(empty_project: Project):
    p = _project(empty_project)
    with dg.instance_for_test() as instance:
        _sync(p, instance)  # the partitions: alpha, beta, gamma
        outcome = _sync(p, instance, topics=("alpha", "gamma"), force=True)
        assert not outcome.failed and len(outcome.dagster_run_ids) == 2
        assert [r["topic_id"] for r in outcome.results] == ["alpha", "gamma"]


def test_a_step_that_fails_for_one_topic_holds_back_no_other(empty_project: Project, monkeypatch: pytest.MonkeyPatch):
    p = _project(empty_project)
    real = assets._validated_bricks

    def failing(context, vault, settings, extractor, topic_id):
        if topic_id == "beta":
            raise dg.Failure("beta: the gate broke (a test)")
        return real(context, vault, settings, extractor, topic_id)

    monkeypatch.setattr(assets, "_validated_bricks", failing)
    with dg.instance_for_test() as instance:
        outcome = _sync(p, instance)
    by_topic = {r["topic_id"]: r for r in outcome.results}
    assert outcome.failed
    assert by_topic["alpha"]["success"] and by_topic["gamma"]["success"] and by_topic["alpha"]["manifest_hash"]
    assert not by_topic["beta"]["success"] and any("the gate broke" in e for e in by_topic["beta"]["errors"])
    # The range's run, then one run per topic.
    assert len(outcome.dagster_run_ids) == 4
