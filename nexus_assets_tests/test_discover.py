"""`nexus discover`: proposals from recent runs, written as DRAFT topic files for a person to review.

Never a duplicate (of a topic_id or of a topic's keywords), never an overwritten file, and a
second run over the same runs writes nothing.
"""

import shutil
from pathlib import Path

import pytest

from nexus_assets.core.discovery import duplicate_of, propose_topics
from nexus_assets.core.models import ExtractionPolicy, Topic
from nexus_assets.core.scope import keyword_pattern
from nexus_assets.topicfiles import read_topic_file, read_topic_files
from nexus_assets.usecases.lifecycle import topic_history
from nexus_assets.usecases.planning import current_runs
from nexus_assets.vault.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project, sample_project


def discover(capsys, p: Project, *extra: str, expect: int = 0) -> dict:
    return run_json(capsys, *p.cli_args(), "discover", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics), *extra, expect=expect)


def file_bytes(p: Project) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(p.topics.glob("*.yaml"))}


def test_discover_writes_sensible_draft_topics_on_the_sample_data(project: Project, capsys):
    shipped = {tf.topic.topic_id: tf.topic for tf in read_topic_files(project.topics)}
    report = discover(capsys, project)
    assert report["extractor"] == "embedded" and report["runs_considered"] == 8
    written = report["written"]
    assert len(written) >= 3
    corpus = "\n".join(path.read_text() for path in project.runs.rglob("*.json"))
    claimed = {k for t in shipped.values() for k in t.extraction_policy.required_keywords}
    for w in written:
        tf = read_topic_file(Path(w["path"]))
        topic = tf.topic
        assert topic is not None, tf.problem
        assert topic.state == "DRAFT" and topic.topic_id == w["topic_id"] == Path(w["path"]).stem
        assert topic.topic_id not in shipped
        keywords = topic.extraction_policy.required_keywords
        assert 2 <= len(keywords) and not set(keywords) & claimed
        assert duplicate_of(keywords, list(shipped.values())) is None
        for k in keywords:
            assert keyword_pattern((k,)).search(corpus), k
        assert len(w["evidence"]) >= 2
        assert topic.extraction_policy.scope_description and topic.display_name
        text = Path(w["path"]).read_text()
        assert text.startswith("# Proposed by `nexus discover`") and f"nexus activate {topic.topic_id}" in text
    # Proposals do not repeat each other either.
    ids = [w["topic_id"] for w in written]
    assert len(set(ids)) == len(ids)
    for i, w in enumerate(written):
        others = [read_topic_file(Path(o["path"])).topic for o in written[:i]]
        assert duplicate_of(w["required_keywords"], others) is None

    # The vault remembers who proposed them.
    with Vault.open(project.db, read_only=True) as v:
        for w in written:
            assert v.topic_state(w["topic_id"]) == "DRAFT"
            (h,) = topic_history(v, w["topic_id"])
            assert h["to_state"] == "DRAFT" and h["actor"].endswith("(nexus discover)")


def test_running_discover_twice_writes_nothing_the_second_time(project: Project, capsys):
    first = discover(capsys, project)
    assert first["written"]
    after_first = file_bytes(project)
    second = discover(capsys, project)
    assert second["written"] == [] and second["skipped"] == []
    assert file_bytes(project) == after_first
    code, out, _ = run_cli(capsys, *project.cli_args(), "discover", "--runs-dir", str(project.runs), "--topics-dir", str(project.topics))
    assert code == 0 and "no new topics to propose" in out


def test_discover_is_deterministic(tmp_path: Path, capsys):
    a, b = sample_project(tmp_path / "a"), sample_project(tmp_path / "b")
    discover(capsys, a)
    discover(capsys, b)
    assert file_bytes(a) == file_bytes(b)


def test_discover_never_overwrites_a_file(tmp_path: Path, capsys):
    probe = sample_project(tmp_path / "probe")
    first = discover(capsys, probe)["written"][0]["topic_id"]
    p = sample_project(tmp_path / "proj")
    mine = p.topics / f"{first}.yaml"
    mine.write_text("# my own notes, not a topic yet\n", encoding="utf-8")
    report = discover(capsys, p)
    assert first not in [w["topic_id"] for w in report["written"]]
    assert any(s["topic_id"] == first and "already exists" in s["reason"] for s in report["skipped"])
    assert mine.read_text() == "# my own notes, not a topic yet\n"


def test_a_rejected_proposal_is_not_proposed_again(project: Project, capsys):
    written = discover(capsys, project)["written"]
    Path(written[0]["path"]).unlink()  # a person rejects it
    again = discover(capsys, project)
    assert again["written"] == []


def test_a_proposal_is_compiled_only_after_a_person_activates_it(project: Project, capsys):
    proposal = discover(capsys, project)["written"][0]["topic_id"]
    code, _, err = run_cli(capsys, *project.sync_args(proposal))
    assert code == 2 and "DRAFT" in err
    run_json(capsys, *project.cli_args(), "activate", proposal, "--topics-dir", str(project.topics))
    (result,) = run_json(capsys, *project.sync_args(proposal))
    assert result["success"]
    assert run_json(capsys, *project.cli_args(), "bricks", proposal)


def test_nothing_is_proposed_where_existing_topics_claim_the_terms():
    from nexus_assets_tests.project import SAMPLE_RUNS

    runs = current_runs(SAMPLE_RUNS)
    proposals = propose_topics(runs, [])
    assert proposals
    claiming = [
        Topic(
            topic_id=f"t{i}",
            display_name="x",
            extraction_policy=ExtractionPolicy(scope_description="x", required_keywords=p.topic.extraction_policy.required_keywords),
            state="ACTIVE",
        )
        for i, p in enumerate(proposals)
    ]
    assert propose_topics(runs, claiming) == []
    assert propose_topics(list(reversed(runs)), []) == proposals


@pytest.mark.parametrize(
    "mine, theirs, duplicate",
    [
        (["vault", "duckdb"], ["duckdb", "vault"], True),
        (["Vaults", "DuckDB"], ["duckdb", "vault"], True),  # plural and case fold
        (["vault"], ["duckdb", "vault", "parquet"], True),  # contained
        (["vault", "duckdb", "standup"], ["duckdb", "vault"], True),  # mostly shared
        (["standup", "review"], ["duckdb", "vault"], False),
        (["vault", "standup", "review", "oncall"], ["duckdb", "vault", "parquet"], False),
    ],
)
def test_duplicate_keyword_sets(mine, theirs, duplicate):
    existing = Topic(
        topic_id="storage", display_name="s", extraction_policy=ExtractionPolicy(scope_description="s", required_keywords=tuple(theirs))
    )
    assert (duplicate_of(mine, [existing]) == "storage") is duplicate


def test_discover_needs_runs(empty_project: Project, capsys):
    code, _, err = run_cli(capsys, *empty_project.cli_args(), "discover", "--runs-dir", str(empty_project.runs), "--topics-dir", str(empty_project.topics))
    assert code == 2 and "no readable runs" in err
    code, _, err = run_cli(capsys, *empty_project.cli_args(), "discover", "--runs-dir", str(empty_project.root / "nope"))
    assert code == 2 and "does not exist" in err


def test_recent_limits_the_runs_looked_at(project: Project, capsys):
    report = discover(capsys, project, "--recent", "3")
    assert report["runs_considered"] == 3
    shutil.rmtree(project.topics)
    assert discover(capsys, project, "--recent", "3", "--max", "1")["runs_considered"] == 3
