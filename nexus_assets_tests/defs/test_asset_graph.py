"""The topic asset graph, materialized for real with Dagster against real DuckDB files."""

import shutil

import dagster as dg
import pytest

from nexus_assets.definitions import defs
from nexus_assets.publish.step import publish_phase
from nexus_assets.resolve.step import Resolution, StageMissing, stage_resolution
from nexus_assets.store import Vault
from nexus_assets_tests.dagster_helpers import check_results, materialize_topic
from nexus_assets_tests.project import Project, sample_project

ACTIVE = ["nexus-server-sync", "storage-decisions"]
STAGE_TABLES = ("staged_resolutions", "staged_bricks", "staged_brick_sources")


def manifest_hashes(project: Project) -> dict[str, str]:
    with Vault.open(project.db, read_only=True) as v:
        return {t: v.bricks.latest_manifest(t).manifest_hash for t in ACTIVE}


def test_definitions_load_with_the_documented_shape():
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert keys == {"run_files", "passages", "passage_index", "raw_runs", "pointer_extractions", "validated_bricks",
                    "resolved_brick_states", "topic_manifest", "brick_embeddings", "vector_index"}
    groups = {k.to_user_string(): repo.asset_graph.get(k).group_name for k in repo.asset_graph.get_all_asset_keys()}
    assert groups == {
        "run_files": "raw_runs",
        "passages": "raw_runs",
        "passage_index": "recall",
        "raw_runs": "raw_runs",
        "pointer_extractions": "pointers",
        "validated_bricks": "bricks",
        "resolved_brick_states": "states",
        "topic_manifest": "manifest",
        "brick_embeddings": "recall",
        "vector_index": "recall",
    }
    checks = {k.name for k in repo.asset_graph.asset_check_keys}
    assert checks == {
        "hallucination_rejection", "checksum_drift", "final_immutability", "extraction_quality", "vector_index_in_step", "open_conflicts",
        "passages_verbatim", "passage_index_in_step",
    }
    assert defs.resolve_job_def("sync_topics").partitions_def.name == "topics"
    # Ingestion and the record (passages, DESIGN §3.1) are unpartitioned assets upstream of every topic partition.
    for shared in ("run_files", "passages", "passage_index"):
        assert repo.asset_graph.get(dg.AssetKey(shared)).partitions_def is None
    assert {dg.AssetKey("run_files"), dg.AssetKey("passages")} <= repo.asset_graph.get(dg.AssetKey("raw_runs")).parent_keys
    assert [s.name for s in repo.schedule_defs] == ["nightly_sync"]
    assert [s.name for s in repo.sensor_defs] == ["nexus_files_sensor"]


def test_every_active_topic_gets_bricks_and_checks_pass(project: Project):
    with dg.instance_for_test() as instance:
        for topic_id in ACTIVE:
            result = materialize_topic(project, topic_id, instance)
            assert result.success
            assert check_results(result) == {
                "hallucination_rejection": True, "checksum_drift": True, "final_immutability": True, "extraction_quality": True,
                "vector_index_in_step": True, "open_conflicts": True, "passages_verbatim": True, "passage_index_in_step": True,
            }
            meta = result.asset_materializations_for_node("topic_manifest")[0].metadata
            assert meta["bricks"].value > 0
            assert len(meta["manifest_hash"].value) == 64
            # Native metadata (docs/architecture.md): the preview is a table, counts are ints, the viewer is a URL.
            assert meta["topic_id"].value == topic_id
            assert isinstance(meta["viewer"], dg.UrlMetadataValue) and meta["viewer"].value.endswith(f"/topics/{topic_id}")
            for node in ("resolved_brick_states", "topic_manifest"):
                preview = result.asset_materializations_for_node(node)[0].metadata["preview"]
                assert isinstance(preview, dg.TableMetadataValue)
                assert [c.name for c in preview.schema.columns] == ["order", "state", "stale", "brick", "sources", "text", "from"]
                assert [r.data["order"] for r in preview.records] == list(range(len(preview.records)))
            states = result.asset_materializations_for_node("resolved_brick_states")[0].metadata
            assert isinstance(states["visible"], dg.IntMetadataValue) and states["visible"].value == meta["bricks"].value
            extraction = result.asset_materializations_for_node("pointer_extractions")[0].metadata
            assert extraction["llm_calls"].value == 0 and extraction["llm_prompt_tokens"].value == 0
            every = [m for e in result.get_asset_materialization_events() for m in e.materialization.metadata.values()]
            assert not any(isinstance(m, (dg.JsonMetadataValue, dg.MarkdownMetadataValue)) for m in every), "no JSON or Markdown behind a link"
    with Vault.open(project.db, read_only=True) as v:
        for topic_id in ACTIVE:
            visible = [b for b in v.bricks.select(topic_id) if b.state != "SUPERSEDED"]
            assert visible, topic_id
            assert [b.order_index for b in visible] == list(range(len(visible)))


def test_draft_topic_is_never_compiled(project: Project):
    with dg.instance_for_test() as instance:
        result = materialize_topic(project, "team-rituals", instance)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "DRAFT" in failure.event_specific_data.error.message
    with Vault.open(project.db, read_only=True) as v:
        assert v.bricks.select("team-rituals") == []
        assert v.bricks.latest_manifest("team-rituals") is None


def test_second_sync_leaves_every_manifest_hash_unchanged(project: Project):
    with dg.instance_for_test() as instance:
        for topic_id in ACTIVE:
            materialize_topic(project, topic_id, instance)
        first = manifest_hashes(project)
        for topic_id in ACTIVE:
            result = materialize_topic(project, topic_id, instance)
            assert result.asset_materializations_for_node("topic_manifest")[0].metadata["new_manifest"].value is False
    assert manifest_hashes(project) == first
    with Vault.open(project.db, read_only=True) as v:
        assert all(len(v.bricks.manifests(t)) == 1 for t in ACTIVE)


def test_fresh_vault_over_renamed_files_gives_the_same_hashes(tmp_path):
    a = sample_project(tmp_path / "a")
    b = Project(tmp_path / "b")
    shutil.copytree(a.topics, b.topics)
    # Same runs, other file names and folders, reverse discovery order.
    for n, path in enumerate(sorted(a.runs.rglob("*.json"), reverse=True)):
        target = b.runs / f"zz-{n}" / f"renamed-{n}.json"
        target.parent.mkdir(parents=True)
        shutil.copy(path, target)
    with dg.instance_for_test() as instance:
        for topic_id in ACTIVE:
            materialize_topic(a, topic_id, instance)
        for topic_id in reversed(ACTIVE):
            materialize_topic(b, topic_id, instance)
    assert manifest_hashes(a) == manifest_hashes(b)
    with Vault.open(a.db, read_only=True) as va, Vault.open(b.db, read_only=True) as vb:
        for t in ACTIVE:
            assert va.bricks.select(t) == vb.bricks.select(t)


def test_no_ghost_topics_improvise_bricks_show_right_after_a_sync(empty_project: Project):
    p = empty_project
    p.write_topic("ghosts", keywords=["sync"])
    from nexus_assets_tests.project import nexus_run

    p.write_run("open.json", nexus_run("r-open", [("user", "The sync is still being designed.")], status="OPEN"))
    with dg.instance_for_test() as instance:
        assert materialize_topic(p, "ghosts", instance).success
    with Vault.open(p.db, read_only=True) as v:
        (brick,) = v.bricks.select("ghosts")
        assert brick.state == "IMPROVISE"
        assert v.bricks.latest_manifest("ghosts").bricks[0].brick_id == brick.brick_id


def test_a_missing_topic_file_fails_with_a_clear_message(project: Project):
    with dg.instance_for_test() as instance:
        result = materialize_topic(project, "no-such-topic", instance)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "no valid topic file defines 'no-such-topic'" in failure.event_specific_data.error.message


def test_resolved_bricks_wait_in_the_vault_not_between_steps(project: Project):
    """Issue 11 §3: resolution stages its bricks in the vault and hands publishing only a marker
    (nothing the size of a topic is pickled or held twice); publishing empties the stage; the
    publish step re-run alone on that marker publishes nothing twice and nothing empty."""
    topic_id = ACTIVE[0]
    with dg.instance_for_test() as instance:
        result = materialize_topic(project, topic_id, instance)
        assert result.success
        # By topic (a run may cover several topic partitions): this run's one topic.
        (handed_over,) = result.output_for_node("resolved_brick_states").values()
        assert result.output_for_node("resolved_brick_states") == {topic_id: handed_over}
        assert handed_over == Resolution(staged=True, inputs_digest=handed_over.inputs_digest)
        with Vault.open(project.db, read_only=True) as v:
            assert [v.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in STAGE_TABLES] == [0, 0, 0]
            bricks, manifests = v.bricks.select(topic_id), v.bricks.manifests(topic_id)
        again = materialize_topic(project, topic_id, instance, selection=["topic_manifest"])
        assert again.success
        assert again.asset_materializations_for_node("topic_manifest")[0].metadata["new_manifest"].value is False
    with Vault.open(project.db, read_only=True) as v:
        assert v.bricks.select(topic_id) == bricks and v.bricks.manifests(topic_id) == manifests


def test_a_stage_written_in_slices_publishes_what_one_insert_would(tmp_path, monkeypatch):
    """Large topics are staged a slice at a time (bounded memory); slicing changes nothing stored."""
    import nexus_assets.resolve.records as store

    whole, sliced = sample_project(tmp_path / "whole"), sample_project(tmp_path / "sliced")
    with dg.instance_for_test() as instance:
        for topic_id in ACTIVE:
            assert materialize_topic(whole, topic_id, instance).success
        monkeypatch.setattr(store, "STAGE_SLICE", 2)
        for topic_id in ACTIVE:
            assert materialize_topic(sliced, topic_id, instance).success
    assert manifest_hashes(sliced) == manifest_hashes(whole)
    with Vault.open(whole.db, read_only=True) as a, Vault.open(sliced.db, read_only=True) as b:
        for t in ACTIVE:
            assert len(a.bricks.select(t)) > 2 * 2 and b.bricks.select(t) == a.bricks.select(t)
            assert [len(x.sources) for x in b.bricks.select(t)] == [len(x.sources) for x in a.bricks.select(t)]
        assert [b.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in STAGE_TABLES] == [0, 0, 0]


def test_resolution_streams_into_the_stage_a_slice_at_a_time(project: Project):
    """A topic's bricks are made as the stage asks for them and let go once written: when a slice
    starts, no more than one slice (and the preview) is alive as bricks. The tally the asset
    reports counts what the stage holds."""
    import gc

    from nexus_assets.core.models import Brick
    from nexus_assets.resolve.step import BrickTally, resolved_bricks

    topic_id = ACTIVE[0]
    with dg.instance_for_test() as instance:
        assert materialize_topic(project, topic_id, instance).success
    alive_per_slice = []

    def watched(bricks):
        for i, brick in enumerate(bricks):
            if i % 2 == 0:  # the stage starts a slice of 2: what is alive besides this brick?
                gc.collect()
                alive_per_slice.append(sum(1 for o in gc.get_objects() if type(o) is Brick))
            yield brick

    with Vault.open(project.db) as v:
        topic = v.topics.topic(topic_id)
        stored = v.bricks.select(topic_id)
        count, first = len(stored), stored[0].brick_id
        visible = sum(b.state != "SUPERSEDED" for b in stored)
        del stored
        # Bricks another test left alive in this process (a module's constant, a cache) are not
        # the stage's: the stage is judged by what it adds to them.
        gc.collect()
        before = sum(1 for o in gc.get_objects() if type(o) is Brick)
        tally = BrickTally(preview_limit=1)
        made = tally.counted(resolved_bricks(v, topic))
        v.stage.write(topic_id, watched(made), inputs_digest=None, slice_size=2)
        staged = v.conn.execute("SELECT count(*) FROM staged_bricks WHERE topic_id = ?", [topic_id]).fetchone()[0]
    assert count > 4 and tally.bricks == staged == count and tally.visible == visible
    assert sum(tally.states.values()) == count and [b.brick_id for b in tally.preview] == [first]
    assert len(alive_per_slice) == -(-count // 2)
    assert max(alive_per_slice) - before <= 2 + 1  # never more than a slice and the preview


def test_a_resolution_replaced_in_the_stage_is_not_published(project: Project):
    topic_id = ACTIVE[0]
    with dg.instance_for_test() as instance:
        assert materialize_topic(project, topic_id, instance).success
    with Vault.open(project.db) as v:
        topic = v.topics.topic(topic_id)
        bricks = v.bricks.select(topic_id)
        manifests = v.bricks.manifests(topic_id)
        stage_resolution(v, topic, bricks[:1], inputs_digest="newer")
        with pytest.raises(StageMissing, match="no longer staged"):
            publish_phase(v, topic, Resolution(staged=True, inputs_digest="older"), dagster_run_id=None)
        assert v.bricks.select(topic_id) == bricks and v.bricks.manifests(topic_id) == manifests
        # The stage that is there publishes as usual.
        manifest, recorded = publish_phase(v, topic, Resolution(staged=True, inputs_digest="newer"), dagster_run_id=None)
        latest = v.bricks.latest_manifest(topic_id)
        assert recorded and manifest.manifest_hash == latest.manifest_hash and manifest.bricks == 1
        assert [e.brick_id for e in latest.bricks] == [bricks[0].brick_id]
        assert [v.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in STAGE_TABLES] == [0] * len(STAGE_TABLES)
