"""The sync service (docs/agents.md, issue 41): one home below the shells. Inputs are checked before
anything is written; a sync runs the Dagster jobs and reports per topic; the "nothing changed"
digest skips the second sync; a forced one compiles anyway; runs carry the caller's tags. The CLI
is a shell over it: its --json results are the service's."""

from __future__ import annotations

import ast
from pathlib import Path

import dagster as dg
import pytest

from nexus_assets.topics.selection import select_topics
from nexus_assets.defs.tags import SYNC_JOB_TAG, SYNC_TOPICS_TAG
from nexus_assets.services.sync import SyncEvent, SyncInputError, SyncRequest, check, run
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import Project, REPO

ACTIVE = ["nexus-server-sync", "storage-decisions"]


def request_for(p: Project, **kw) -> SyncRequest:
    return SyncRequest(db=str(p.db), runs_dir=str(p.runs), topics_dir=str(p.topics), no_recall=True, **kw)


def test_check_refuses_bad_inputs_before_anything_is_written(project: Project, tmp_path: Path):
    cases = [
        (dict(topics=("nope",)), "unknown topic 'nope'"),
        (dict(topics=("team-rituals",)), "activate it first"),
        (dict(batch=True), "--batch applies to the openai extractor"),
        (dict(open_after="yesterday"), "is not an ISO time"),
    ]
    for options, message in cases:
        with pytest.raises(SyncInputError, match=message):
            check(request_for(project, **options))
    with pytest.raises(SyncInputError, match="runs folder .* does not exist"):
        check(SyncRequest(db=str(project.db), runs_dir=str(tmp_path / "missing"), topics_dir=str(project.topics)))
    assert not project.db.exists()


def test_selection_is_every_active_topic_and_says_what_it_leaves_out(project: Project):
    selection = select_topics(project.topics)
    assert selection.selected == ACTIVE
    assert selection.skipped == ["team-rituals"]
    assert selection.warnings == ["not compiled (not ACTIVE): team-rituals"]


def test_run_compiles_then_skips_when_nothing_changed_and_force_compiles_again(project: Project):
    events: list[SyncEvent] = []
    first = run(check(request_for(project)), on_event=events.append)
    assert not first.failed and not first.unchanged
    assert [r["topic_id"] for r in first.results] == ACTIVE
    assert all(r["success"] and r["manifest_hash"] and r["dagster_run_id"] for r in first.results)
    assert [e.kind for e in events] == ["ingesting", "compiling", "compiling"]
    assert len(first.dagster_run_ids) == 1  # one run: the files ingested, then both topics (a range of partitions)

    second = run(check(request_for(project)))
    assert second.unchanged and second.dagster_run_ids == []
    assert [r["manifest_hash"] for r in second.results] == [r["manifest_hash"] for r in first.results]

    forced = run(check(request_for(project, force=True, topics=("storage-decisions",))))
    assert not forced.unchanged and [r["topic_id"] for r in forced.results] == ["storage-decisions"]


def test_runs_carry_the_callers_tags_on_the_instance_it_passes(project: Project):
    with dg.instance_for_test() as instance:
        outcome = run(check(request_for(project, topics=("storage-decisions",), tags={SYNC_JOB_TAG: "job-1"})), instance=instance)
        records = instance.get_run_records(filters=dg.RunsFilter(tags={SYNC_JOB_TAG: "job-1"}))
        assert sorted(r.dagster_run.run_id for r in records) == sorted(outcome.dagster_run_ids)
        assert {r.dagster_run.tags[SYNC_TOPICS_TAG] for r in records} == {"storage-decisions"}
        assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records)


def test_the_cli_prints_the_services_results(project: Project, capsys):
    via_cli = run_json(capsys, *project.sync_args("storage-decisions"), "--no-recall")
    via_service = run(check(request_for(project, topics=("storage-decisions",))))
    assert via_service.unchanged  # the CLI's sync left the digest the service compares with
    assert [(r["topic_id"], r["manifest_hash"], r["bricks"]) for r in via_cli] == [
        (r["topic_id"], r["manifest_hash"], r["bricks"]) for r in via_service.results
    ]


def test_cli_sync_is_parsing_and_printing_only():
    """No Dagster, vault or topic-file code in the shell: those belong to the service."""
    source = (REPO / "nexus_assets" / "cli" / "sync.py").read_text(encoding="utf-8")
    imported = {
        node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom) and node.module
    }
    # Besides the service: the parser's plumbing (its flags, the registered extractor names).
    plumbing = {"typing", "nexus_assets.cli.parsing", "nexus_assets.extract.registry"}
    assert imported <= {"__future__", "nexus_assets.cli.common", "nexus_assets.topics.selection", "nexus_assets.services.sync", "pathlib", *plumbing}, imported
    for name in ("execute_in_process", "DagsterInstance", "record_topic_files", "Vault", "canonical_json"):
        assert name not in source, name
