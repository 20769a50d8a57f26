"""Recall is optional where a user says so (issue 33 item 3): `nexus sync --no-recall` and
NEXUS_NO_RECALL=1 leave the recall group (embeddings, vector index) out of the same Dagster jobs;
`nexus recall` on such a vault says how to build the embeddings; a later sync without the switch
builds only what is missing, and publishes nothing new."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from nexus_assets.defs.jobs import COMPILE_ASSETS, without_recall
from nexus_assets.defs.resources import NexusSettings
from nexus_assets.defs.schedules import nightly_sync
from nexus_assets.definitions import defs
from nexus_assets.embedding.embedder import MODEL
from nexus_assets.recall.index import vector_index_dir
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json, run_nexus
from nexus_assets_tests.project import Project, nexus_run

TOPICS = ("nexus-server-sync", "storage-decisions")


def embedding_count(p: Project) -> int:
    with Vault.open(p.db, read_only=True) as v:
        return v.recall.embedding_count(MODEL)


def visible_fingerprints(p: Project) -> int:
    with Vault.open(p.db, read_only=True) as v:
        return len({b.fingerprint for t in TOPICS for b in v.bricks.select(t, visible_only=True)})


def test_the_selection_without_recall_is_the_topic_graph_less_the_recall_group():
    specs = defs.resolve_all_asset_specs()
    compile_graph = {s.key for s in specs if s.group_name not in ("recall", "raw_runs")} | {dg.AssetKey("raw_runs")}
    assert set(without_recall(ingest=False)) == compile_graph
    assert set(without_recall(ingest=True)) == {s.key for s in specs if s.group_name != "recall"}
    assert {s.key.path[-1] for s in specs if s.group_name == "recall"} == {"brick_embeddings", "vector_index", "passage_index"}
    assert len(COMPILE_ASSETS) == len(set(COMPILE_ASSETS))


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_sync_without_recall_builds_no_index_and_a_later_sync_builds_only_what_is_missing(project: Project, capsys, monkeypatch, how):
    if how == "flag":
        first = run_json(capsys, *project.sync_args(), "--no-recall")
    else:
        monkeypatch.setenv("NEXUS_NO_RECALL", "1")
        first = run_json(capsys, *project.sync_args())
        monkeypatch.delenv("NEXUS_NO_RECALL")
    assert [r["success"] for r in first] == [True, True]
    # The compile graph's checks still ran and passed; the recall group's did not run.
    for r in first:
        assert {"hallucination_rejection", "checksum_drift", "final_immutability"} <= set(r["checks"]), r["checks"]
        assert "vector_index_in_step" not in r["checks"] and all(r["checks"].values())
    assert not any(vector_index_dir(project.db, t).exists() for t in TOPICS)
    # The offline extractor embedded each statement it kept, to judge its relevance (issue 40): those
    # are the vectors recall needs, so a vault synced without recall can still be recalled.
    with Vault.open(project.db, read_only=True) as v:
        assert all(v.recall.fingerprints_without_embedding(t, MODEL) == [] for t in TOPICS)
    recalled = run_json(capsys, *project.cli_args(), "recall", "Where should the vault live?")
    assert recalled["results"] and recalled["not_embedded"] == 0

    # The next sync with recall is not skipped as unchanged: it builds what is missing (the index
    # is checked, relations are made), embeds nothing new, and the manifests stay as they were.
    before = embedding_count(project)
    second = run_json(capsys, *project.sync_args())
    assert [r["manifest_hash"] for r in second] == [r["manifest_hash"] for r in first]
    assert all(r["checks"].get("vector_index_in_step") is True for r in second)
    assert embedding_count(project) == before >= visible_fingerprints(project) > 0


def test_recall_over_a_partly_embedded_vault_works_and_says_what_it_cannot_see(project: Project, capsys):
    run_json(capsys, *project.sync_args())
    project.write_run("later.json", nexus_run("run-later", [("user", "The vault keeps a brand new sync brick about compiler manifests.")]))
    run_json(capsys, *project.sync_args(), "--no-recall")
    # A brick without a vector, as the openai extractor leaves one after a sync without recall (the
    # offline extractor embeds what it keeps).
    with Vault.open(project.db) as v:
        v.conn.execute(
            "DELETE FROM embeddings WHERE fingerprint IN (SELECT fingerprint FROM bricks WHERE content = ?)",
            ["The vault keeps a brand new sync brick about compiler manifests."],
        )
    code, out, err = run_cli(capsys, *project.cli_args(), "recall", "Where should the vault live?")
    assert code == 0 and "not embedded yet" in err
    recalled = run_json(capsys, *project.cli_args(), "recall", "Where should the vault live?")
    assert recalled["results"] and recalled["not_embedded"] >= 1


def test_the_switch_is_read_as_a_switch(project: Project):
    """NEXUS_NO_RECALL=0 (or empty) keeps recall on; the real command honours the variable."""
    done = run_nexus(*project.sync_args(), "--json", env={"NEXUS_NO_RECALL": "0"})
    assert done.returncode == 0, done.stderr
    assert embedding_count(project) > 0


def test_scheduled_and_sensor_runs_leave_recall_out_when_the_settings_say_so(project: Project):
    settings = NexusSettings(runs_dir=str(project.runs), topics_dir=str(project.topics), recall=False)
    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(
            instance=instance, resources={"settings": settings}, scheduled_execution_time=dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)
        ) as context:
            requests = list(nightly_sync(context))
    assert requests and all(r.asset_selection == without_recall(ingest=True) for r in requests)
    on = NexusSettings(runs_dir=str(project.runs), topics_dir=str(project.topics))
    assert on.run_selection() is None
