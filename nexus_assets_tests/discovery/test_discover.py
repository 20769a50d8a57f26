"""`nexus discover`: proposals from recent runs, written as DRAFT topic files for a person to review.

At most a handful, each a subject several conversations are about, with those conversations as
its evidence; never keyword noise (assistant boilerplate, everyday words). Never a duplicate (of a
topic_id or of a topic's keywords), never an overwritten file, and a second run over the same
runs writes nothing. A proposal a person rejects by deleting its file leaves the vault at the
next sync and is not proposed again.
"""

import shutil
from pathlib import Path

import duckdb
import pytest

from nexus_assets.core.models import ExtractionPolicy, Topic
from nexus_assets.discovery.rules import (
    MAX_PROPOSALS,
    MAX_RUN_SHARE,
    duplicate_of,
    min_evidence,
    propose_topics,
    stem,
    survey,
)
from nexus_assets.lifecycle.step import topic_history
from nexus_assets.llm.planning import current_runs
from nexus_assets.topics.files import read_topic_file, read_topic_files
from nexus_assets.vault.migrations import MIGRATIONS, schema_version
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.generated_export import (
    BOILERPLATE,
    FILLER,
    THEMES,
    GeneratedExport,
    generate_export,
)
from nexus_assets_tests.project import Project, nexus_run, sample_project


def discover(capsys, p: Project, *extra: str, expect: int = 0) -> dict:
    return run_json(capsys, *p.cli_args(), "discover", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics), *extra, expect=expect)


def file_bytes(p: Project) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(p.topics.glob("*.yaml"))}


def themed_project(root: Path) -> tuple[Project, GeneratedExport]:
    """The sample project plus a generated ChatGPT export: 5 subjects people return to (24
    conversations each) among 200 one-off questions, every reply padded with boilerplate."""
    project = sample_project(root)
    return project, generate_export(project.runs)


@pytest.fixture
def themed(tmp_path: Path) -> Project:
    return themed_project(tmp_path / "themed")[0]


def theme_of(keywords) -> str | None:
    """The generated subject whose vocabulary holds every keyword, if any."""
    stems = {stem(k.casefold()) for k in keywords}
    return next((name for name, vocab in THEMES.items() if stems <= {stem(w) for w in vocab}), None)


def test_discover_proposes_a_handful_of_subjects_people_return_to(tmp_path: Path, capsys):
    """On an export where a real one gave 100 proposals of keyword noise: the five subjects, each
    with the conversations about it as evidence, and nothing else."""
    project, export = themed_project(tmp_path / "themed")
    shipped = {tf.topic.topic_id: tf.topic for tf in read_topic_files(project.topics)}
    report = discover(capsys, project)
    assert report["extractor"] == "embedded" and report["runs_considered"] == 200
    written = report["written"]
    assert len(written) <= MAX_PROPOSALS
    noise = {stem(w.casefold()) for phrase in BOILERPLATE for w in phrase.replace(".", "").split()} | set(FILLER)
    found = {}
    for w in written:
        tf = read_topic_file(Path(w["path"]))
        topic = tf.topic
        assert topic is not None, tf.problem
        assert topic.state == "DRAFT" and topic.topic_id == w["topic_id"] == Path(w["path"]).stem
        keywords = topic.extraction_policy.required_keywords
        assert not {stem(k) for k in keywords} & noise, f"keyword noise in {w['topic_id']}: {keywords}"
        theme = theme_of(keywords)
        assert theme is not None, f"{w['topic_id']} {keywords} is no subject of the export"
        about = export.conversations_about(theme)
        assert len(w["evidence"]) >= min_evidence(200) and {e for e in w["evidence"] if e not in about} == set(), (
            f"{w['topic_id']}: its evidence is conversations about {theme}"
        )
        assert duplicate_of(keywords, list(shipped.values())) is None and topic.topic_id not in shipped
        text = Path(w["path"]).read_text()
        assert text.startswith("# Proposed by `nexus discover`") and f"nexus activate {topic.topic_id}" in text
        assert f"Seen in: {w['evidence'][0]}" in text
        found[theme] = w["topic_id"]
    assert sorted(found) == sorted(THEMES), "each subject once"

    # The vault remembers who proposed them.
    with Vault.open(project.db, read_only=True) as v:
        for w in written:
            assert v.topic_state(w["topic_id"]) == "DRAFT"
            (h,) = topic_history(v, w["topic_id"])
            assert h["to_state"] == "DRAFT" and h["actor"].endswith("(nexus discover)")
    code, out, _ = run_cli(capsys, *project.cli_args(), "topics")
    assert code == 0


def test_the_sample_data_gets_no_keyword_noise(project: Project, capsys):
    """Eight runs about one project that the shipped topics already cover: nothing worth proposing
    (this wrote 7 DRAFT topics of keyword noise)."""
    report = discover(capsys, project)
    assert report["runs_considered"] == 8 and report["written"] == []
    code, out, _ = run_cli(capsys, *project.cli_args(), "discover", "--runs-dir", str(project.runs), "--topics-dir", str(project.topics))
    assert code == 0 and out.splitlines()[0] == "looked at 8 recent runs (embedded)"
    assert "no new topics to propose; a topic needs at least 3 of the 8 conversations about one subject" in out


def test_nothing_to_propose_says_what_it_read_and_what_a_topic_needs(empty_project: Project, capsys):
    """Issue 59 item 4: not a bare "no new topics to propose". It says how many conversations it
    read, how many an existing topic already covers, the bar a proposal clears (the real
    thresholds of discovery/rules.py) and how near the runs came to it, in --json too."""
    p = empty_project
    garden = [("user", "The garden needs water."), ("assistant", "Water the garden at dawn.")]
    tomato = [("user", "My tomato plants wilt in the sun."), ("assistant", "Shade the tomato at noon.")]
    for i, turns in enumerate([garden, garden, tomato, tomato, [("user", "Hello there."), ("assistant", "Hi.")]]):
        p.write_run(f"r{i}.json", nexus_run(f"run-{i}", turns, start=f"2026-01-0{i + 1}T00:00:00Z"))
    p.write_topic("garden", keywords=["garden"])

    report = discover(capsys, p)
    assert report["written"] == [] and report["runs_considered"] == 5
    assert report["runs_covered"] == 2, "the two garden conversations are the garden topic's"
    assert report["needs"]["min_conversations"] == min_evidence(5) == 3
    assert report["needs"]["min_terms"] == 2 and report["needs"]["max_term_share"] == MAX_RUN_SHARE
    assert report["strongest"] == {"term": "tomato", "conversations": 2}, "two conversations are about tomatoes; a topic needs three"
    assert {"extractor", "written", "skipped", "llm_call"} <= set(report), "fields are added, never removed"

    code, out, _ = run_cli(capsys, *p.cli_args(), "discover", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics))
    assert code == 0 and out.splitlines() == [
        "looked at 5 recent runs (embedded)",
        "2 of them mention an existing topic's keywords (already covered: those are never proposed again)",
        "no new topics to propose; a topic needs at least 3 of the 5 conversations about one subject: a new term the "
        "person says that comes up in two of a conversation's messages, with another new term in the same "
        "conversations (neither in more than 50% of all of them)",
        "the new term most conversations are about is 'tomato' (2 of 5)",
    ]


def test_a_rejected_proposal_covers_no_conversation(tmp_path: Path):
    """A deleted DRAFT is never proposed again, but the runs it was about are not covered by a
    topic the person has."""
    export = generate_export(tmp_path / "runs")
    runs = current_runs(tmp_path / "runs")
    (first, *_), read = survey(runs, [])
    assert read.runs_covered == 0 and export.subject_of
    _, with_topic = survey(runs, [first.topic])
    assert with_topic.runs_covered >= len(first.evidence)
    _, rejected = survey(runs, [first.topic], covering=[])
    assert rejected.runs_covered == 0


def test_running_discover_twice_writes_nothing_the_second_time(themed: Project, capsys):
    first = discover(capsys, themed)
    assert first["written"]
    after_first = file_bytes(themed)
    second = discover(capsys, themed)
    assert second["written"] == [] and second["skipped"] == []
    assert file_bytes(themed) == after_first
    code, out, _ = run_cli(capsys, *themed.cli_args(), "discover", "--runs-dir", str(themed.runs), "--topics-dir", str(themed.topics))
    assert code == 0 and "no new topics to propose" in out


def test_discover_is_deterministic(tmp_path: Path, capsys):
    (a, _), (b, _) = themed_project(tmp_path / "a"), themed_project(tmp_path / "b")
    discover(capsys, a)
    discover(capsys, b)
    assert file_bytes(a) == file_bytes(b)


def test_discover_never_overwrites_a_file(tmp_path: Path, capsys):
    probe, _ = themed_project(tmp_path / "probe")
    first = discover(capsys, probe)["written"][0]["topic_id"]
    p, _ = themed_project(tmp_path / "proj")
    mine = p.topics / f"{first}.yaml"
    mine.write_text("# my own notes, not a topic yet\n", encoding="utf-8")
    report = discover(capsys, p)
    assert first not in [w["topic_id"] for w in report["written"]]
    assert any(s["topic_id"] == first and "already exists" in s["reason"] for s in report["skipped"])
    assert mine.read_text() == "# my own notes, not a topic yet\n"


def test_a_rejected_proposal_is_not_proposed_again(themed: Project, capsys):
    written = discover(capsys, themed)["written"]
    Path(written[0]["path"]).unlink()  # a person rejects it
    again = discover(capsys, themed)
    assert again["written"] == []


def test_a_deleted_draft_leaves_the_vault_at_the_next_sync_and_is_not_proposed_again(themed: Project, capsys):
    written = discover(capsys, themed)["written"]
    rejected, kept = written[0]["topic_id"], [w["topic_id"] for w in written[1:]]
    assert all(r["success"] for r in run_json(capsys, *themed.sync_args()))
    assert rejected in {t["topic_id"] for t in run_json(capsys, *themed.cli_args(), "topics")}
    Path(written[0]["path"]).unlink()  # a person rejects it
    (themed.topics / "storage-decisions.yaml").unlink()  # an ACTIVE topic with bricks: never dropped
    assert all(r["success"] for r in run_json(capsys, *themed.sync_args()))
    listed = {t["topic_id"]: t["state"] for t in run_json(capsys, *themed.cli_args(), "topics")}
    assert rejected not in listed
    assert all(listed[t] == "DRAFT" for t in kept) and listed["team-rituals"] == "DRAFT"
    assert listed["storage-decisions"] == "ACTIVE" and run_json(capsys, *themed.cli_args(), "bricks", "storage-decisions")
    with Vault.open(themed.db, read_only=True) as v:
        *_, last = topic_history(v, rejected)
    assert (last["from_state"], last["to_state"]) == ("DRAFT", "DROPPED") and last["actor"] == "topic file: its file was deleted"
    assert discover(capsys, themed)["written"] == [], "a rejected proposal is not proposed again"
    # A person who wants it after all writes the file again: it is a DRAFT topic once more.
    again = themed.topics / f"{rejected}.yaml"
    again.write_text(f"topic_id: {rejected}\ndisplay_name: Back\nextraction_policy:\n  scope_description: x\n  required_keywords: [tax]\n")
    run_json(capsys, *themed.sync_args())
    assert {t["topic_id"]: t["state"] for t in run_json(capsys, *themed.cli_args(), "topics")}[rejected] == "DRAFT"


def test_a_vault_from_before_dropped_drafts_opens_and_drops_a_deleted_draft(project: Project, capsys):
    """The migration that adds `dropped_topics`: an older vault holding a DRAFT topic opens, and
    the sync after its file is deleted drops it."""
    (version,) = [m.version for m in MIGRATIONS if "dropped_topics" in m.sql]
    run_json(capsys, *project.sync_args())
    with duckdb.connect(str(project.db)) as con:
        con.execute("DROP TABLE dropped_topics")
        con.execute("DELETE FROM schema_version WHERE version >= ?", [version])
        assert schema_version(con) == version - 1
    (project.topics / "team-rituals.yaml").unlink()
    run_json(capsys, *project.sync_args())
    assert "team-rituals" not in {t["topic_id"] for t in run_json(capsys, *project.cli_args(), "topics")}
    with Vault.open(project.db, read_only=True) as v:
        assert v.conn.execute("SELECT topic_id FROM dropped_topics").fetchall() == [("team-rituals",)]


def test_a_proposal_is_compiled_only_after_a_person_activates_it(themed: Project, capsys):
    proposal = discover(capsys, themed)["written"][0]["topic_id"]
    code, _, err = run_cli(capsys, *themed.sync_args(proposal))
    assert code == 2 and "DRAFT" in err
    run_json(capsys, *themed.cli_args(), "activate", proposal, "--topics-dir", str(themed.topics))
    (result,) = run_json(capsys, *themed.sync_args(proposal))
    assert result["success"]
    assert run_json(capsys, *themed.cli_args(), "bricks", proposal)


def test_nothing_is_proposed_where_existing_topics_claim_the_terms(tmp_path: Path):
    export = generate_export(tmp_path / "runs")
    runs = current_runs(tmp_path / "runs")
    proposals = propose_topics(runs, [])
    assert proposals and len(proposals) <= MAX_PROPOSALS and export.subject_of
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
