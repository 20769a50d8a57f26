"""A pushed run compiled in the server's process (issue 52 item 2, services/compile_push.py), below HTTP: the
same bricks and manifest hash as `nexus sync` over the same files (pure function), each step
recorded as a runless Dagster materialization of its asset and topic partition, a second compile
adds nothing, a topic whose file changed goes to a full sync, and a corrupt pushed file is one
ingestion error naming it. (test_push_live.py drives the same through a real `nexus api`.)"""

from __future__ import annotations

import dagster as dg
import pytest

from nexus_assets.services import queries
from nexus_assets.services.requests import BricksPage
from nexus_assets.ingest.push import append_messages, put_run
from nexus_assets.services.compile_push import NeedsSync, PushCompile, catch_up, compile_push
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import Project

SAID = [
    "We deploy the billing service on Fridays because traffic is lowest then.",
    "The database moves to Postgres in March because the deploy needs two writers.",
    "Keep the deploy window at one hour so the database backup finishes first.",
]


def project(tmp_path, name: str = "proj") -> Project:
    p = Project(tmp_path / name)
    p.runs.mkdir(parents=True)
    p.write_topic("ops", keywords=["deploy", "database"])
    p.write_topic("other", keywords=["garden"])
    assert run_nexus(*p.sync_args()).returncode == 0  # an empty vault that knows its folders
    return p


def job(p: Project, *files, topics=("ops",)) -> PushCompile:
    return PushCompile(str(p.db), p.runs, p.topics, tuple(files), tuple(topics))


def test_a_compiled_push_gives_the_bricks_and_manifest_hash_of_a_full_sync(tmp_path):
    pushed = project(tmp_path, "pushed")
    first = append_messages(pushed.runs, "agent-1", [{"id": "m1", "role": "user", "content": SAID[0]}])
    first_version = first.path.read_text(encoding="utf-8")
    with dg.instance_for_test() as instance:
        outcome = compile_push(job(pushed, first.path), instance=instance)
        grown = append_messages(pushed.runs, "agent-1", [{"id": "m2", "role": "assistant", "content": SAID[1]},
                                                         {"id": "m3", "role": "user", "content": SAID[2]}])
        again = compile_push(job(pushed, grown.path), instance=instance)
        manifests = instance.fetch_materializations(dg.AssetKey("topic_manifest"), limit=10).records
        extracted = instance.fetch_materializations(dg.AssetKey("pointer_extractions"), limit=10).records
        ingested = instance.fetch_materializations(dg.AssetKey("run_files"), limit=10).records
    assert [r["success"] for r in outcome.results + again.results] == [True, True] and not again.failed
    assert [b.content for b in queries.bricks(pushed.db, BricksPage(topic_id="ops"))] == SAID
    assert {b.state for b in queries.bricks(pushed.db, BricksPage(topic_id="ops"))} == {"IMPROVISE"}, "an OPEN run's bricks are IMPROVISE"

    # The index the second push followed from the first one's (only new vectors read) is the one a
    # build from the vault gives: same rows, same order, same vectors.
    from nexus_assets.recall.index import build, load
    from nexus_assets.store import Vault

    followed = load(pushed.db, "ops")
    with Vault.open(pushed.db) as vault:
        built = build(vault, pushed.db, "ops")
    assert followed.brick_ids == built.brick_ids and len(built.brick_ids) == 3
    assert (followed.index.reconstruct_n(0, 3) == built.index.reconstruct_n(0, 3)).all()
    assert followed.manifest_hash == built.manifest_hash == again.results[0]["manifest_hash"]

    # What the UI shows: each step a materialization of its asset, for the topic's partition.
    assert len(manifests) == 2 and {r.partition_key for r in manifests} == {"ops"}
    assert manifests[0].asset_materialization.metadata["manifest_hash"].value == again.results[0]["manifest_hash"]
    assert {r.partition_key for r in extracted} == {"ops"} and ingested[0].partition_key is None

    # The same two versions of the file synced by `nexus sync` give the same manifests (a manifest
    # is hash-chained to the one before, so the history matters too): the push path is the compiler.
    synced = Project(tmp_path / "synced")
    synced.topics.mkdir(parents=True)
    for name in ("ops", "other"):
        (synced.topics / f"{name}.yaml").write_bytes((pushed.topics / f"{name}.yaml").read_bytes())
    copy = synced.runs / "pushed" / "agent-1.json"
    copy.parent.mkdir(parents=True)
    assert run_nexus(*synced.sync_args()).returncode == 0  # as `project` does: the empty topic's first manifest
    copy.write_text(first_version, encoding="utf-8")
    assert run_nexus(*synced.sync_args()).returncode == 0
    assert queries.manifest(synced.db, "ops").manifest_hash == outcome.results[0]["manifest_hash"]
    copy.write_bytes(grown.path.read_bytes())
    assert run_nexus(*synced.sync_args()).returncode == 0
    assert queries.manifest(synced.db, "ops").manifest_hash == again.results[0]["manifest_hash"]

    # Compiling the same push again, or syncing after it, adds nothing.
    hash_before = again.results[0]["manifest_hash"]
    assert compile_push(job(pushed, grown.path)).results[0]["manifest_hash"] == hash_before
    assert run_nexus(*pushed.sync_args()).returncode == 0
    assert queries.manifest(pushed.db, "ops").manifest_hash == hash_before
    assert [b.content for b in queries.bricks(pushed.db, BricksPage(topic_id="ops"))] == SAID


def test_a_topic_changed_since_the_last_sync_is_left_to_a_full_sync(tmp_path):
    p = project(tmp_path)
    pushed = put_run(p.runs, "agent-2", {"status": "CLOSED", "messages": [{"role": "user", "content": SAID[0]}]})
    p.write_topic("ops", keywords=["deploy"])  # not recorded by any sync yet
    with pytest.raises(NeedsSync, match="topic 'ops' changed since the last sync"):
        compile_push(job(p, pushed.path))
    assert queries.bricks(p.db, BricksPage(topic_id="ops")) == [], "nothing was written"
    with pytest.raises(NeedsSync, match="openai"):
        compile_push(PushCompile(str(p.db), p.runs, p.topics, (pushed.path,), ("ops",), extractor="openai"))


def test_a_corrupt_pushed_file_is_one_error_naming_it_and_costs_nothing_else(tmp_path):
    p = project(tmp_path)
    good = put_run(p.runs, "agent-3", {"status": "OPEN", "messages": [{"role": "user", "content": SAID[1]}]})
    bad = p.runs / "pushed" / "broken.json"
    bad.write_bytes(b'{"run_id": "broken", "status": "OPEN", "messages": [')
    files, topics = catch_up(str(p.db), p.runs, p.topics)
    assert set(files) == {good.path, bad} and topics == ["ops", "other"], "every topic without sources reads a pushed run"
    outcome = compile_push(job(p, *files, topics=topics))
    assert len(outcome.ingest_errors) == 1 and "broken.json" in outcome.ingest_errors[0], outcome.ingest_errors
    assert outcome.failed and [r["errors"] for r in outcome.results] == [outcome.ingest_errors] * 2
    assert [b.content for b in queries.bricks(p.db, BricksPage(topic_id="ops"))] == [SAID[1]], "the good push is compiled all the same"
    with queries.open_read(p.db) as vault:
        errors = [e for e in vault.runs.ingestion_errors() if "broken.json" in e["file"]]
    assert len(errors) == 1, errors
    # Read once: catching up again finds only what is still unread (nothing), and records no second error.
    assert catch_up(str(p.db), p.runs, p.topics)[0] == []


def test_a_push_that_a_catch_all_topic_keeps_nothing_of_says_why(tmp_path):
    """The fault seen: a closed one-message push made no brick in a catch-all topic. Its cause: a
    topic without required_keywords keeps a sentence only when it is near the scope description
    (min_relevance, default 0.35), and "Everything said." is near no sentence. The push's result
    says so in one line; with min_relevance 0 the same push is a brick."""
    import yaml

    p = Project(tmp_path / "proj")
    p.runs.mkdir(parents=True)
    p.topics.mkdir(parents=True)
    topic = {"topic_id": "everything", "display_name": "All", "state": "ACTIVE",
             "extraction_policy": {"scope_description": "Everything said."}}
    (p.topics / "everything.yaml").write_text(yaml.safe_dump(topic), encoding="utf-8")
    assert run_nexus(*p.sync_args()).returncode == 0
    one = put_run(p.runs, "one", {"status": "CLOSED", "messages": [{"role": "user", "content": SAID[0]}]})
    [result] = compile_push(job(p, one.path, topics=("everything",))).results
    assert result["success"] and result["kept"] == 0 and queries.bricks(p.db, BricksPage(topic_id="everything")) == []
    assert "run one: 1 sentences not kept (1 by relevance" in result["note"], result
    assert "has no required_keywords" in result["note"] and "min_relevance: 0" in result["note"]

    (p.topics / "everything.yaml").write_text(yaml.safe_dump({**topic, "min_relevance": 0}), encoding="utf-8")
    assert run_nexus(*p.sync_args()).returncode == 0
    assert [b.content for b in queries.bricks(p.db, BricksPage(topic_id="everything"))] == [SAID[0]]


def test_a_push_whose_keywords_are_only_in_hidden_messages_says_so_as_a_sync_does(tmp_path):
    """Issue 59 item 6 through a push: the result carries `keywords_only_hidden`, as `nexus sync --json`'s does."""
    from nexus_assets_tests.sessions import claude_event, write_lines

    p = project(tmp_path)
    session = p.runs / "claude" / "s.jsonl"
    lines = [claude_event("user", 1, "Plan the week."),
             claude_event("assistant", 2, [{"type": "thinking", "thinking": "The deploy is on Friday.", "signature": "c2ln"},
                                           {"type": "text", "text": "Monday is planning day."}], parent=1)]
    write_lines(session, [{**line, "sessionId": "session-1"} for line in lines])
    result = compile_push(job(p, session)).results[0]
    assert result["success"] and result["keywords_only_hidden"]["runs"] == 1
    assert result["keywords_only_hidden"]["messages"] == 1 and "include_hidden: true" in result["keywords_only_hidden"]["note"]
